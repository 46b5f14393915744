"""Turning what the user has into a GraphDef and a signature, and checking that graphcache can take it.

Nothing here hashes or compiles: ``GraphView`` is the shared read-only view (nodes by name, the fan-in
of the fetches and targets, the library functions it reaches) that fingerprinting and the resource-op
scan both walk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import xxhash
from google.protobuf import message as _pb_message
from google.protobuf import text_format
from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, types_pb2

from ..core.settings import SMALL_GRAPH_BYTES
from ..errors import InvalidGraphError, UnsupportedGraphError
from . import wire

# -- loading ---------------------------------------------------------------------------------------------------


class Source(NamedTuple):
    """A graph as given: always a GraphDef, plus the tf.Graph when the user passed one (no re-import)."""

    graph_def: graph_pb2.GraphDef
    tf_graph: Any = None  # tf.Graph | None
    path: str | None = None


class Handover:
    """A GraphDef handed to GraphCache with the caller's only reference, so that the cache can let go of it
    once the key is known (``GraphCache.compile_by_running``): a miss that runs the graph does not then hold a
    frozen model's weights through the run. ``load`` takes it, once."""

    def __init__(self, graph_def: graph_pb2.GraphDef) -> None:
        self._graph_def: graph_pb2.GraphDef | None = graph_def

    def take(self) -> graph_pb2.GraphDef:
        graph_def, self._graph_def = self._graph_def, None
        if graph_def is None:
            raise InvalidGraphError("a handed-over graph can be loaded once")
        return graph_def


def parse_graph_def(data: bytes | memoryview, *, origin: str = "input") -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(bytes(data) if isinstance(data, memoryview) else data)
    except (_pb_message.DecodeError, RuntimeError, ValueError) as exc:
        raise InvalidGraphError(f"{origin} is not a serialized GraphDef ({type(exc).__name__}: {exc})") from None
    if not graph_def.node and len(data) > 0:
        raise InvalidGraphError(f"{origin} parses as a GraphDef with no nodes: not a graph")
    return graph_def


_NODE_TAG = wire.length_delimited_tag(1)  # GraphDef.node (tensorflow/core/framework/graph.proto)
_LIBRARY_TAG = wire.length_delimited_tag(2)  # GraphDef.library


def serialize(graph_def: graph_pb2.GraphDef) -> bytes:
    """``graph_def.SerializeToString()``, byte for byte, in less time (see ``serialized_pieces``)."""
    return b"".join(serialized_pieces(graph_def))


def serialized_pieces(graph_def: graph_pb2.GraphDef) -> list[bytes]:
    """The serialized GraphDef as pieces whose concatenation is ``graph_def.SerializeToString()``.

    protobuf's upb binding serializes one large message markedly slower than the same bytes written one
    node at a time, and a caller that embeds the graph in a bigger message (a MetaGraphDef) can join the
    pieces once instead of copying the whole graph again. Nodes come first, each with its field framing,
    then the library, then the small remaining fields: field-number order, as protobuf writes them.
    """
    tag, varint = _NODE_TAG, wire.varint
    pieces: list[bytes] = []
    append = pieces.append
    for node in graph_def.node:
        data = node.SerializeToString()
        append(tag)
        append(varint(len(data)))
        append(data)
    if graph_def.HasField("library"):
        data = graph_def.library.SerializeToString()
        pieces += (_LIBRARY_TAG, varint(len(data)), data)
    rest = graph_pb2.GraphDef(version=graph_def.version)  # the fields after the library: 3, 4, 5
    if graph_def.HasField("versions"):
        rest.versions.CopyFrom(graph_def.versions)
    if graph_def.HasField("debug_info"):
        rest.debug_info.CopyFrom(graph_def.debug_info)
    append(rest.SerializeToString())
    return pieces


def exact_hash(graph_def: graph_pb2.GraphDef, byte_budget: int | None = None) -> str | None:
    """The xxh3-128 of ``graph_def``'s serialization, hashed piece by piece as serialized_pieces writes it
    (nodes, library, the rest; no copy of the whole graph) in protobuf's deterministic form (map entries in
    key order; upb's map order otherwise changes from process to process), or None once its nodes' bytes pass
    ``byte_budget``. A budget in bytes, not time: the answer is the graph's alone, the same in every process
    however loaded its machine (compile/keys.exact_key locks on it). Exact bytes, names included: equal hashes
    mean equal graphs."""
    hasher = xxhash.xxh3_128()
    update = hasher.update
    left = byte_budget
    for node in graph_def.node:
        data = node.SerializeToString(deterministic=True)  # attr maps in key order: the same in every process
        if left is not None:
            left -= len(data)
            if left < 0:
                return None
        update(len(data).to_bytes(8, "little"))
        update(data)
    if graph_def.HasField("library"):
        update(b"library")
        update(graph_def.library.SerializeToString(deterministic=True))
    rest = graph_pb2.GraphDef(version=graph_def.version)
    if graph_def.HasField("versions"):
        rest.versions.CopyFrom(graph_def.versions)
    if graph_def.HasField("debug_info"):
        rest.debug_info.CopyFrom(graph_def.debug_info)
    update(b"rest")
    update(rest.SerializeToString(deterministic=True))
    return hasher.hexdigest()


def read_graph_file(path: str | os.PathLike[str]) -> graph_pb2.GraphDef:
    """A GraphDef from a binary ``.pb`` or a text ``.pbtxt`` file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidGraphError(f"cannot read graph file {str(path)!r}: {exc.strerror or exc}") from None
    if path.suffix in (".pbtxt", ".txt"):
        graph_def = graph_pb2.GraphDef()
        try:
            text_format.Parse(data.decode("utf-8"), graph_def)
        except (text_format.ParseError, UnicodeDecodeError) as exc:
            raise InvalidGraphError(f"{str(path)!r} is not a text GraphDef: {exc}") from None
        return graph_def
    return parse_graph_def(data, origin=repr(str(path)))


def load(graph: Any) -> Source:
    """Accept a GraphDef, a tf.Graph, serialized bytes, or a path to a .pb/.pbtxt file."""
    if isinstance(graph, graph_pb2.GraphDef):
        return Source(graph)
    if isinstance(graph, Handover):
        return Source(graph.take())
    if isinstance(graph, bytes | bytearray | memoryview):
        return Source(parse_graph_def(bytes(graph)))
    if isinstance(graph, str | os.PathLike):
        return Source(read_graph_file(graph), path=str(graph))
    as_graph_def = getattr(graph, "as_graph_def", None)
    if callable(as_graph_def) and type(graph).__name__ == "Graph":
        return Source(as_graph_def(), tf_graph=graph)
    raise InvalidGraphError(
        f"cannot use a {type(graph).__module__}.{type(graph).__name__} as a graph: "
        "pass a GraphDef, a tf.Graph, serialized GraphDef bytes, or a .pb/.pbtxt path"
    )


# -- signatures ------------------------------------------------------------------------------------------------


def _name_of(item: Any, what: str) -> str:
    if isinstance(item, bytes):
        item = item.decode()
    if isinstance(item, str):
        if not item:
            raise InvalidGraphError(f"empty {what} name")
        return item
    name = getattr(item, "name", None)
    if isinstance(name, str) and name:
        return name
    raise InvalidGraphError(f"a {what} must be a name, a tf.Tensor or a tf.Operation, got {type(item).__name__}")


def tensor_name(item: Any, what: str = "tensor") -> str:
    """``"x"`` -> ``"x:0"``; ``"x:1"`` stays; tensors give their name."""
    name = _name_of(item, what).lstrip("^")
    if ":" in name:
        node, _, index = name.rpartition(":")
        if not node or not index.isdigit():
            raise InvalidGraphError(f"{what} {name!r} is not a tensor name (expected 'node:index')")
        return f"{node}:{int(index)}"
    return f"{name}:0"


def op_name(item: Any, what: str = "target") -> str:
    name = _name_of(item, what).lstrip("^")
    node, sep, index = name.rpartition(":")
    return node if sep and index.isdigit() else name


def _as_list(items: Any) -> list[Any]:
    if items is None:
        return []
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        return [items]
    return list(items)


class Signature(NamedTuple):
    """What one compile is for: sorted, normalized feeds (tensors), fetches (tensors) and targets (ops)."""

    feeds: tuple[str, ...]
    fetches: tuple[str, ...]
    targets: tuple[str, ...]

    @classmethod
    def create(cls, fetches: Any, feeds: Any = (), targets: Any = ()) -> Signature:
        fetch_names = tuple(sorted({tensor_name(f, "fetch") for f in _as_list(fetches)}))
        feed_names = tuple(sorted({tensor_name(f, "feed") for f in _as_list(feeds)}))
        target_names = tuple(sorted({op_name(t) for t in _as_list(targets)}))
        if not fetch_names and not target_names:
            raise InvalidGraphError("nothing to compile: give at least one fetch or target")
        return cls(feed_names, fetch_names, target_names)

    def roots(self) -> list[str]:
        """Node names whose fan-in the compile keeps."""
        return [t.rpartition(":")[0] for t in self.fetches] + list(self.targets)

    def as_dict(self) -> dict[str, list[str]]:
        return {"feeds": list(self.feeds), "fetches": list(self.fetches), "targets": list(self.targets)}


def input_node(name: str) -> str:
    """The node an input string refers to: ``"^a"``, ``"a:1"`` and ``"a"`` all name node ``a``."""
    name = name[1:] if name.startswith("^") else name
    node, sep, index = name.rpartition(":")
    return node if sep and index.isdigit() else name


# -- the view --------------------------------------------------------------------------------------------------


def func_refs(attr: attr_value_pb2.AttrValue) -> Iterator[str]:
    """Names of the functions an attribute value refers to (directly or nested)."""
    kind = attr.WhichOneof("value")
    if kind == "func":
        yield attr.func.name
        for nested in attr.func.attr.values():
            yield from func_refs(nested)
    elif kind == "list":
        for fn in attr.list.func:
            yield fn.name
            for nested in fn.attr.values():
                yield from func_refs(nested)


def node_func_refs(node: node_def_pb2.NodeDef, functions: dict[str, Any]) -> Iterator[str]:
    if node.op in functions:
        yield node.op
    for attr in node.attr.values():
        yield from func_refs(attr)


class GraphView:
    """Read-only indexes over one GraphDef for one signature. Validates the signature's names."""

    def __init__(self, graph_def: graph_pb2.GraphDef, signature: Signature) -> None:
        self.graph_def = graph_def
        self.signature = signature
        self.nodes: dict[str, node_def_pb2.NodeDef] = {}
        for node in graph_def.node:
            if node.name in self.nodes:
                raise InvalidGraphError(f"the graph has two nodes named {node.name!r}")
            self.nodes[node.name] = node
        self.functions: dict[str, function_pb2.FunctionDef] = {
            f.signature.name: f for f in graph_def.library.function
        }
        self.gradients: dict[str, str] = {g.function_name: g.gradient_func for g in graph_def.library.gradient}
        missing = [
            (what, name)
            for what, names in (("feed", signature.feeds), ("fetch", signature.fetches))
            for name in names
            if name.rpartition(":")[0] not in self.nodes
        ] + [("target", name) for name in signature.targets if name not in self.nodes]
        if missing:
            listed = ", ".join(f"{what} {name!r}" for what, name in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise InvalidGraphError(f"not in the graph: {listed}{more}")
        self.reachable, self._fan_in_ops = self._fan_in(signature.roots())  # names, and their op types
        self.reachable_functions = self._functions_used(self.nodes[n] for n in self.reachable)
        self._reachable_ops: frozenset[str] | None = None  # the fan-in's and its functions' op types
        self._op_types: frozenset[str] | None = None  # kept by release()

    def _fan_in(self, roots: list[str]) -> tuple[list[str], set[str]]:
        """Names of the nodes the roots depend on (data and control inputs), roots included, and those nodes'
        op types, gathered on the way (reading them again later costs a second pass over the nodes).

        The walk is the per-node Python cost of every compile and hit (thousands of nodes on a big model), so an
        input that is a plain node name, most of them, is pushed as it is, and only ``^a`` and ``a:1`` go
        through input_node."""
        seen: set[str] = set()
        ops: set[str] = set()
        stack = list(roots)
        push, pop, see, get, add_op = stack.append, stack.pop, seen.add, self.nodes.get, ops.add
        while stack:
            name = pop()
            if name in seen:
                continue
            see(name)
            node = get(name)
            if node is None:
                raise InvalidGraphError(f"node {name!r} is used as an input but is not in the graph")
            add_op(node.op)
            for value in node.input:
                push(value if ":" not in value and value[:1] != "^" else input_node(value))
        return sorted(seen), ops

    def _functions_used(self, nodes: Iterable[node_def_pb2.NodeDef]) -> list[str]:
        if not self.functions:  # only library functions are returned: without a library, there are none
            return []  # (and walking every attribute of a frozen CNN is a pass over every node)
        seen: set[str] = set()
        stack = [ref for node in nodes for ref in node_func_refs(node, self.functions)]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            fdef = self.functions.get(name)
            if fdef is None:
                continue  # a built-in op referenced by name, or a function missing from the library
            seen.add(name)
            for node in fdef.node_def:
                stack.extend(node_func_refs(node, self.functions))
            for attr in fdef.attr.values():
                stack.extend(func_refs(attr))
            gradient = self.gradients.get(name)
            if gradient:
                stack.append(gradient)
        return sorted(seen)

    def all_reachable_nodes(self) -> Iterator[tuple[str, node_def_pb2.NodeDef]]:
        """(where, node) for every reachable node, in the graph and inside reachable functions."""
        for name in self.reachable:
            yield "", self.nodes[name]
        for fname in self.reachable_functions:
            for node in self.functions[fname].node_def:
                yield fname, node

    def reachable_ops(self) -> frozenset[str]:
        """Op types of every reachable node, in the graph and inside reachable functions (calls included)."""
        if self._reachable_ops is None:
            ops = set(self._fan_in_ops)
            for fname in self.reachable_functions:
                ops.update(node.op for node in self.functions[fname].node_def)
            self._reachable_ops = frozenset(ops)
        return self._reachable_ops

    def op_types(self) -> set[str]:
        """Op types of the fan-in and the functions it reaches (function calls excluded)."""
        if self._op_types is not None:
            return set(self._op_types)
        return set(self.reachable_ops()) - set(self.functions)

    def release(self) -> None:
        """Let go of the GraphDef (a frozen model's weights) once the key is known, when what follows needs
        only the signature and the op types (a miss that compiles by running the graph): the op types are
        kept, every other index emptied."""
        self._op_types = frozenset(self.op_types())
        self.graph_def = graph_pb2.GraphDef()
        self.nodes, self.functions, self.gradients = {}, {}, {}
        self.reachable, self.reachable_functions = [], []
        self._fan_in_ops, self._reachable_ops = set(), frozenset()

    def check_supported(self) -> None:
        """Raise UnsupportedGraphError when the fan-in holds non-variable resource state. Whether a node is
        such state depends on its op type alone, so the op types are checked first (a graph has a few dozen)
        and the nodes are walked only to name the offending ones."""
        stateful = {op for op in self.reachable_ops() if is_stateful_resource_op_type(op, self.functions)}
        if not stateful:
            return
        offending = [
            (f"{where}/{node.name}" if where else node.name, node.op)
            for where, node in self.all_reachable_nodes()
            if node.op in stateful
        ]
        raise UnsupportedGraphError(unsupported_message(offending), offending)


def unsupported_message(offending: list[tuple[str, str]]) -> str:
    shown = ", ".join(f"{name} ({op})" for name, op in offending[:5])
    more = f" and {len(offending) - 5} more" if len(offending) > 5 else ""
    return (
        f"graph holds resource state other than variables, which a cached compile cannot carry: "
        f"{len(offending)} node(s): {shown}{more}. Freeze the graph (turn lookup tables into constants "
        f"with tf.compat.v1.graph_util / convert_variables_to_constants_v2), or split it so that input "
        f"pipelines, tables and queues run outside the cached part and feed its placeholders."
    )


# -- resource-op classification --------------------------------------------------------------------------------

# Ops that create, read or update variables: supported (ref VariableV2 and resource variables alike).
_VARIABLE_OPS = frozenset({
    "VarHandleOp", "_VarHandlesOp", "ReadVariableOp", "_ReadVariablesOp", "AssignVariableOp",
    "AssignAddVariableOp", "AssignSubVariableOp", "VarIsInitializedOp", "VariableShape",
    "DestroyResourceOp", "ResourceGather", "ResourceGatherNd", "ResourceStridedSliceAssign",
    "ResourceCountUpTo", "ReadVariableXlaSplitND", "AssignVariableXlaConcatND",
    "VariableV2", "Variable", "TemporaryVariable", "DestroyTemporaryVariable",
})
_VARIABLE_OP_PREFIXES = ("ResourceApply", "ResourceSparseApply", "ResourceScatter")
# Ops whose DT_RESOURCE inputs or outputs merely pass a handle along (typed by an attribute): the
# handle's creator decides. Function calls and control flow are covered by scanning the functions.
# Legacy stateful ops whose handle is a ref string rather than DT_RESOURCE.
_LEGACY_STATE_OPS = frozenset({
    "HashTable", "MutableHashTable", "MutableHashTableOfTensors", "MutableDenseHashTable",
    "FIFOQueue", "PaddingFIFOQueue", "RandomShuffleQueue", "PriorityQueue", "Stack",
    "TensorArray", "TensorArrayV2", "WholeFileReader", "TextLineReader", "TFRecordReader",
    "FixedLengthRecordReader", "IdentityReader", "LMDBReader", "Barrier", "ConditionalAccumulator",
    "SparseConditionalAccumulator",
})


def _op_def(op: str):
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op)


def is_variable_op(op: str) -> bool:
    return op in _VARIABLE_OPS or op.startswith(_VARIABLE_OP_PREFIXES)


# Op type -> whether it is stateful resource state (the scan asks per node; graphs have few op types).
# Unknown op types are not remembered: a library loaded later may register them.
_RESOURCE_STATE: dict[str, bool] = {}


def is_stateful_resource_op(node: node_def_pb2.NodeDef, functions: dict[str, Any]) -> bool:
    return is_stateful_resource_op_type(node.op, functions)


def is_stateful_resource_op_type(op: str, functions: dict[str, Any]) -> bool:
    """Whether a node of op type ``op`` is resource state other than a variable (a call of one of
    ``functions`` is not: the function's own nodes are checked)."""
    if op in _LEGACY_STATE_OPS or op.endswith(("Dataset", "DatasetV2", "DatasetV3", "DatasetV4")):
        return True
    if op in functions:
        return False
    known = _RESOURCE_STATE.get(op)
    if known is not None:
        return known
    if is_variable_op(op):
        result = False
    else:
        op_def = _op_def(op)
        if op_def is None:
            return False  # an unknown op: validation (import) reports it
        result = any(arg.type == types_pb2.DT_RESOURCE for arg in (*op_def.input_arg, *op_def.output_arg))
    _RESOURCE_STATE[op] = result
    return result


def unsupported_nodes(graph_def: graph_pb2.GraphDef) -> list[tuple[str, str]]:
    """Every non-variable resource node in the whole graph and its library (not just one fan-in)."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    found = [(n.name, n.op) for n in graph_def.node if is_stateful_resource_op(n, functions)]
    for fdef in graph_def.library.function:
        found.extend((f"{fdef.signature.name}/{n.name}", n.op) for n in fdef.node_def
                     if is_stateful_resource_op(n, functions))
    return found


def too_small(graph_def: graph_pb2.GraphDef, min_nodes: int) -> bool:
    """Too small to be worth caching in a session (``GRAPHCACHE_MIN_NODES``): under ``min_nodes`` nodes and
    under a MiB (big constants are worth caching however few the nodes). Decided once per session, at its
    first run, before any state lives in its run graph."""
    return len(graph_def.node) < min_nodes and graph_def.ByteSize() < SMALL_GRAPH_BYTES
