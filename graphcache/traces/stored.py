"""A stored trace: what a ConcreteFunction is besides the Python that traced it, and how one is rebuilt.

Payload (``kind="tf_trace"``)::

    b"GCTRACE1" | u32 big-endian length of the metadata | metadata (JSON) | FunctionDefLibrary (proto)

The library holds the traced function first, then every function it reaches (nested tf.functions,
control-flow bodies), under the names the tracing process gave them. The metadata: ``function`` (the
traced function's name), ``inputs`` and ``outputs`` (the structured input signature and the output
specs, TensorFlow's ``nested_structure_coder`` protos, base64), ``captures`` (per captured input, in
the trace's order: the walk path of the object it was, ``variable`` or ``tensor``, its dtype and shape),
``arg_keywords`` and ``positional`` (the flat calling convention), ``called`` (the Keras layers the trace
called first, by walk path: a hit sets their ``_called`` as the trace did; objects.py), ``builds`` (the Keras
optimizers it built without making variables: a hit builds them as the trace did; building.py).

Restoring registers the library in the eager context under new names (a restored library never collides
with what this process traced itself) and calls it by name (lazy.py), with the captures bound as
``restore_captures`` binds a loaded object's (this process's variables' handles and eager tensors, each
checked by dtype and shape first), the FunctionType TensorFlow's own trace would have (this call's
parameters, the captures, the outputs) and the calling convention. No Python runs. The FuncGraph, when
something needs it, is the SavedModel loader's (``restore_graph``: ``load_function_def_library``, gradients
of nested calls restored) bound the same way.

What a stored trace cannot carry is refused when the trace is described (``Uncacheable``): captures the
walk did not reach (the key would not cover them), call-time (by-reference) captures, outputs that are
neither tensors, None nor a ``tf.experimental.Optional`` (what Keras' train and test steps return), ops that
call back into this process's Python (py_function) or share a resource by name, text holding an object's
memory address (a string constant or attribute made from a default ``repr``: ``_holds_address``), and custom gradients
(registered in the tracing process only) that an output of their function depends on (allowed in a trace that
is never differentiated from outside, Keras' steps: a restored one has the same ops, its gradients computed
inside already; and where no output depends on them, as a Keras optimizer's all-reduce of the gradients).
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tensorflow.core.framework import function_pb2, types_pb2
from tensorflow.core.function import trace_type
from tensorflow.core.function.capture import restore_captures
from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.core.protobuf import saved_object_graph_pb2, struct_pb2
from tensorflow.python.data.ops import optional_ops
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import concrete_function as concrete_function_lib
from tensorflow.python.framework import dtypes, op_def_registry, ops
from tensorflow.python.framework import func_graph as func_graph_module
from tensorflow.python.framework import tensor as tensor_lib
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.saved_model import function_deserialization, nested_structure_coder
from tensorflow.python.util import nest

from ..compile.functionlib import canonical_function_hash, op_types, reachable_library
from ..errors import CorruptEntryError
from . import fnrefs, lazy
from .walk import Uncacheable

MAGIC = b"GCTRACE1"
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})  # a token into the tracing process
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
GRADIENT_ATTR = "_gradient_op_type"
ADDRESS = re.compile(rb" at 0x[0-9a-fA-F]{6,}>")  # the tail of object.__repr__: "<function f at 0x7f3a2c1b0>"
# A captured eager tensor TensorFlow's trace copied into the graph as a Const (a small one: capture_container's
# _EAGER_CONST_THRESHOLD) rather than a Placeholder; its FunctionDef takes it as an argument all the same.
CONSTANT = "constant"
# Set in every entry since captures are told apart as "tensor" or CONSTANT; an older entry's "tensor" may be either.
CAPTURE_KINDS = "capture_kinds"


@dataclass
class Described:
    """A fresh trace, described on the caller's thread (cheap); ``library`` is filled in when it is stored."""

    name: str  # the traced function's FunctionDef name
    captures: list[list[Any]]  # [path, "variable" | "tensor" | CONSTANT, dtype enum, shape (list or None)]
    inputs: bytes
    outputs: bytes
    arg_keywords: list[str]
    positional: int
    forward_only: bool = False  # never differentiated from outside (Keras' steps): custom gradients are harmless
    called: list[str] = field(default_factory=list)  # layers the trace called first (objects.py), by walk path
    builds: list[Any] = field(default_factory=list)  # optimizers it built without variables (building.py's JSON)
    warnings: list[list[Any]] = field(default_factory=list)  # given while it traced (warned.py), given on a hit
    logged: list[list[Any]] = field(default_factory=list)  # TF's, absl's, Keras' logging warnings (logged.py)
    nested: list[dict[str, Any]] = field(default_factory=list)  # tf.functions it traced inside (nested.py)


@dataclass
class StoredTrace:
    function: str
    library: function_pb2.FunctionDefLibrary
    captures: list[list[Any]]
    inputs: bytes
    outputs: bytes
    arg_keywords: list[str]
    positional: int
    called: list[str] = field(default_factory=list)
    builds: list[Any] = field(default_factory=list)

    @property
    def main(self) -> function_pb2.FunctionDef:
        return self.library.function[0]

    def canonical_hash(self) -> str:
        return library_hash(self.library)


def _shape(shape: Any) -> list[Any] | None:
    return None if shape.rank is None else [None if d is None else int(d) for d in shape.as_list()]


def capture_paths(concrete: Any, bindings: dict[str, Any]) -> list[list[Any]]:
    """Each captured input of a fresh trace named by the walk path it was reached by; refuses captures the
    walk did not reach, and call-time captures."""
    graph = concrete.graph
    if graph.deferred_external_captures or graph.function_captures.by_ref_external or \
            graph.function_captures.control:
        raise Uncacheable("capture", "it captures values by reference (capture_call_time_value) or control inputs")
    by_id: dict[int, tuple[str, str]] = {}
    for path, obj in bindings.items():
        if isinstance(obj, resource_variable_ops.BaseResourceVariable):
            by_id.setdefault(id(obj.handle), (path, "variable"))
        else:
            by_id.setdefault(id(obj), (path, "tensor"))
    described = []
    for captured, internal in zip(concrete.captured_inputs, graph.internal_captures, strict=True):
        found = by_id.get(id(captured))
        if found is None:
            raise Uncacheable("capture", f"it captures a {captured.dtype.name} tensor its code does not name "
                                         "(through an object or a library)")
        path, kind = found
        if kind == "tensor" and internal.op.type == "Const":  # a small eager tensor: TensorFlow's trace copied it in
            kind = CONSTANT
        obj = bindings[path]
        described.append([path, kind, obj.dtype.as_datatype_enum, _shape(obj.shape)])
    variable_ids = {id(obj) for obj in bindings.values()}
    if any(id(variable) not in variable_ids for variable in graph.variables):
        raise Uncacheable("capture", "it uses a variable its code does not name")
    return described


def _output_spec(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, tensor_lib.Tensor):
        return tensor_lib.TensorSpec(value.shape, value.dtype)
    if isinstance(value, optional_ops.Optional):  # Keras' train and test steps return one
        return value._type_spec
    raise Uncacheable("structure", f"it returns a {type(value).__name__} (tensors, tf.experimental.Optional and "
                                   "None are cached)")


def describe(concrete: Any, bindings: dict[str, Any]) -> Described:
    """What a fresh trace's entry needs besides its library (raises Uncacheable)."""
    captures = capture_paths(concrete, bindings)
    outputs = nest.map_structure(_output_spec, concrete.structured_outputs)
    try:
        inputs = nested_structure_coder.encode_structure(
            nest.map_structure(_unknown_encoded, concrete.structured_input_signature))
        encoded_outputs = nested_structure_coder.encode_structure(outputs)
    except nested_structure_coder.NotEncodableError as exc:
        raise Uncacheable("structure", f"its signature cannot be stored ({exc})") from None
    # deterministic: a dict is a protobuf map, whose order otherwise varies (and GRAPHCACHE_TRACE_VERIFY compares bytes)
    return Described(concrete.function_def.signature.name, captures, inputs.SerializeToString(deterministic=True),
                     encoded_outputs.SerializeToString(deterministic=True), [str(k) for k in concrete._arg_keywords],
                     int(concrete._num_positional_args))


def library_of(name: str) -> function_pb2.FunctionDefLibrary:
    """The traced function and every function of the eager context it reaches, itself first."""
    ctx = context.context()
    fdef = ctx.get_function_def(name)
    library = function_pb2.FunctionDefLibrary()
    library.function.add().CopyFrom(fdef)
    reached = reachable_library(ctx, fdef, op_types(fdef))
    for callee in sorted(reached):
        library.function.add().CopyFrom(reached[callee])
    return library


def check_graph(library: function_pb2.FunctionDefLibrary, *, forward_only: bool = False) -> None:
    """Refuses libraries a restore could not reproduce in another process (see the module docstring); a
    ``forward_only`` trace (never differentiated) may have custom gradients: its forward ops are the same. So may
    any trace where no output of the function holding one depends on it (a Keras optimizer's all-reduce of the
    gradients, whose outputs only update variables): a gradient reaches a function's ops through its outputs only."""
    for fdef in library.function:
        differentiable = _output_ancestors(fdef)
        for node in fdef.node_def:
            if node.op in PYTHON_OPS:
                raise Uncacheable("graph", f"{fdef.signature.name} calls Python ({node.op}: tf.py_function)")
            if GRADIENT_ATTR in node.attr and node.op not in CALL_OPS and not forward_only and \
                    node.name in differentiable:
                raise Uncacheable("graph", f"{fdef.signature.name} has a custom gradient ({node.name})")
            op_def = op_def_registry.get(node.op)
            if op_def is not None and any(attr.name == "shared_name" for attr in op_def.attr):
                raise Uncacheable("graph", f"{fdef.signature.name} has a resource shared by name ({node.op})")
            if _holds_address(node):
                raise Uncacheable("graph", f"{fdef.signature.name} holds a memory address in {node.name} ({node.op}): "
                                           "text made from an object's default repr, this process's only")


def _holds_address(node: Any) -> bool:
    """Whether a string constant or string attribute of ``node`` holds an object's default repr
    (``<function f at 0x7f...>``): traced from ``repr``/``str``/an f-string of an object, its value is this
    process's address, which no key can hold."""
    for attr in node.attr.values():
        texts = [attr.s] if attr.s else list(attr.list.s)
        if attr.HasField("tensor") and attr.tensor.dtype == types_pb2.DT_STRING:
            texts += attr.tensor.string_val
        if any(ADDRESS.search(text) for text in texts):
            return True
    return False


def _output_ancestors(fdef: function_pb2.FunctionDef) -> set[str]:
    """The nodes a function's outputs depend on through data edges (a gradient flows back along those only)."""
    nodes = {node.name: node for node in fdef.node_def}
    stack = [value.partition(":")[0] for value in fdef.ret.values()]
    found: set[str] = set()
    while stack:
        name = stack.pop()
        if name in found or name not in nodes:
            continue
        found.add(name)
        stack.extend(value.partition(":")[0] for value in nodes[name].input if not value.startswith("^"))
    return found


def encode(described: Described, library: function_pb2.FunctionDefLibrary) -> bytes:
    meta = {"function": described.name, "captures": described.captures,
            "inputs": base64.b64encode(described.inputs).decode(), "outputs": base64.b64encode(described.outputs).decode(),
            "arg_keywords": described.arg_keywords, "positional": described.positional, CAPTURE_KINDS: True}
    if described.called:
        meta["called"] = described.called
    if described.builds:
        meta["builds"] = described.builds
    data = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    return MAGIC + struct.pack(">I", len(data)) + data + library.SerializeToString(deterministic=True)


def decode(payload: bytes | memoryview) -> StoredTrace:
    """A payload's trace; CorruptEntryError when it is not one."""
    data = bytes(payload)
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise CorruptEntryError("payload is not a stored trace")
    (size,) = struct.unpack(">I", data[len(MAGIC):len(MAGIC) + 4])
    start = len(MAGIC) + 4
    try:
        meta = json.loads(data[start:start + size])
        library = function_pb2.FunctionDefLibrary.FromString(data[start + size:])
        trace = StoredTrace(meta["function"], library, meta["captures"], base64.b64decode(meta["inputs"]),
                            base64.b64decode(meta["outputs"]), list(meta["arg_keywords"]), int(meta["positional"]),
                            [str(path) for path in meta.get("called", ())], list(meta.get("builds", ())))
        older = not meta.get(CAPTURE_KINDS) and any(capture[1] == "tensor" for capture in trace.captures)
    except Exception as exc:  # JSON, protobuf, a missing field: all mean the bytes are not what was stored
        raise CorruptEntryError(f"stored trace does not decode: {type(exc).__name__}: {exc}") from None
    if older:  # its graph would take a small captured tensor as a Placeholder where TensorFlow's trace has a Const
        raise CorruptEntryError("stored trace predates constant captures (written by an older graphcache)")
    if not trace.library.function or trace.main.signature.name != trace.function:
        raise CorruptEntryError("stored trace's library does not start with its function")
    return trace


def bind(trace: StoredTrace, bindings: dict[str, Any]) -> list[Any] | None:
    """This process's objects for the trace's captures, in its order, each checked by kind, dtype and
    shape; None when one is missing or does not fit (then the trace is not used)."""
    bound = []
    for path, kind, dtype, shape in trace.captures:
        obj = bindings.get(path)
        if obj is None or (kind == "variable") != isinstance(obj, resource_variable_ops.BaseResourceVariable):
            return None
        if obj.dtype != dtypes.as_dtype(dtype) or _shape(obj.shape) != shape:
            return None
        bound.append(obj)
    return bound


# An object argument (keying.Arguments) is an UnknownArgument in a trace's input signature, which the coder cannot
# encode: stored as this marker, restored as an UnknownArgument (the signature TensorFlow's own trace shows).
UNKNOWN_ARGUMENT = "graphcache:UnknownArgument"


def _unknown_encoded(value: Any) -> Any:
    return UNKNOWN_ARGUMENT if isinstance(value, func_graph_module.UnknownArgument) else value


def _unknown_decoded(value: Any) -> Any:
    return func_graph_module.UnknownArgument() if isinstance(value, str) and value == UNKNOWN_ARGUMENT else value


def _decoded(data: bytes) -> Any:
    return nest.map_structure(_unknown_decoded,
                              nested_structure_coder.decode_proto(struct_pb2.StructuredValue.FromString(data)))


def restore(trace: StoredTrace, captures: list[Any], function_type: Any, type_context: Any,
            fallback: Callable[[BaseException], Any]) -> Any:
    """The ConcreteFunction of a stored trace, bound to ``captures`` (bind()), typed for ``function_type``:
    called by name, its FuncGraph built only when something needs it (lazy.py; ``fallback(exc)``: a fresh
    trace, should that build fail)."""
    library = function_pb2.FunctionDefLibrary()
    library.CopyFrom(trace.library)  # renamed in place
    with ops.init_scope():  # the variables' handles as restore_captures takes them
        tensors = [restore_captures.get_tensor_from_node(obj) for obj in captures]
    variables = [obj for obj in captures if isinstance(obj, resource_variable_ops.BaseResourceVariable)]
    typed = lazy.function_type_of(function_type, tensors, _decoded(trace.outputs), type_context)
    lazy.register(library)
    concrete = lazy.LazyConcreteFunction(
        lazy.atomic(library, typed), tensors, variables, _decoded(trace.inputs),
        build=lambda: restore_graph(trace, captures, function_type, type_context), fallback=fallback)
    concrete._arg_keywords = list(trace.arg_keywords)
    concrete._num_positional_args = trace.positional
    return concrete


def restore_graph(trace: StoredTrace, captures: list[Any], function_type: Any, type_context: Any) -> Any:
    """The ConcreteFunction of a stored trace with a real FuncGraph: the SavedModel loader's path (every function
    imported as a FuncGraph: a Python Operation per node), bound to ``captures``, typed for ``function_type``."""
    library = function_pb2.FunctionDefLibrary()
    library.CopyFrom(trace.library)  # the loader renames in place
    objects = saved_object_graph_pb2.SavedObjectGraph()
    saved = objects.concrete_functions[trace.function]
    saved.canonicalized_input_signature.ParseFromString(trace.inputs)
    saved.output_signature.ParseFromString(trace.outputs)
    concrete = function_deserialization.load_function_def_library(library, saved_object_graph=objects)[trace.function]
    restore_captures.restore_captures(concrete, captures)
    graph = concrete.graph
    constant_captures(graph, trace.captures, captures)
    outputs = iter(graph.outputs)

    def take(spec: Any) -> Any:
        # The loader does not know the output shapes of the functions a function calls, so an output computed by
        # a nested tf.function has an unknown shape in the imported graph; the traced one's is in the entry.
        tensor = next(outputs)
        tensor.set_shape(spec.shape)
        return tensor

    def rebuilt(spec: Any) -> Any:  # an output of _output_spec's kinds, from its components among graph.outputs
        if spec is None or isinstance(spec, tensor_lib.TensorSpec):
            return None if spec is None else take(spec)
        return spec._from_compatible_tensor_list([take(component) for component in spec._flat_tensor_specs])

    graph.structured_outputs = nest.map_structure(rebuilt, _decoded(trace.outputs))
    output_type = trace_type.from_value(graph.structured_outputs, type_context)
    concrete._function_type = function_type_lib.FunctionType(  # the type TensorFlow's trace would have
        function_type.parameters.values(), graph.function_captures.capture_types, return_annotation=output_type)
    concrete._arg_keywords = list(trace.arg_keywords)
    concrete._num_positional_args = trace.positional
    # As a trace's own (shared_func_graph=False): the graph goes with the function unless TensorFlow releases it.
    concrete._garbage_collector = concrete_function_lib.ConcreteFunctionGarbageCollector(graph)
    return concrete


def constant_captures(graph: Any, described: list[list[Any]], captures: list[Any]) -> None:
    """The captures TensorFlow's trace copied in as Consts (CONSTANT), Consts in the rebuilt graph too: the loader
    makes every captured input a Placeholder. Each is replaced where the graph reads it and in ``graph.inputs``
    and the capture container, as capture_container.capture_by_value places one."""
    first = len(graph.inputs) - len(captures)
    for index, ((_, kind, _, _), tensor) in enumerate(zip(described, captures, strict=True)):
        if kind != CONSTANT:
            continue
        placeholder = graph.inputs[first + index]
        with graph.as_default():
            const = tensor._capture_as_const(placeholder.op.name)
        if const is None:  # not a single constant (capture_by_value keeps a Placeholder then, too)
            continue
        for consumer in placeholder.consumers():
            for position, read in enumerate(consumer.inputs):
                if read is placeholder:
                    consumer._update_input(position, const)
        graph.inputs[first + index] = const
        graph.function_captures.add_or_replace(key=id(tensor), external=tensor, internal=const, is_by_ref=False)


def fresh_hash(concrete: Any) -> str:
    """The canonical hash of a fresh trace's library (what GRAPHCACHE_TRACE_VERIFY compares)."""
    return library_hash(library_of(concrete.function_def.signature.name))


def library_hash(library: function_pb2.FunctionDefLibrary) -> str:
    """The canonical hash of a library (its first function calling the rest), function names held in string
    attributes compared as references (fnrefs.py)."""
    library = fnrefs.by_call_order(fnrefs.as_references(library))
    return canonical_function_hash(library.function[0], {f.signature.name: f for f in library.function[1:]})


__all__ = ["Described", "StoredTrace", "bind", "check_graph", "decode", "describe", "encode", "fresh_hash",
           "library_of", "restore", "restore_graph"]
