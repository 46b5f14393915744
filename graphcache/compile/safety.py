"""Poisoning defence: a loaded artifact may not bring in ops its source graph does not have.

A compiled graph is trusted only as far as it can be checked against what the user handed in. Grappler
rewrites introduce op types (fused kernels, Cast, Const, Identity, NoOp, reshapes, layout permutes,
arithmetic rewrites), but all of those are stateless: they compute, they cannot touch the world. So an
artifact is rejected when it contains an op type that the source graph does not have and that is

- stateful (its OpDef says so: file writers, Save/Restore, Print, py_func, random ops, variables, ...), or
- on ``IO_OPS``: stateless per its OpDef, yet reads files or memory it names (ReadFile, ImmutableConst, ...), or
- unknown to this TensorFlow (no OpDef: cannot be checked).

A rejected artifact is dropped (counted as ``untrusted_entry``) and the graph is compiled again.
Entries that no op check can cover (XLA executables) and entries from a remote or a bundle are covered
by signing instead (``GRAPHCACHE_SIGNING_KEY``, see codec.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from tensorflow.core.framework import graph_pb2

IO_OPS = frozenset({
    "ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst", "DecodeProtoV2", "LoadAndRemapMatrix",
    "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice", "MergeV2Checkpoints",
    "ShardedFilename", "ShardedFilespec", "Print", "PrintV2", "PyFunc", "PyFuncStateless", "EagerPyFunc",
})


def graph_ops(graph_def: graph_pb2.GraphDef) -> set[str]:
    """Every op type in a graph, library functions included (function-call ops by their function)."""
    ops = {node.op for node in graph_def.node}
    for fdef in graph_def.library.function:
        ops.update(node.op for node in fdef.node_def)
    return ops - {fdef.signature.name for fdef in graph_def.library.function}


def _stateful_or_unknown(op: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is None or op_def.is_stateful


def introduced_ops(source_ops: Iterable[str], artifact: graph_pb2.GraphDef | Iterable[str]) -> list[str]:
    """The op types the artifact (a GraphDef, or its op types as ``graph_ops`` gives them) brings in that it
    must not: sorted, empty when the artifact is fine."""
    ops = graph_ops(artifact) if isinstance(artifact, graph_pb2.GraphDef) else set(artifact)
    new = ops - set(source_ops)
    return sorted(op for op in new if op in IO_OPS or _stateful_or_unknown(op))
