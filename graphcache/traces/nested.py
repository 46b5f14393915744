"""tf.functions a trace calls: stored with it, and traced again on its hit as TensorFlow's own cache would hold them.

Why. A ``tf.function`` called while another is traced (``model(xs)`` inside ``train(model, dataset)``, ``self(x)``
inside a SavedModel's ``serve``) is traced there, as part of that trace, and TensorFlow adds that trace to the
called function's own cache: in TensorFlow 2 its function context is the one a call from eager mode has (no
parent graph), so the program's later top-level call ``model(x)`` is served from it (a ``[None]`` trace serves a
``[2]`` call: its type is a supertype). A hit of the outer function runs no Python, so that nested trace never
happened: the later top-level call traced again, a miss in the first process after the one that stored ``train``
and a trace with another signature than plain TensorFlow's, and a hit from the third process on.

So, while a miss traces (hook.py: ``frames``), each nested trace of a user function the key can cover is keyed as a
top-level trace would be (the same key keying.compute gives a top-level call, which needs its function context to
be the eager one: ``check_context``) and stored as its own entry; and the outer entry notes it: where the
tf.function is (``locate``: the outer method's object, an object argument, or a global of the outer function's
module, then attribute names), and its arguments' types. On a hit of the outer function, ``replay`` asks each
noted tf.function for its concrete function for those types (``_get_concrete_function_garbage_collected``: what a
call does before it runs, without running it), which TensorFlow serves from its cache when a trace is there (as it
would have in plain TensorFlow's outer trace) and otherwise traces through the hook, a hit on the nested entry.
Either way the function's cache and its first-call state are plain TensorFlow's, and no Python runs.

Left out (no note: the nested function traces at its next top-level call, as before): nested tf.functions of
library code and Keras' steps, objects as arguments, structured arguments, functions the outer trace reaches
otherwise (a list item, a closure), a nested trace under a device scope or another context, one the key refuses.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tensorflow.core.function.trace_type import default_types
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import function_context
from tensorflow.python.eager.polymorphic_function import polymorphic_function as polymorphic
from tensorflow.python.framework import ops, tensor

from . import instance
from .walk import Uncacheable

MAX_DEPTH = 3  # attribute names followed from a base object to the tf.function's owner


@dataclass
class Frame:
    """A miss being traced on this thread: its root (to locate what it calls) and the nested traces it noted."""

    root: Any
    noted: list[dict[str, Any]] = field(default_factory=list)


_state = threading.local()  # .frames: the misses this thread is tracing, innermost last


def frames() -> list[Frame]:
    if not hasattr(_state, "frames"):
        _state.frames = []
    return _state.frames


@contextlib.contextmanager
def tracing(frame: Frame) -> Iterator[Frame]:
    """A miss's trace runs inside: the nested traces it makes are noted in ``frame``."""
    frames().append(frame)
    try:
        yield frame
    finally:
        frames().pop()


def check_context(scope_type: Any, top: Any) -> None:
    """Refuses a nested trace that could differ from its top-level call's: a function context other than ``top``,
    the one its call from eager mode has (keyed as keying.check_context keys it, under ``ops.init_scope``: the
    settings as eager code reads them, which a top-level trace's key reads too, before its own graph exists); or
    what a FuncGraph made inside another inherits from it (func_graph.py's ``FuncGraph.__init__``) differing from
    what one made from eager mode gets: capture by value, the graph-level random seed, the collections."""
    if function_context.make_function_context(scope_type) != top:
        raise Uncacheable("context", "traced inside another graph under a device, colocation or other scope")
    graph = ops.get_default_graph()  # the outer trace's FuncGraph: the nested one's outer graph
    if getattr(graph, "capture_by_value", False):
        raise Uncacheable("context", "traced inside a graph that captures variables by value")
    if graph.seed != context.global_seed():
        raise Uncacheable("context", "traced inside a graph whose random seed is not the global seed now")
    outermost = graph
    while outermost.building_function:
        outermost = outermost.outer_graph
    keys = set(graph.get_all_collection_keys()) | set(outermost.get_all_collection_keys())
    if any([id(item) for item in graph.get_collection(name)] != [id(item) for item in outermost.get_collection(name)]
           for name in keys):
        raise Uncacheable("context", "traced inside a graph whose collections differ from the outermost graph's")


def _bases(root: Any) -> dict[str, Any]:
    """The objects a nested tf.function is looked for from: ``self``, object arguments, the module's globals."""
    from .keying import Arguments

    bases: dict[str, Any] = {}
    if isinstance(root, Arguments):
        bases.update({f"arg:{name}": obj for name, obj in root.objects})
        root = root.root
    if isinstance(root, instance.BoundMethod):
        bases["self"] = root.instance
        root = root.function
    if isinstance(root, types.FunctionType):
        bases.update({f"g:{name}": value for name, value in root.__globals__.items()})
    return bases


def _function_of(owner: Any, nested: Any) -> str | None:
    """The attribute of ``owner``'s class holding the tf.function whose Python function is ``nested``'s."""
    for klass in type(owner).__mro__:
        for name, value in vars(klass).items():
            if isinstance(value, polymorphic.Function) and value._python_function is nested:
                return name
    return None


def locate(outer: Any, nested: Any) -> list[str] | None:
    """Where ``nested`` (a user function or BoundMethod traced inside ``outer``'s trace) is, from ``outer``:
    ``[base, attribute..., method]`` for a method, ``[base]`` for a tf.function global; None if not found."""
    bases = _bases(outer)
    if isinstance(nested, types.FunctionType):
        for name, value in bases.items():
            if name.startswith("g:") and isinstance(value, polymorphic.Function) and \
                    value._python_function is nested:
                return [name]
        return None
    if not isinstance(nested, instance.BoundMethod):
        return None
    method = _function_of(nested.instance, nested.function)
    if method is None:
        return None
    queue = [([name], value) for name, value in bases.items() if not name.startswith("g:") or _is_module(value)]
    while queue:
        path, obj = queue.pop(0)
        if obj is nested.instance:
            return [*path, method]
        if len(path) <= MAX_DEPTH and _is_module(obj):
            queue.extend(([*path, name], value) for name, value in sorted(vars(obj).items()) if _is_module(value))
    return None


def _is_module(value: Any) -> bool:
    from tensorflow.python.module import module as module_lib

    return isinstance(value, module_lib.Module)


def arguments(function_type: Any) -> list[Any] | None:
    """The arguments that give ``function_type`` again (TensorSpecs, plain literals), positional; None otherwise."""
    found = []
    for parameter in function_type.parameters.values():
        constraint = parameter.type_constraint
        if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            return None
        if isinstance(constraint, tensor.TensorSpec) and constraint.name is None:
            found.append(constraint)
        elif isinstance(constraint, default_types.Literal) and \
                isinstance(constraint.value, (type(None), bool, int, float, str)):
            found.append(constraint.value)
        else:
            return None
    return found


def resolve(root: Any, where: list[str]) -> Any:
    """The tf.function at ``where`` (``locate``'s path) from this process's ``root``; None where there is none."""
    obj = _bases(root).get(where[0])
    for name in where[1:]:
        obj = vars(obj).get(name) if _is_module(obj) and name != where[-1] else getattr(obj, name, None)
    return obj if isinstance(obj, polymorphic.Function) else None


def replay(noted: list[dict[str, Any]], root: Any) -> None:
    """Each noted nested tf.function's concrete function for its arguments, as its call in the outer trace made it
    (see the module docstring). Raises what TensorFlow raises (the caller fails open)."""
    _state.replaying = getattr(_state, "replaying", 0) + 1
    try:
        for note in noted:
            function = resolve(root, note["where"])
            if function is None or function._python_function.__qualname__ != note["qualname"]:
                continue
            function._get_concrete_function_garbage_collected(*decode_arguments(note["args"]))
    finally:
        _state.replaying -= 1


def replaying() -> bool:
    """Whether a hit is being served for ``replay``: its warnings are in the outer entry's, given by its hit."""
    return bool(getattr(_state, "replaying", 0))


def encode_arguments(args: list[Any]) -> list[list[Any]]:
    """JSON of ``arguments()``'s result: ``["tensor", shape or None, dtype name]``, ``["value", value]``."""
    encoded: list[list[Any]] = []
    for arg in args:
        if isinstance(arg, tensor.TensorSpec):
            encoded.append(["tensor", None if arg.shape.rank is None else arg.shape.as_list(), arg.dtype.name])
        else:
            encoded.append(["value", arg])
    return encoded


def decode_arguments(encoded: list[list[Any]]) -> list[Any]:
    from tensorflow.python.framework import dtypes

    return [tensor.TensorSpec(item[1], dtypes.as_dtype(item[2])) if item[0] == "tensor" else item[1]
            for item in encoded]


__all__ = ["Frame", "arguments", "tracing", "check_context", "decode_arguments", "encode_arguments", "frames", "locate", "replay",
           "replaying", "resolve"]
