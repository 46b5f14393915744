"""Checking a graph before Grappler sees it: TensorFlow's own importer, without its Python half.

Grappler aborts the process in native code on some malformed graphs (a signature input without a dtype,
an input that names no node, ...), where TensorFlow's C++ importer rejects the same graph with an
error. So a miss imports the graph once before compiling it, and that import also gives the dtypes and
static shapes of the feeds and fetches that Grappler's signature needs (compile/compilers/grappler.py).

That import used to be ``tf.graph_util.import_graph_def``. Its Python half (an ``Operation`` object per
node, device functions, colocation bookkeeping) was most of its cost and learns nothing a check needs
(``benchmarks/miss_parts.py`` times the validation on every miss as its "validation" row).
``validate`` now calls TensorFlow's C importer directly (``TF_GraphImportGraphDefWithResults``, with the
options ``import_graph_def`` sets), asks it for the signature's tensors as return outputs, and wraps
only their ops in Python to read dtype and shape. Where this TensorFlow lacks one of those pieces, it
falls back to ``import_graph_def``.

What is imported is a light copy: constants of more than ``LIGHT_TENSOR`` bytes keep their dtype and
shape (all that shape inference reads from a constant that big) but not their contents, so the check
copies no weights. Whether a constant is big is read from its shape, not its serialized size: protobuf's
``ByteSize`` serializes the tensor to measure it (a pass over every weight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorflow.core.framework import graph_pb2, types_pb2

from ..errors import InvalidGraphError
from .graphs import Signature

LIGHT_TENSOR = 1024  # constants larger than this (bytes) are stubbed for validation: dtype and shape kept
# Bytes per element of the dtypes whose constants can be big (types.proto's enum values). A constant of any
# other dtype (strings, quantized types) is imported whole.
_ITEM_SIZE = {1: 4, 2: 8, 3: 4, 4: 1, 5: 2, 6: 1, 8: 8, 9: 8, 10: 1, 14: 2, 17: 2, 18: 16, 19: 2, 22: 4, 23: 8}


@dataclass(frozen=True)
class TensorInfo:
    """A signature tensor as the importer sees it (what Grappler's signature needs)."""

    name: str
    dtype: Any  # tf.DType
    shape: Any  # tf.TensorShape


class ValidatedGraph:
    """What ``validate`` learned: the signature's tensors by name, with dtype and static shape.

    It stands in for the ``tf.Graph`` a compiler backend is handed (compile/compilers/base.py): ``get_tensor_by_name``
    serves the signature's tensors; any other ``tf.Graph`` attribute imports the light copy with
    ``import_graph_def`` once (the old, slower check) and is served by that graph.
    """

    def __init__(self, tensors: dict[str, TensorInfo], full_graph: Callable[[], Any]) -> None:
        self.tensors = tensors
        self._full_graph = full_graph
        self._graph: Any = None

    def get_tensor_by_name(self, name: str) -> Any:
        info = self.tensors.get(name)
        return info if info is not None else self.graph.get_tensor_by_name(name)

    @property
    def graph(self) -> Any:
        """The light copy imported into a real tf.Graph (built on first use)."""
        if self._graph is None:
            self._graph = self._full_graph()
        return self._graph

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("tensors", "_full_graph", "_graph"):
            raise AttributeError(name)
        return getattr(self.graph, name)


def _is_big_constant(tensor: Any) -> bool:
    item = _ITEM_SIZE.get(tensor.dtype)
    if item is None:
        return False
    size = item
    for dim in tensor.tensor_shape.dim:
        size *= dim.size
    return size > LIGHT_TENSOR


_DATA_TYPES = frozenset(types_pb2.DataType.values())


def _check_constant_dtype(node: Any, tensor: Any) -> None:
    """A constant whose tensor has a dtype TensorFlow does not know, or not the node's own, passes the
    importer but aborts the process when Grappler's constant folding builds the tensor (a CHECK in
    tensor.cc; found by tests/test_fuzz.py). TensorFlow's Const kernel rejects the second at run time."""
    declared = node.attr["dtype"].type if "dtype" in node.attr else tensor.dtype
    if tensor.dtype not in _DATA_TYPES or tensor.dtype != declared:
        raise InvalidGraphError(f"constant {node.name!r}: its value's dtype ({tensor.dtype}) is not a known "
                                f"dtype matching the node's dtype ({declared})")


def light_copy(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """The graph with big constants' contents left out: import checks wiring, ops, attributes and shapes
    (a Const's shape comes from its TensorProto's shape, not its bytes) without copying weights."""
    light = graph_pb2.GraphDef()
    light.versions.CopyFrom(graph_def.versions)
    light.library.CopyFrom(graph_def.library)
    add = light.node.add
    for node in graph_def.node:
        if node.op == "Const" and "value" in node.attr:
            tensor = node.attr["value"].tensor
            _check_constant_dtype(node, tensor)
            if _is_big_constant(tensor):
                stub = add(name=node.name, op=node.op, device=node.device, input=node.input)
                for key, value in node.attr.items():
                    if key != "value":
                        stub.attr[key].CopyFrom(value)
                stub_tensor = stub.attr["value"].tensor
                stub_tensor.dtype = tensor.dtype
                stub_tensor.tensor_shape.CopyFrom(tensor.tensor_shape)
                continue
        add().CopyFrom(node)
    return light


def validate(graph_def: graph_pb2.GraphDef, signature: Signature) -> ValidatedGraph:
    """Import the graph (a light copy) with TensorFlow's importer and check the signature's tensors: what
    would abort Grappler in native code fails here as InvalidGraphError."""
    light = light_copy(graph_def)
    names = [*signature.feeds, *signature.fetches]

    def full_graph() -> Any:
        return _python_import(light, names)

    try:
        tensors = _c_import(light.SerializeToString(), names)
    except _CImportUnavailable:
        graph = full_graph()
        tensors = {name: TensorInfo(name, graph.get_tensor_by_name(name).dtype,
                                    graph.get_tensor_by_name(name).shape) for name in names}
        validated = ValidatedGraph(tensors, full_graph)
        validated._graph = graph
        return validated
    return ValidatedGraph(tensors, full_graph)


class _CImportUnavailable(RuntimeError):
    """This TensorFlow lacks a piece the C-level import uses."""


_C_FUNCTIONS = (
    "TF_NewImportGraphDefOptions", "TF_DeleteImportGraphDefOptions", "TF_ImportGraphDefOptionsSetPrefix",
    "TF_ImportGraphDefOptionsSetUniquifyNames", "TF_ImportGraphDefOptionsSetPropagateDeviceSpec",
    "TF_ImportGraphDefOptionsSetValidateColocationConstraints", "TF_ImportGraphDefOptionsAddReturnOutput",
    "TF_NewBufferFromString", "TF_DeleteBuffer", "TF_GraphImportGraphDefWithResults",
    "TF_ImportGraphDefResultsReturnOutputs", "TF_OperationName",
)


def _c_import(data: bytes, names: list[str]) -> dict[str, TensorInfo]:
    """Import serialized ``data`` into a throwaway tf.Graph through the C API only; the named tensors'
    dtypes and shapes (their ops alone are wrapped in Python)."""
    import tensorflow as tf

    try:
        from tensorflow.python.framework import c_api_util, errors, importer

        c = {name: getattr(importer.c_api, name) for name in _C_FUNCTIONS}
        graph = tf.Graph()
        c_graph, wrap = graph._c_graph, graph._create_op_from_tf_operation
        scoped_results, import_error = c_api_util.ScopedTFImportGraphDefResults, errors.OpError
    except (ImportError, AttributeError) as exc:
        raise _CImportUnavailable(str(exc)) from None
    options = c["TF_NewImportGraphDefOptions"]()
    try:
        # import_graph_def's options (importer._PopulateTFImportGraphDefOptions) for name="" and no input map
        c["TF_ImportGraphDefOptionsSetPrefix"](options, "")
        c["TF_ImportGraphDefOptionsSetUniquifyNames"](options, True)
        c["TF_ImportGraphDefOptionsSetPropagateDeviceSpec"](options, False)
        c["TF_ImportGraphDefOptionsSetValidateColocationConstraints"](options, True)
        for name in names:
            node, _, index = name.rpartition(":")
            c["TF_ImportGraphDefOptionsAddReturnOutput"](options, node, int(index))
        buffer = c["TF_NewBufferFromString"](data)
        try:
            with c_graph.get() as raw_graph:
                results = scoped_results(c["TF_GraphImportGraphDefWithResults"](raw_graph, buffer, options))
            outputs = c["TF_ImportGraphDefResultsReturnOutputs"](results.results)
        except import_error as exc:
            message = exc.message
            if "return output" in message or "return tensor" in message:  # a signature tensor is not there
                named = ", ".join(repr(name) for name in names if f"'{name.rpartition(':')[0]}'" in message)
                raise InvalidGraphError(f"{named or 'a signature tensor'} is not a tensor of the graph: "
                                        f"{message}") from None
            raise InvalidGraphError(f"the graph does not import into TensorFlow: {message}") from None
        finally:
            c["TF_DeleteBuffer"](buffer)
    finally:
        c["TF_DeleteImportGraphDefOptions"](options)
    ops: dict[str, Any] = {}
    tensors: dict[str, TensorInfo] = {}
    for name, output in zip(names, outputs, strict=True):
        key = c["TF_OperationName"](output.oper)
        if key not in ops:
            ops[key] = wrap(output.oper, compute_device=False)
        tensor = ops[key].outputs[output.index]
        tensors[name] = TensorInfo(name, tensor.dtype, tensor.shape)
    return tensors


def _python_import(light: graph_pb2.GraphDef, names: list[str]) -> Any:
    """``import_graph_def`` of the light copy into a new tf.Graph, the signature's tensors checked."""
    import tensorflow as tf

    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(light, name="")
    except Exception as exc:  # import reports bad graphs as ValueError, TypeError, KeyError, OpError...
        raise InvalidGraphError(f"the graph does not import into TensorFlow: {exc}") from None
    for name in names:
        try:
            graph.get_tensor_by_name(name)
        except (KeyError, ValueError) as exc:
            raise InvalidGraphError(f"{name!r} is not a tensor of the graph: {exc}") from None
    return graph
