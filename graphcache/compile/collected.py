"""A signature's compiled graph as TensorFlow's own session built it, made importable.

Run with ``RunOptions(output_partition_graphs=True)``, a DirectSession hands back the graph its executor runs
for that run's signature: after Grappler, placement, TensorFlow's graph passes and oneDNN's rewrites. Kept as
an entry, it is what a plain session compiles, without the offline Grappler call's serialized copies of the
graph: a Session collecting them peaks where plain TensorFlow does, one compiling them offline well above,
and the collected graphs replay bit for bit (benchmarks/results/session_collect_probe.txt, written by
benchmarks/session_collect_probe.py).

The session's graph speaks through a call frame: one ``_Arg`` node per distinct feed and one ``_Retval``
per distinct fetch, each numbered by its name's place in the sorted names (DirectSession's executor key).
``importable`` turns it into a graph that a run graph imports like any compiled one, by the user's names:
each ``_Arg`` becomes a Placeholder named as the fed node, each ``_Retval`` is dropped, and its input must
be the fetched tensor under its own name. What cannot be mapped that way raises ``NotImportable`` with the
reason: several partitions (devices), a fed output other than a node's first, a fetch that TensorFlow's
passes renamed, a name the importer refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tensorflow.core.framework import graph_pb2, node_def_pb2

from .graphs import input_node, tensor_name

_CROSS_DEVICE = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})


class NotImportable(ValueError):
    """The session's graph cannot stand in for a compiled one (the message says why)."""


def importable(partitions: Sequence[graph_pb2.GraphDef], feeds: Sequence[str], fetches: Sequence[str],
               targets: Sequence[str] = (), feed_types: Mapping[str, int] | None = None) -> graph_pb2.GraphDef:
    """The one partition graph of a run made importable by the user's names, edited in place (a frozen
    model's weights are not copied). ``feeds`` and ``fetches`` are tensor names, ``targets`` op names.

    A feed the fetches do not need has no ``_Arg`` (TensorFlow prunes it): it gets a Placeholder of its
    dtype in ``feed_types`` (a ``DataType`` enum by tensor name), so that a run graph can still be fed it."""
    if len(partitions) != 1:
        raise NotImportable(f"the run spans {len(partitions)} partition graphs (devices), not one")
    graph_def = partitions[0]
    feed_order = sorted({tensor_name(feed) for feed in feeds})  # "node:port", as TensorFlow names them
    fetch_order = sorted({tensor_name(fetch) for fetch in fetches})
    renamed: dict[str, str] = {}  # _Arg node -> the fed node's name
    retvals: list[int] = []
    for position, node in enumerate(graph_def.node):
        if node.op in _CROSS_DEVICE:
            raise NotImportable(f"node {node.name!r} ({node.op}) passes tensors between devices")
        if node.op == "_Arg":
            feed = feed_order[_index(node, len(feed_order))]
            fed_node, _, port = feed.rpartition(":")
            if port != "0":
                raise NotImportable(f"feed {feed!r} is output {port} of its node: a Placeholder has one output")
            dtype = node.attr["T"].type
            node.op = "Placeholder"
            node.ClearField("attr")
            node.attr["dtype"].type = dtype
            renamed[node.name] = fed_node
        elif node.op == "_Retval":
            fetch = fetch_order[_index(node, len(fetch_order))]
            if len(node.input) != 1 or tensor_name(node.input[0]) != fetch:
                raise NotImportable(f"fetch {fetch!r} is computed by {list(node.input)} in TensorFlow's graph")
            retvals.append(position)
    if len(retvals) != len(fetch_order):
        raise NotImportable(f"the call frame has {len(retvals)} results for {len(fetch_order)} fetches")
    for position in reversed(retvals):
        del graph_def.node[position]
    names = {node.name for node in graph_def.node if node.name not in renamed}
    unused = [feed for feed in feed_order if input_node(feed) not in renamed.values()]
    clash = sorted((set(renamed.values()) | {input_node(feed) for feed in unused}) & names)
    if clash:
        raise NotImportable(f"fed node {clash[0]!r} is still in TensorFlow's graph beside its feed")
    for feed in unused:  # pruned by TensorFlow: a Placeholder so that a run graph can still be fed it
        fed_node, _, port = feed.rpartition(":")
        dtype = (feed_types or {}).get(feed)
        if port != "0" or dtype is None:
            raise NotImportable(f"feed {feed!r} is not used by the run and cannot stand as a Placeholder")
        placeholder = graph_def.node.add(name=fed_node, op="Placeholder")
        placeholder.attr["dtype"].type = dtype
    for node in graph_def.node:
        node.name = renamed.get(node.name, node.name)
        if node.name.startswith("_"):
            raise NotImportable(f"node {node.name!r}: the importer refuses names that start with '_'")
        for i, text in enumerate(node.input):  # "a", "a:1", "^a": the node's name comes first after any "^"
            source = input_node(text)
            if source in renamed:
                node.input[i] = text.replace(source, renamed[source], 1)
    missing = sorted(set(targets) - {node.name for node in graph_def.node})
    if missing:
        raise NotImportable(f"target {missing[0]!r} is not in TensorFlow's graph")
    return graph_def


def _index(node: node_def_pb2.NodeDef, count: int) -> int:
    index = node.attr["index"].i
    if not 0 <= index < count:
        raise NotImportable(f"call-frame node {node.name!r} has index {index} of {count}")
    return index
