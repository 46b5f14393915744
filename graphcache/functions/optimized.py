"""The payload of a ``tf_function`` entry: TensorFlow's OptimizedFunctionGraph, built, checked and named.

TensorFlow 2.21's file cache (optimize_function_graph_utils.cc) stores the result of
``OptimizeFunctionGraph`` (the function body after the function optimization passes, the placer,
Grappler and the post-rewrite passes, before partitioning) as an ``OptimizedFunctionGraph`` proto and
reads it back with ``OptimizedFunctionGraphInfo::FromProto``. It writes only optimizations that took
3 s or more (``kCachingThresholdDuration``, a constexpr in optimize_function_graph_utils.h passed as a
default argument by ProcessFunctionLibraryRuntime: nothing outside the binary can lower it).

graphcache builds the same proto itself for every function, from what TensorFlow's graph collector
hands out (``context.enable_graph_collection`` -> ``RunMetadata.function_graphs``): its
``post_optimization_graph`` is the optimized function graph, collected in PreprocessAndPartitionGraph
right before partitioning. On a function slow enough for TensorFlow to write its own file, the two
``function_graph`` fields are byte-identical (checked by the benchmark and a slow test). The other
fields come from the FunctionDef exactly as OptimizeFunctionGraph derives them: ``ret_types`` and
``num_return_nodes`` from the signature's outputs, ``node_name_to_control_ret`` from ``control_ret``
inverted (TensorFlow recomputes it only when a function optimization pass rewrote the control outputs,
which is caught below: such a graph is not stored).

Payload bytes = the proto serialized deterministically *without* its ``name`` (field 1): the name
carries the tracing counter of the process that stored it; at a hit the current function's name is
prepended as field 1 (protobuf accepts fields in any order), so nothing is re-serialized. Library
functions left in the optimized graph are renamed by content (keys.canonical_function_names) so they can
never clash with a function of the same name in another process.
"""

from __future__ import annotations

import os
from collections import Counter

from tensorflow.core.framework import function_pb2, graph_pb2, optimized_function_graph_pb2
from tensorflow.python.framework import op_def_registry

from ..compile import keys, safety
from ..compile.wire import fields, length_delimited_tag, varint
from ..errors import CorruptEntryError, UntrustedEntryError

OptimizedFunctionGraph = optimized_function_graph_pb2.OptimizedFunctionGraph
NAME_FIELD = 1
TASK_ID = -1  # tsl::port::TaskId() of the default platform (tsl/platform/default/port.cc)


def tf_file_name(function_name: str, node_count: int) -> str:
    """The file name TensorFlow's file cache looks up for a function (GetFileCacheName in
    optimize_function_graph_utils.cc): job name (``TF_JOB_NAME``), task id, the function name without
    its last ``_`` part, the FunctionDef's node count."""
    plain = function_name.rsplit("_", 1)[0] if "_" in function_name else function_name
    return f"{os.environ.get('TF_JOB_NAME', '')}_{TASK_ID}_{plain}_{node_count}"


def tf_file_bytes(function_name: str, payload: bytes | memoryview) -> bytes:
    """The file TensorFlow reads: the payload with the current function's name as field 1."""
    name = function_name.encode()
    return b"".join((length_delimited_tag(NAME_FIELD), varint(len(name)), name, payload))


# Field numbers of config.proto's RunMetadata.function_graphs and of its FunctionGraphs (read by hand: see
# pick_collected).
RUN_METADATA_FUNCTION_GRAPHS = 4
PRE_OPTIMIZATION_GRAPH, POST_OPTIMIZATION_GRAPH = 2, 3


def pick_collected(run_metadata: bytes | memoryview, fdef: function_pb2.FunctionDef) -> graph_pb2.GraphDef | None:
    """The post-optimization graph of ``fdef`` among the collected ones in ``run_metadata`` (a serialized
    RunMetadata, as the eager context exports it), or None (none, or ambiguous).

    Other instantiations may be collected in the same window (functions the call instantiates while it
    runs, other threads), so the one whose *pre*-optimization graph is ``fdef``'s body is taken: the body's
    nodes plus one ``_Arg`` per input and one ``_Retval`` per output. The export also holds every partition
    graph twice and each collected function's graphs before and after optimization (1.4 MB for a Keras
    EfficientNetV2B0 predict step): only what is needed is parsed (the pre-optimization graphs, the one
    post-optimization graph taken), the rest is skipped over by its framing."""
    body = {node.name for node in fdef.node_def}
    expected = len(body) + len(fdef.signature.input_arg) + len(fdef.signature.output_arg)
    found = []
    for number, _, graphs in fields(run_metadata):
        if number != RUN_METADATA_FUNCTION_GRAPHS:
            continue
        parts = {field: value for field, _, value in fields(graphs) if field != 1}  # 1: its partition graphs
        nodes = graph_pb2.GraphDef.FromString(bytes(parts.get(PRE_OPTIMIZATION_GRAPH, b""))).node
        if len(nodes) == expected and body <= {node.name for node in nodes} and \
                sum(node.op == "_Arg" for node in nodes) == len(fdef.signature.input_arg):
            found.append(parts.get(POST_OPTIMIZATION_GRAPH, b""))
    return graph_pb2.GraphDef.FromString(bytes(found[0])) if len(found) == 1 else None


class NotStorable(Exception):
    """The collected graph cannot be turned into a proto TensorFlow would accept for this function; ``reason``
    is its counter's (core/counters.py FUNCTION_REASONS)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def build(fdef: function_pb2.FunctionDef, optimized: graph_pb2.GraphDef, seconds: float,
          source_ops: set[str]) -> bytes:
    """The payload for ``fdef`` optimized to ``optimized``; raises NotStorable, also when a later read would
    refuse it (ops the function does not have that are stateful, do I/O or are unknown: e.g. the
    ``_XlaCompile``/``_XlaRun`` pair that auto-clustering adds)."""
    if any(arg.type_attr or arg.number_attr or arg.type_list_attr for arg in fdef.signature.output_arg):
        raise NotStorable("typed_outputs", "its outputs are typed by attributes")
    proto = OptimizedFunctionGraph()
    proto.function_graph.CopyFrom(optimized)
    keys.canonical_function_names(proto.function_graph)
    nodes = {node.name: node for node in proto.function_graph.node}
    for ret_name, node_name in fdef.control_ret.items():
        if node_name not in nodes:
            raise NotStorable("control_outputs", f"control output {ret_name!r} names node {node_name!r}, which the optimized "
                              "graph does not have (a pass rewrote the control outputs)")
        proto.node_name_to_control_ret[node_name] = ret_name
    proto.ret_types.extend(arg.type for arg in fdef.signature.output_arg)
    proto.num_return_nodes = len(fdef.signature.output_arg)
    proto.source = OptimizedFunctionGraph.JIT
    proto.optimization_time_usecs = int(seconds * 1e6)
    check_complete(proto.function_graph)
    check_signature(proto, fdef)
    introduced = _introduced(proto.function_graph, Counter(node.op for node in proto.function_graph.node),
                             source_ops)
    if introduced:
        raise NotStorable("introduced_ops", f"its optimized graph adds ops a cached graph may not bring in: {', '.join(introduced)}")
    return proto.SerializeToString(deterministic=True)


def _introduced(graph: graph_pb2.GraphDef, ops: Counter[str], source_ops: set[str]) -> list[str]:
    library = {f.signature.name for f in graph.library.function}
    artifact = set(ops) | {node.op for f in graph.library.function for node in f.node_def}
    return safety.introduced_ops(source_ops, artifact - library)


def check_complete(graph: graph_pb2.GraphDef) -> None:
    """Every op type is a registered op or a function of the graph's own library."""
    library = {f.signature.name for f in graph.library.function}
    ops = {node.op for node in graph.node}
    for fdef in graph.library.function:
        ops.update(node.op for node in fdef.node_def)
    missing = sorted(op for op in ops - library if op_def_registry.get(op) is None)
    if missing:
        raise NotStorable("incomplete", "the optimized graph uses functions it does not hold: "
                                        f"{', '.join(missing[:5])}")


def check_signature(proto: OptimizedFunctionGraph, fdef: function_pb2.FunctionDef,
                    ops: Counter[str] | None = None) -> None:
    """The proto fits ``fdef``: its argument nodes (``_Arg``, and a multi-device function's ``_DeviceArg`` for
    arguments in host memory: function_ops.cc) have distinct indices among the function's inputs, each of the
    input's type; one result node per output, the same output types. An input may have no node: one the optimized
    graph does not read any more (under a distribution strategy, the iterator of a step whose replicas' inputs
    arrive as other arguments), as in TensorFlow's own optimized graph. ``ops``: the graph's op types counted
    (computed here when not given)."""
    ops = Counter(node.op for node in proto.function_graph.node) if ops is None else ops
    inputs = fdef.signature.input_arg
    indices = [(node.attr["index"].i, node.attr["T"].type) for node in proto.function_graph.node
               if node.op in ("_Arg", "_DeviceArg")]
    misfits = [index for index, dtype in indices
               if not 0 <= index < len(inputs) or (inputs[index].type and dtype != inputs[index].type)]
    rets = ops["_Retval"] + ops["_DeviceRetval"]
    outputs = [arg.type for arg in fdef.signature.output_arg]
    if misfits or len({index for index, _ in indices}) != len(indices) or rets != len(outputs) \
            or list(proto.ret_types) != outputs or proto.num_return_nodes != len(outputs):
        raise NotStorable("signature", f"it has {len(indices)} arguments (indices or types {misfits} do not fit) and "
                                       f"{rets} results of types {list(proto.ret_types)}; the function has "
                                       f"{len(inputs)} and {len(outputs)} of types {outputs}")


def check_payload(payload: bytes | memoryview, fdef: function_pb2.FunctionDef, source_ops: set[str]) -> None:
    """A stored payload may be handed to TensorFlow for ``fdef``: it parses, it has no name field, it fits the
    function's signature, and it brings in no op its source does not have that is stateful, does I/O or is
    unknown (safety.py). Raises CorruptEntryError or UntrustedEntryError."""
    proto = OptimizedFunctionGraph()
    try:
        proto.ParseFromString(payload if isinstance(payload, bytes) else bytes(payload))
    except Exception as exc:  # protobuf's DecodeError and the C implementation's RuntimeError
        raise CorruptEntryError(f"payload is not an OptimizedFunctionGraph: {exc}") from None
    if proto.name:
        raise CorruptEntryError("payload names a function (graphcache stores it without its name)")
    graph = proto.function_graph
    ops = Counter(node.op for node in graph.node)
    try:
        check_signature(proto, fdef, ops)
    except NotStorable as exc:
        raise CorruptEntryError(f"payload does not fit function {fdef.signature.name}: {exc}") from None
    introduced = _introduced(graph, ops, source_ops)
    if introduced:
        raise UntrustedEntryError(f"it adds ops its source function does not have: {', '.join(introduced)}")
