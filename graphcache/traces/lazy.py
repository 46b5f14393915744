"""A restored trace called by name: its FunctionDefs registered in the eager context, its FuncGraph built only
when something asks for it.

Why. Rebuilding a real FuncGraph from FunctionDefs (the SavedModel loader's path,
``function_deserialization.load_function_def_library``) creates a Python Operation per node, which on a big
function costs a good part of what tracing it did (benchmarks/trace_bench.py's ``restore`` phase measures what
remains). An eager call needs none of it: TensorFlow's own eager call of a
ConcreteFunction without a tape (``ConcreteFunction._call_flat`` -> ``AtomicFunction.call_flat`` ->
``Context.call_function``) uses the function's name, its flat input count, its FunctionType (to pack the
outputs) and the captured tensors. So a hit registers the stored library under new names
(``context.add_function_def``, callees first; new names because a different FunctionDef under an existing
name is refused) and wraps it in an ``AtomicFunction`` (which removes the functions from the context when it
is released, as a traced one does).

``ConcreteFunction.__init__`` reads ``atomic_fn.graph`` and builds the gradient helpers from it, so
``LazyConcreteFunction`` sets what ``__init__`` would set without the graph, and serves ``_func_graph`` and
``_delayed_rewrite_functions`` (the two things ConcreteFunction's methods reach the graph by) as properties
that build the graph on first use through the loader's path (``build``: a full restored ConcreteFunction
bound to the same captures; gradients of nested calls restored as today). That happens under a
GradientTape, in graph mode (a call inside another trace), for ``.graph``, ``.outputs``,
``.structured_outputs``, and a call of the ConcreteFunction itself (``concrete(x)``: its trace annotation
names the graph). A call through the ``tf.function`` in eager mode, the common case, never builds it.
The eager calls keep using the by-name function: its FunctionDefs are the same as the built graph's.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tensorflow.core.framework import function_pb2
from tensorflow.core.function import trace_type
from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import atomic_function, attributes
from tensorflow.python.eager.polymorphic_function import concrete_function as concrete_function_lib
from tensorflow.python.framework import ops

from ..compile import functionlib
from . import fnrefs

_COUNTER_SUFFIX = re.compile(r"_\d+$")


def register(library: function_pb2.FunctionDefLibrary) -> dict[str, str]:
    """Register ``library`` (the traced function first) in the eager context under new names, callees first;
    returns old name -> new name. ``library`` is renamed in place."""
    ctx = context.context()
    renamed = {}
    for fdef in library.function:
        base = _COUNTER_SUFFIX.sub("", fdef.signature.name)
        name = f"{base}_{ops.uid()}"
        while ctx.has_function(name):  # a name the uid counter cannot have made, taken all the same
            name = f"{base}_{ops.uid()}"
        renamed[fdef.signature.name] = name
    functionlib.rename(library, renamed)
    fnrefs.rename(library, renamed)  # the forward and backward functions name each other in string attributes
    added: list[str] = []
    try:
        for fdef in reversed(library.function):
            ctx.add_function_def(fdef)
            added.append(fdef.signature.name)
    except Exception:  # a library the context refuses: nothing of it stays registered (the hook traces instead)
        for name in added:
            ctx.remove_function(name)
        raise
    return renamed


def atomic(library: function_pb2.FunctionDefLibrary, function_type: Any) -> atomic_function.AtomicFunction:
    """The AtomicFunction of a registered library's first function; its callees are its children, so all are
    removed from the eager context when it goes (AtomicFunction's reference counting)."""
    ctx = context.context()
    untyped = function_type_lib.FunctionType([])  # a callee is only called from the function's body
    children = [atomic_function.AtomicFunction(fdef.signature.name, ctx, untyped) for fdef in library.function[1:]]
    function = atomic_function.AtomicFunction(library.function[0].signature.name, ctx, function_type, children)
    # What the context holds is what was registered: not fetched back (that would parse the whole body again)
    function._cached_definition = library.function[0]
    return function


def function_type_of(function_type: Any, captures: list[Any], output_specs: Any, type_context: Any) -> Any:
    """The FunctionType TensorFlow's trace would have: this call's parameters, the captured tensors (by id, as a
    FuncGraph's capture container keys them) and the outputs."""
    capture_types = OrderedDict((id(tensor), trace_type.from_value(tensor)) for tensor in captures)
    output_type = trace_type.from_value(output_specs, type_context)
    return function_type_lib.FunctionType(function_type.parameters.values(), capture_types,
                                          return_annotation=output_type)


class _Collector:
    """Stands for ConcreteFunctionGarbageCollector until the graph exists (tracing_compilation releases it)."""

    def __init__(self) -> None:
        self.released = False

    def release(self) -> None:
        self.released = True


class LazyConcreteFunction(concrete_function_lib.ConcreteFunction):
    """A ConcreteFunction over a by-name AtomicFunction whose FuncGraph is built on first use (see the module
    docstring). ``build`` returns a full ConcreteFunction of the same library bound to the same captures;
    ``fallback(exc)``, called when ``build`` raises, a fresh trace of the function (fail open: the graph is
    built long after the hit, inside a call of the user's)."""

    def __init__(self, atomic_fn: atomic_function.AtomicFunction, captures: list[Any], variables: list[Any],
                 structured_input_signature: Any, build: Callable[[], Any],
                 fallback: Callable[[BaseException], Any]) -> None:
        # ConcreteFunction.__init__ is not called: it reads atomic_fn.graph. These are what it sets otherwise.
        self._arg_keywords = None
        self._num_positional_args = None
        self._captured_inputs = list(captures)
        self._function_type = atomic_fn.function_type
        self._output_shapes = tuple(spec.shape for spec in atomic_fn.function_type.flat_outputs)
        # AtomicFunction.attributes without fetching the definition again (the construction context is dropped)
        attrs = dict(atomic_fn.cached_definition.attr)
        attrs.pop(attributes.EAGER_RUNTIME_CONSTRUCTION_CONTEXT, None)
        self._attrs = attributes.parse_func_attrs(attrs)
        self._garbage_collector = _Collector()
        self._first_order_tape_functions: dict[Any, Any] = {}
        self._higher_order_tape_functions: dict[Any, Any] = {}
        self._inference_function = atomic_fn
        self._bound_variables = tuple(variables)
        self._input_signature = structured_input_signature
        self._build = build
        self._fallback = fallback
        self._built: Any = None
        self._build_lock = threading.Lock()

    def _full(self) -> Any:
        """The full ConcreteFunction, built once (the loader's path)."""
        if self._built is None:
            with self._build_lock:
                if self._built is None:
                    full = self._build_or_trace()
                    if self._garbage_collector.released:  # what tracing_compilation did to this function's collector
                        full._garbage_collector.release()
                    self._built = full
        return self._built

    def _build_or_trace(self) -> Any:
        try:
            return self._build()
        except Exception as exc:
            fresh = self._fallback(exc)
            # The call being made passes this function's captures already: the fresh trace must take the same.
            if [id(t) for t in fresh.captured_inputs] != [id(t) for t in self._captured_inputs]:
                raise
            return fresh

    @property
    def graph_built(self) -> bool:
        """Whether the FuncGraph exists yet (for tests and the benchmark)."""
        return self._built is not None

    @property
    def _func_graph(self) -> Any:  # type: ignore[override]
        return self._full().graph

    @property
    def _delayed_rewrite_functions(self) -> Any:  # type: ignore[override]
        return self._full()._delayed_rewrite_functions

    # What needs no graph: answered without building it. Once built, the name and definition are the built
    # function's, as the graph's users (add_to_graph, a SavedModel export) refer to that one.
    @property
    def name(self) -> Any:
        return super().name if self._built is not None else self._inference_function.name

    @property
    def function_def(self) -> function_pb2.FunctionDef:
        return super().function_def if self._built is not None else self._inference_function.cached_definition

    @property
    def variables(self) -> tuple[Any, ...]:
        return self._bound_variables

    @property
    def trainable_variables(self) -> tuple[Any, ...]:
        return tuple(v for v in self._bound_variables if v.trainable)

    @property
    def structured_input_signature(self) -> Any:
        return self._input_signature


__all__ = ["LazyConcreteFunction", "atomic", "function_type_of", "register"]
