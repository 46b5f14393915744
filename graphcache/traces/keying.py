"""A trace's key, computed before tracing from everything tracing can read (named parts, keys.py's way).

- ``code``: the Python side (walk.py): the function's code, what it reaches, the plain values it reads,
  the variables and eager tensors it can capture; for a method, also its object's class and the attributes
  its code reads (instance.py); for Keras' predict step, the model (kerasstep.py); for its
  train and test steps, the model, optimizer, losses and metrics (kerasfit.py);
- ``signature``: the FunctionType TensorFlow traces for (each argument's TraceType: TensorSpecs with shape
  and dtype, Python values as literals; after reduce_retracing's generalization), the function's own
  declared type (input_signature included) and its default values;
- ``options``: the tf.function's name, autograph and its options, reduce_retracing, the FunctionDef
  attributes (jit_compile, experimental_attributes, ...), the variable-creation scope of the trace;
- ``context``: the eager device scope, the global random seed (stateful random ops take their seeds from it
  at trace time), NumPy-behaviour switches;
- ``versions``: Python (bytecode), TensorFlow, graphcache, and each library package the walk named;
- ``identity``: the compiler identity (the cache's).

Refused here (``walk.Uncacheable``): traces inside another graph (a nested tf.function is part of its
caller's trace), under a distribution strategy or a SavedModel export, with graph transforms or
concrete-function callbacks registered, and arguments whose TraceType cannot be serialized.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import function_context, transform
from tensorflow.python.framework import ops
from tensorflow.python.saved_model import save_context

from ..entry.keyparts import combine, hash_json, hash_text
from ..version import package_version
from . import instance, kerasfit, kerasstep
from .walk import Uncacheable, Walk
from .walk import package_version as library_version

log = logging.getLogger("graphcache")

PART_ORDER = ("code", "signature", "options", "context", "versions", "identity")


@dataclass
class TraceKey:
    key: str
    parts: dict[str, str]
    walk: Walk


def check_context(scope_type: Any) -> Any:
    """The FunctionContext TensorFlow keys this trace by, when graphcache can cache a trace in it."""
    if not context.executing_eagerly() or ops.inside_function():
        raise Uncacheable("context", "traced inside another graph (it is part of that graph's trace)")
    if ops.get_default_graph()._distribution_strategy_stack:  # TensorFlow's own check (function_context.py)
        raise Uncacheable("context", "traced under a distribution strategy")
    if save_context.in_save_context():
        raise Uncacheable("context", "traced while a SavedModel is being exported")
    if transform.FUNC_GRAPH_TRANSFORMS or transform.CONCRETE_FUNCTION_CALLBACKS:
        raise Uncacheable("context", "TensorFlow has function-graph transforms or callbacks registered")
    function_context_now = function_context.make_function_context(scope_type)
    eager = function_context_now.context
    if eager.parent_graph is not None or eager.colocation_stack or eager.variable_policy is not None:
        raise Uncacheable("context", "traced in a graph, colocation or save context")
    return function_context_now


def signature_part(function_type: Any, tracing_options: Any) -> str:
    try:
        # The parameters only: a retrace with reduce_retracing carries the previous trace's captures (keyed by
        # id, which has no serialization); what this trace captures is the walk's (the code part).
        parameters = function_type_lib.FunctionType(function_type.parameters.values())
        traced = parameters.to_proto().SerializeToString(deterministic=True)
        declared = tracing_options.polymorphic_type.to_proto().SerializeToString(deterministic=True)
    except Exception as exc:  # a TraceType without a serialization (a Python object argument, ...)
        raise Uncacheable("signature", f"an argument's type cannot be serialized ({type(exc).__name__}: {exc})") \
            from None
    walk = Walk()
    for name in sorted(tracing_options.default_values or {}):
        walk.value(tracing_options.default_values[name], f"default:{name}")
    return hash_text(traced + b"\0" + declared + b"\0" + walk.digest().encode())


def options_part(tracing_options: Any) -> str:
    attributes = []
    for name in sorted(tracing_options.attributes or {}):
        value = tracing_options.attributes[name]
        serialize = getattr(value, "SerializeToString", None)
        attributes.append([name, serialize(deterministic=True).hex() if serialize else repr(value)])
    return hash_json([tracing_options.name, bool(tracing_options.autograph), repr(tracing_options.autograph_options),
                      bool(tracing_options.reduce_retracing), tracing_options.scope_type.name, attributes])


def context_part(function_context_now: Any) -> str:
    ctx = context.context()
    numpy_behavior = [getattr(ops, name)() for name in ("is_auto_dtype_conversion_enabled",
                                                         "is_numpy_style_type_promotion") if hasattr(ops, name)]
    return hash_json([ctx.device_name or "", repr(function_context_now.context.device_functions),
                      bool(function_context_now.context.in_cross_replica_context),
                      repr(function_context_now.context.xla_context_id), context.global_seed(), numpy_behavior])


def versions_part(walk: Walk) -> str:
    import tensorflow as tf

    packages = {name: library_version(name) for name in sorted(walk.packages)}
    return hash_json({"python": sys.version, "implementation": sys.implementation.cache_tag,
                      "tensorflow": tf.version.VERSION, "tf_git": tf.version.GIT_VERSION,
                      "graphcache": package_version(), "packages": packages})


def walk_root(root: Any) -> Walk:
    """The walk of what a trace of ``root`` reads: a user function's, a method's with its object's attributes, or a
    Keras step's model (and its compile state, for a train or test step)."""
    if isinstance(root, kerasstep.PredictStep):
        return kerasstep.walk_step(root)
    if isinstance(root, kerasfit.FitStep):
        return kerasfit.walk_step(root)
    if isinstance(root, instance.BoundMethod):
        return instance.walk_method(root)
    walk = Walk()
    walk.function(root, "")
    return walk


def compute(root: Any, function_type: Any, tracing_options: Any, function_context_now: Any,
            identity_hash: str) -> TraceKey:
    """The key of tracing ``root`` (the user's Python function or a Keras predict step) for ``function_type``;
    raises Uncacheable."""
    walk = walk_root(root)
    parts = {
        "code": walk.digest(),
        "signature": signature_part(function_type, tracing_options),
        "options": options_part(tracing_options),
        "context": context_part(function_context_now),
        "versions": versions_part(walk),
        "identity": identity_hash,
    }
    key = combine(parts, PART_ORDER)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("key %s for the trace of %s: %s", key, tracing_options.name,
                  " ".join(f"{p}={parts[p]}" for p in PART_ORDER))
    return TraceKey(key, parts, walk)


def same_reads(before: Walk, root: Any) -> bool:
    """Whether walking ``root`` again finds what ``before`` found (the trace changed nothing it read)."""
    try:
        again = walk_root(root)
    except Uncacheable:
        return False
    return again.digest() == before.digest() and list(again.bindings) == list(before.bindings) and all(
        again.bindings[path] is obj for path, obj in before.bindings.items())

