"""Function libraries: which functions of the eager context a FunctionDef reaches, and their canonical hash.

Two plugins need these: functions/ keys a first call by the library it instantiates, traces/ stores the
library a trace produced and compares a restored trace with a fresh one (GRAPHCACHE_TRACE_VERIFY).
"""

from __future__ import annotations

import functools
from typing import Any

from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2
from tensorflow.python.framework import op_def_registry

from . import keys
from .graphs import GraphView, Signature, func_refs


@functools.cache
def _calls_functions(op: str) -> bool:
    """Whether nodes of this op type can name functions in attributes (PartitionedCall, While, If, ...).
    Unknown op types (functions called by name) are handled by the caller."""
    op_def = op_def_registry.get(op)
    return op_def is not None and any(attr.type in ("func", "list(func)") for attr in op_def.attr)


def _referenced(fdef: function_pb2.FunctionDef, ops: set[str]) -> set[str]:
    """Names a FunctionDef (whose op types are ``ops``) may call: op types that are not registered ops, and
    ``func`` attributes (of nodes whose op type has such attributes, and of the function itself)."""
    names = {op for op in ops if op_def_registry.get(op) is None}
    callers = {op for op in ops if _calls_functions(op)}
    if callers:
        for node in fdef.node_def:
            if node.op in callers:
                for attr in node.attr.values():
                    names.update(func_refs(attr))
    for attr in fdef.attr.values():
        names.update(func_refs(attr))
    return names


def op_types(fdef: function_pb2.FunctionDef) -> set[str]:
    return {node.op for node in fdef.node_def}


def reachable_library(ctx: Any, fdef: function_pb2.FunctionDef, ops: set[str]
                      ) -> dict[str, function_pb2.FunctionDef]:
    """The functions of the eager context ``fdef`` (of op types ``ops``) reaches, itself excluded, by name."""
    library: dict[str, function_pb2.FunctionDef] = {}
    stack = sorted(_referenced(fdef, ops))
    top = fdef.signature.name
    while stack:
        name = stack.pop()
        if name in library or name == top or not ctx.has_function(name):
            continue
        callee = ctx.get_function_def(name)
        library[name] = callee
        stack.extend(sorted(_referenced(callee, op_types(callee))))
    return library


def call_order(fdef: function_pb2.FunctionDef, library: dict[str, function_pb2.FunctionDef]) -> list[str]:
    """The functions of ``library`` (what ``fdef`` reaches) in the order ``fdef`` and its callees first name them,
    breadth first (nodes in their order, a node's attributes by name, then the function's own attributes): an
    order that does not depend on the functions' names (functions/keying.py's fast key renames by it)."""
    if not library:  # most functions call none: no pass over their nodes (the fast key's hot path)
        return []
    order: dict[str, None] = {}
    queue = [fdef]
    while queue:
        current = queue.pop(0)
        for name in _named_in_order(current, library):
            if name not in order:
                order[name] = None
                queue.append(library[name])
    order.update(dict.fromkeys(sorted(set(library) - set(order))))  # none expected: a library is what fdef reaches
    return list(order)


def _named_in_order(fdef: function_pb2.FunctionDef, library: dict[str, function_pb2.FunctionDef]) -> list[str]:
    ops = op_types(fdef)
    callers = {op for op in ops if op in library or _calls_functions(op)}
    names: list[str] = []
    if callers:  # a function without calls (most) costs one pass over its op types
        for node in fdef.node_def:
            if node.op in callers:
                names.append(node.op)
                for key in sorted(node.attr):
                    names.extend(func_refs(node.attr[key]))
    for key in sorted(fdef.attr):
        names.extend(func_refs(fdef.attr[key]))
    return [name for name in names if name in library]


def _rename_attr(attr: attr_value_pb2.AttrValue, renamed: dict[str, str]) -> None:
    kind = attr.WhichOneof("value")
    funcs = [attr.func] if kind == "func" else list(attr.list.func) if kind == "list" else []
    for fn in funcs:
        fn.name = renamed.get(fn.name, fn.name)
        for nested in fn.attr.values():
            _rename_attr(nested, renamed)


def rename(library: function_pb2.FunctionDefLibrary, renamed: dict[str, str]) -> None:
    """Rename functions of ``library`` in place (old name -> new name): their signatures and every reference
    to them (a node whose op type is the function, ``func`` attributes, nested). Only nodes whose op type can
    refer to a function are visited: a library of a deep function with no calls costs one pass over op types."""
    for fdef in library.function:
        fdef.signature.name = renamed.get(fdef.signature.name, fdef.signature.name)
        callers = {op for op in op_types(fdef) if op in renamed or _calls_functions(op)}
        if callers:
            for node in fdef.node_def:
                if node.op in callers:
                    node.op = renamed.get(node.op, node.op)
                    for attr in node.attr.values():
                        _rename_attr(attr, renamed)
        for attr in fdef.attr.values():
            _rename_attr(attr, renamed)


def canonical_function_hash(fdef: function_pb2.FunctionDef, library: dict[str, function_pb2.FunctionDef]) -> str:
    """keys.graph_hash of a graph that calls ``fdef`` once: the function, its callees, in canonical form
    (tracing counters in names do not matter)."""
    graph = graph_pb2.GraphDef()
    graph.library.function.add().CopyFrom(fdef)
    for name in sorted(library):
        graph.library.function.add().CopyFrom(library[name])
    inputs = [f"arg{i}" for i in range(len(fdef.signature.input_arg))]
    for name in inputs:
        graph.node.add(name=name, op="Placeholder")
    graph.node.add(name="call", op=fdef.signature.name, input=inputs)
    outputs = max(1, len(fdef.signature.output_arg))
    view = GraphView(graph, Signature.create([f"call:{i}" for i in range(outputs)], [f"{n}:0" for n in inputs]))
    return keys.graph_hash(view)
