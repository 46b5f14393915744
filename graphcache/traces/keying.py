"""A trace's key, computed before tracing from everything tracing can read (named parts, keys.py's way).

- ``code``: the Python side (walk.py): the function's code, what it reaches, the plain values it reads,
  the variables and eager tensors it can capture; for a method, also its object's class and the attributes
  its code reads (instance.py); the Keras objects and tf.Modules either reads (objects.py); for Keras' predict
  step, the model (kerasstep.py); for its train and test steps, the model, optimizer, losses and metrics
  (kerasfit.py);
- ``signature``: the FunctionType TensorFlow traces for (each argument's TraceType: TensorSpecs with shape
  and dtype, Python values as literals, dicts, tuples, lists, namedtuples and tf.data element specs; after
  reduce_retracing's generalization), the function's own declared type (input_signature included) and its
  default values: in structure.py's canonical form (the same in every process: TensorFlow's own serialization
  of a dict in an element spec is not), with each dict's key order and each structure's class;
- ``options``: the tf.function's name, autograph and its options, reduce_retracing, the FunctionDef
  attributes (jit_compile, experimental_attributes, ...); not the variable-creation scope (a stored trace
  created no variables: the same trace under tf.function's first-call scope and under its later one);
- ``context``: the eager device scope and the function context TensorFlow keys its own traces by; inside
  ``tf.saved_model.save``, that it is and its variable policy (savecontext.py);
- ``settings``: the trusted libraries' settings a trace can read (ambient.py: Keras' floatx, epsilon and
  dtype policy, TensorFlow's NumPy behaviour, op determinism, op callbacks, the global random seed, ...), and
  ``PYTHONHASHSEED`` where walked code builds a set (its iteration order is the seed's; refused when the seed
  is random);
- ``versions``: Python (bytecode, its -O level), TensorFlow, graphcache, and the identity of each trusted package the walk
  named (trust.py: distribution name, version and a hash of its installed file list);
- ``identity``: the compiler identity (the cache's).

Refused here (``walk.Uncacheable``): traces inside another graph (a nested tf.function is part of its
caller's trace), under a distribution strategy, with graph transforms or
concrete-function callbacks registered, and arguments whose TraceType cannot be serialized.

An object argument (``train(model, dataset)`` with a tf.Module or a Keras model) has a TraceType TensorFlow
cannot serialize: a weak reference to the object, equal only to itself. Such a function is keyed as
``Arguments``: the object walked by objects.py's rules, as a global holding it would be (its class and state,
its variables bound by path), at ``arg:<name>``, in the ``code`` part; its TraceType in ``signature`` as a
placeholder. An object those rules do not claim (an instance of a plain class) is refused by the walk.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.core.function.trace_type import default_types
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import function_context, tracing_compilation, transform
from tensorflow.python.framework import ops
from tensorflow.python.ops import summary_ops_v2

from ..entry.keyparts import combine, hash_json
from ..version import package_version
from . import (
    ambient,
    instance,
    kerasfit,
    kerasstep,
    libhooks,
    libwrites,
    logged,
    objects,
    savecontext,
    structure,
    trust,
)
from .walk import GUARD_TEXT, Uncacheable, Walk

log = logging.getLogger("graphcache")

PART_ORDER = ("code", "signature", "options", "context", "settings", "versions", "identity")


OBJECT_ARGUMENT = default_types.Literal("graphcache: an object argument, keyed in the code part as arg:<name>")


@dataclass(frozen=True)
class Arguments:
    """A user function or method traced with objects among its top-level arguments (TraceType ``Weakref``)."""

    root: Any
    objects: tuple[tuple[str, Any], ...]  # (parameter name, the object), in the parameters' order


def with_arguments(root: Any, function_type: Any) -> Any:
    """``root`` as ``Arguments`` when the trace's arguments hold objects by weak reference, else ``root``."""
    if not isinstance(root, (types.FunctionType, instance.BoundMethod)):
        return root  # Keras' steps take tensors and structures only
    found = []
    for name, parameter in function_type.parameters.items():
        constraint = parameter.type_constraint
        if isinstance(constraint, default_types.Weakref) and constraint.placeholder_value(None) is not None:
            found.append((name, constraint.placeholder_value(None)))
    return Arguments(root, tuple(found)) if found else root


@dataclass
class TraceKey:
    key: str
    parts: dict[str, str]
    walk: Walk
    guards: dict[str, str] = field(default_factory=dict)  # what each read path held, in words (walk.py's guards)


def guard_changes(stored: dict[str, str], now: dict[str, str], limit: int = 6) -> list[str]:
    """The reads that differ between a stored trace's guards and this key's: ``g:SCALE 2.0 -> 3.0``."""
    changes = []
    for path in sorted(set(stored) | set(now)):
        before, after = stored.get(path), now.get(path)
        if before != after:
            changes.append(f"{path} {before if before is not None else '(not read)'} -> "
                           f"{after if after is not None else '(not read)'}")
    return changes[:limit] + ([f"... {len(changes) - limit} more"] if len(changes) > limit else [])


def check_context(scope_type: Any, nested: bool = False) -> Any:
    """The FunctionContext TensorFlow keys this trace by, when graphcache can cache a trace in it. ``nested``: a
    trace inside another one's, keyed under ``ops.init_scope`` (nested.py: eager, the outer graph still the default)."""
    if not context.executing_eagerly() or (ops.inside_function() and not nested):
        raise Uncacheable("context", "traced inside another graph (it is part of that graph's trace)")
    if ops.get_default_graph()._distribution_strategy_stack:  # TensorFlow's own check (function_context.py)
        raise Uncacheable("context", "traced under a distribution strategy")
    if transform.FUNC_GRAPH_TRANSFORMS or transform.CONCRETE_FUNCTION_CALLBACKS:
        raise Uncacheable("context", "TensorFlow has function-graph transforms or callbacks registered")
    if summary_ops_v2.has_default_writer():  # tf.summary ops emit only with one (a trace without is cached)
        raise Uncacheable("context", "traced while a tf.summary default writer is set (its summary ops write to "
                                     "that writer, its step and its recording condition)")
    function_context_now = function_context.make_function_context(scope_type)
    eager = function_context_now.context
    if eager.parent_graph is not None or eager.colocation_stack:
        raise Uncacheable("context", "traced in a graph or colocation context")
    if eager.variable_policy is not None and not savecontext.in_export():  # only a save context sets one
        raise Uncacheable("context", "traced under a variable policy outside a SavedModel export")
    return function_context_now


def signature_part(function_type: Any, tracing_options: Any, keyed: frozenset[str] = frozenset()) -> tuple[str, Walk]:
    """The hash of the traced and declared FunctionTypes in their canonical form (structure.py: the same in every
    process, dict key orders and structure classes included) and the defaults; with the walk that keyed the
    structures' classes and the defaults."""
    # The parameters only: a retrace with reduce_retracing carries the previous trace's captures (keyed by
    # id, which has no serialization); what this trace captures is the walk's (the code part).
    parameters = function_type_lib.FunctionType(
        [function_type_lib.Parameter(p.name, p.kind, p.optional, OBJECT_ARGUMENT) if p.name in keyed else p
         for p in function_type.parameters.values()])
    declared = tracing_options.polymorphic_type
    try:
        protos = parameters.to_proto(), declared.to_proto()
    except Exception as exc:  # a TraceType without a serialization (a Python object argument, ...)
        raise Uncacheable("signature", f"an argument's type cannot be serialized ({type(exc).__name__}: {exc})") \
            from None
    walk = Walk()
    shapes = [structure.describe(parameters, walk), structure.describe(declared, walk)]
    for name in sorted(tracing_options.default_values or {}):
        walk.value(tracing_options.default_values[name], f"default:{name}")
    return hash_json([[structure.canonical(proto) for proto in protos], shapes, walk.digest()]), walk


def options_part(tracing_options: Any) -> str:
    attributes = []
    for name in sorted(tracing_options.attributes or {}):
        value = tracing_options.attributes[name]
        serialize = getattr(value, "SerializeToString", None)
        attributes.append([name, serialize(deterministic=True).hex() if serialize else repr(value)])
    # Not the scope type (tf.function's first trace may create variables, its retrace may not): a stored trace created
    # none (hook.py refuses one that did), and a trace that creates none is the same under either scope. But whether
    # tf.function is there at all: traced through tracing_compilation's own entry (no scope), the function runs
    # without autograph's conversion (``autograph`` only sets its status) and outside tf.function's XLA context.
    options = [tracing_options.name, bool(tracing_options.autograph), repr(tracing_options.autograph_options),
               bool(tracing_options.reduce_retracing), attributes]
    if tracing_options.scope_type == tracing_compilation.ScopeType.NO_SCOPE:
        options.append("tracing_compilation")
    return hash_json(options)


def context_part(function_context_now: Any) -> str:
    """The eager device scope and TensorFlow's function context; inside ``tf.saved_model.save`` also the export
    (savecontext.py: what of it tracing can read)."""
    ctx = context.context()
    return hash_json([ctx.device_name or "", repr(function_context_now.context.device_functions),
                      bool(function_context_now.context.in_cross_replica_context),
                      repr(function_context_now.context.xla_context_id), savecontext.described()])


def settings_values(walk: Walk) -> dict[str, Any]:
    """ambient.py's snapshot, whether the loggers logged.py records show warnings, and the string hash seed where
    walked code builds a set it may iterate."""
    extra = {}
    if walk.hash_order is not None:
        seed = os.environ.get("PYTHONHASHSEED", "random")
        if not seed.isdigit():
            raise Uncacheable("hash_order", f"{walk.hash_order} builds a set: a set of str iterates in the order of this "
                                            "process's hash seed, which is random (set PYTHONHASHSEED, or iterate "
                                            "sorted(...))")
        extra["python.hash_seed"] = int(seed)
    # Whether TensorFlow's, absl's and Keras' loggers show warnings: what a stored trace's recording could see
    return {**ambient.snapshot(), "logging.warnings_shown": logged.shown(), **extra}


def versions_part(walk: Walk) -> str:
    import tensorflow as tf

    packages = {name: trust.identity(name) for name in sorted(walk.packages)}
    # -O/-OO: the trusted libraries' own asserts and `if __debug__:` blocks are compiled out (their identity is
    # their files', whatever the interpreter makes of them)
    return hash_json({"python": sys.version, "implementation": sys.implementation.cache_tag,
                      "optimize": sys.flags.optimize, "tensorflow": tf.version.VERSION,
                      "tf_git": tf.version.GIT_VERSION, "graphcache": package_version(), "packages": packages})


def walk_root(root: Any, before: dict[Any, Any] | None = None, reuse_configs: dict[str, Any] | None = None) -> Walk:
    """The walk of what a trace of ``root`` reads: a user function's, a method's with its object's attributes (the
    Keras objects and tf.Modules either reads keyed by objects.py, as they were ``before`` the trace where given),
    or a Keras step's model (and its compile state, for a train or test step; ``reuse_configs``: the walk before
    the trace's layer configs, for the walk after it)."""
    if isinstance(root, kerasstep.PredictStep):
        return kerasstep.walk_step(root, reuse_configs, before)
    if isinstance(root, kerasfit.FitStep):
        return kerasfit.walk_step(root, reuse_configs, before, objects.RULE)
    if isinstance(root, Arguments):
        walk = walk_root(root.root, before, reuse_configs)
        for name, obj in root.objects:
            walk.value(obj, f"arg:{name}")
        return walk
    walk = Walk(objects.RULE, before)
    if isinstance(root, instance.BoundMethod):
        return objects.walk_method(root, walk)
    walk.function(root, "")
    return walk


def walk_reads(root: Any, before: dict[Any, Any] | None = None, reuse_configs: dict[str, Any] | None = None) -> Walk:
    """``walk_root``, and what the program set on the trusted libraries: their modules' attributes (libwrites.py) and
    the functions it registered in TensorFlow's registries (libhooks.py). The key and the walk after a miss's trace
    both take this one, so that they always cover the same reads."""
    walk = walk_root(root, before, reuse_configs)
    libwrites.key(walk)
    libhooks.key(walk)
    return walk


def compute(root: Any, function_type: Any, tracing_options: Any, function_context_now: Any,
            identity_hash: str) -> TraceKey:
    """The key of tracing ``root`` (the user's Python function or a Keras predict step) for ``function_type``;
    raises Uncacheable."""
    walk = walk_reads(root)
    keyed = frozenset(name for name, _ in root.objects) if isinstance(root, Arguments) else frozenset()
    signature, structures = signature_part(function_type, tracing_options, keyed)
    walk.packages |= structures.packages  # the trusted packages of the arguments' classes, in ``versions``
    walk.hash_order = walk.hash_order or structures.hash_order
    settings = settings_values(walk)
    parts = {
        "code": walk.digest(),
        "signature": signature,
        "options": options_part(tracing_options),
        "context": context_part(function_context_now),
        "settings": hash_json(settings),
        "versions": versions_part(walk),
        "identity": identity_hash,
    }
    key = combine(parts, PART_ORDER)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("key %s for the trace of %s: %s", key, tracing_options.name,
                  " ".join(f"{p}={parts[p]}" for p in PART_ORDER))
    guards = {**walk.guards, **structures.guards,
              **{f"setting:{name}": json.dumps(value)[:GUARD_TEXT] for name, value in settings.items()},
              **{f"package:{name}": trust.identity(name)[:GUARD_TEXT] for name in sorted(walk.packages)}}
    return TraceKey(key, parts, walk, guards)


def same_reads(before: Walk, root: Any, state: dict[Any, Any] | None = None) -> bool:
    """Whether walking ``root`` again finds what ``before`` found (the trace changed nothing it read but the
    state objects.py keys as it was before the trace, ``state``: the ``_called`` of the layers it called, the
    optimizers it built without making variables, which a hit redoes)."""
    try:
        again = walk_reads(root, state, before.configs)
    except Uncacheable:
        return False
    return again.digest() == before.digest() and list(again.bindings) == list(before.bindings) and all(
        again.bindings[path] is obj for path, obj in before.bindings.items())

