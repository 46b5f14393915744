"""The cache key: xxh3-128 over named parts, each hashed on its own so a miss can be explained.

Parts, in this order: ``graph`` (the canonical form of the fetches' and targets' fan-in, functions
included), ``feeds``, ``fetches``, ``targets``, ``options`` (the ConfigProto's graph_options) and
``identity`` (the compiler identity, see identity.py). ``key = xxh3_128("name=parthash\\n" ...)``.

Canonical form. GraphDefs from tracing and freezing are not canonical as produced; what varies with a
process's history, and how it is normalized:

- node order: nodes are hashed sorted by name; control inputs sorted and de-duplicated (data inputs
  keep their order: it is semantic);
- leftover nodes and functions (unused constants, functions traced for other purposes): only the fan-in
  of the fetches and targets, and the functions it reaches, are hashed: nothing else can change what
  Grappler produces, which is pruned to that fan-in;
- function names carry process-wide counters (``__inference_call_1234``): every library function is
  named by the hash of its own canonical body, callees first (``canonical_function_names``);
- internal attributes: only those on ``DROPPED_ATTRS``, each known not to change the compiled result,
  are left out. Others (``_XlaMustCompile``, ``_noinline``, ``_lower_using_switch_merge``, ...) stay;
- debug data (``experimental_debug_info``, GraphDef ``debug_info``) is never hashed.

Large tensor contents are fed to the hasher in place, not serialized with their node, so fingerprinting
costs little more than one pass over the weights' bytes.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass
from typing import Any

import xxhash
from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2

from .core.keyparts import combine, hash_json, hash_text
from .graphs import GraphView, Signature, func_refs, input_node

log = logging.getLogger("graphcache")

# Internal attributes left out of the key, each with why it cannot change the compiled result.
DROPPED_ATTRS = frozenset({
    "_has_manual_control_dependencies",  # tracing bookkeeping for automatic control deps
    "_output_shapes",  # shape annotations from export; Grappler infers shapes itself
    "_user_specified_name",  # the Python argument name typed by the user
    "_construction_context",  # "kEagerRuntime" vs graph: how the function was traced
    "_acd_function_control_output",  # automatic-control-deps bookkeeping on Identity nodes
})
LARGE_TENSOR = 1024  # tensor_content above this many bytes is hashed in place
PART_ORDER = ("graph", "feeds", "fetches", "targets", "options", "identity")
_LEN = struct.Struct("<Q")


@dataclass(frozen=True)
class Fingerprint:
    key: str
    parts: dict[str, str]  # part name -> that part's own xxh3-128 hex digest


class _Canonicalizer:
    """Hashes nodes and functions in canonical form; names functions by their content."""

    def __init__(self, functions: dict[str, function_pb2.FunctionDef], gradients: dict[str, str]) -> None:
        self.functions = functions
        self.gradients = gradients
        self._names: dict[str, str] = {}
        self._in_progress: set[str] = set()

    def function_name(self, name: str) -> str:
        """The canonical name of a library function (its own name when it is not in the library)."""
        if name not in self.functions:
            return name
        known = self._names.get(name)
        if known is not None:
            return known
        if name in self._in_progress:  # recursion: fall back to the name itself
            return name
        self._in_progress.add(name)
        try:
            fdef = self.functions[name]
            hasher = xxhash.xxh3_128()
            signature = type(fdef.signature)()
            signature.CopyFrom(fdef.signature)
            signature.name = ""
            # Argument names carry tracing counters too (``while_34_0``): hash them by position.
            arg_names = {arg.name: f"in{i}" for i, arg in enumerate(signature.input_arg)}
            out_names = {arg.name: f"out{i}" for i, arg in enumerate(signature.output_arg)}
            for arg in signature.input_arg:
                arg.name = arg_names[arg.name]
            for arg in signature.output_arg:
                arg.name = out_names[arg.name]
            _update(hasher, signature.SerializeToString(deterministic=True))
            body_ops = {node.name: node.op for node in fdef.node_def}
            rename_input = self._body_input_renamer(arg_names, body_ops)
            for key in sorted(fdef.attr):
                if key not in DROPPED_ATTRS:
                    _update(hasher, key.encode())
                    _update(hasher, self._attr_bytes(fdef.attr[key]))
            for index in sorted(fdef.arg_attr):
                arg = function_pb2.FunctionDef.ArgAttrs()
                for key in sorted(fdef.arg_attr[index].attr):
                    if key not in DROPPED_ATTRS:
                        arg.attr[key].CopyFrom(fdef.arg_attr[index].attr[key])
                _update(hasher, f"arg{index}".encode())
                _update(hasher, arg.SerializeToString(deterministic=True))
            for index in sorted(fdef.resource_arg_unique_id):
                _update(hasher, f"res{index}={fdef.resource_arg_unique_id[index]}".encode())
            ret = sorted((out_names.get(k, k), rename_input(v)) for k, v in fdef.ret.items())
            _update(hasher, json.dumps(ret).encode())
            _update(hasher, json.dumps(sorted(fdef.control_ret.items())).encode())
            for node in sorted(fdef.node_def, key=lambda n: n.name):
                self.hash_node(hasher, node, rename_input)
            gradient = self.gradients.get(name)
            if gradient:
                _update(hasher, b"gradient=" + self.function_name(gradient).encode())
            canonical = "gc_" + hasher.hexdigest()[:24]
        finally:
            self._in_progress.discard(name)
        self._names[name] = canonical
        return canonical

    def _rename_in_attr(self, attr: attr_value_pb2.AttrValue) -> None:
        kind = attr.WhichOneof("value")
        if kind == "func":
            attr.func.name = self.function_name(attr.func.name)
            for nested in attr.func.attr.values():
                self._rename_in_attr(nested)
        elif kind == "list":
            for fn in attr.list.func:
                fn.name = self.function_name(fn.name)
                for nested in fn.attr.values():
                    self._rename_in_attr(nested)

    def _attr_bytes(self, attr: attr_value_pb2.AttrValue) -> bytes:
        if any(True for _ in func_refs(attr)):
            attr = _copy(attr)
            self._rename_in_attr(attr)
        return attr.SerializeToString(deterministic=True)

    def _body_input_renamer(self, arg_names: dict[str, str], body_ops: dict[str, str]):
        """Rewrite a function-body input string with positional argument and callee-output names."""

        def rename(text: str) -> str:
            control = text.startswith("^")
            name = text[1:] if control else text
            if name in arg_names:
                name = arg_names[name]
            else:
                node, _, rest = name.partition(":")
                callee = self.functions.get(body_ops.get(node, ""))
                if callee is not None and rest:
                    out_arg, _, index = rest.partition(":")
                    outputs = [a.name for a in callee.signature.output_arg]
                    if out_arg in outputs:
                        name = f"{node}:out{outputs.index(out_arg)}" + (f":{index}" if index else "")
            return ("^" if control else "") + name

        return rename

    def hash_node(self, hasher: Any, node: node_def_pb2.NodeDef, rename_input: Any = None) -> None:
        canon = node_def_pb2.NodeDef(name=node.name, op=self.function_name(node.op), device=node.device)
        inputs = [rename_input(i) for i in node.input] if rename_input else list(node.input)
        data_inputs = [i for i in inputs if not i.startswith("^")]
        control_inputs = sorted({i for i in inputs if i.startswith("^")})
        canon.input.extend(data_inputs + control_inputs)
        large: list[bytes] = []
        for key in sorted(node.attr):
            if key in DROPPED_ATTRS:
                continue
            value = node.attr[key]
            if value.WhichOneof("value") == "tensor" and len(value.tensor.tensor_content) > LARGE_TENSOR:
                tensor = value.tensor
                stub = canon.attr[key].tensor
                stub.dtype = tensor.dtype
                stub.tensor_shape.CopyFrom(tensor.tensor_shape)
                stub.version_number = tensor.version_number
                large.append(tensor.tensor_content)
            elif any(True for _ in func_refs(value)):
                renamed = canon.attr[key]
                renamed.CopyFrom(value)
                self._rename_in_attr(renamed)
            else:
                canon.attr[key].CopyFrom(value)
        if node.HasField("experimental_type"):
            canon.experimental_type.CopyFrom(node.experimental_type)
        _update(hasher, canon.SerializeToString(deterministic=True))
        for content in large:  # hashed in place: never serialized with the node
            _update(hasher, content)


def _copy(message):
    clone = type(message)()
    clone.CopyFrom(message)
    return clone


def _update(hasher: Any, data: bytes) -> None:
    hasher.update(_LEN.pack(len(data)))
    hasher.update(data)


def graph_hash(view: GraphView) -> str:
    canon = _Canonicalizer(view.functions, view.gradients)
    hasher = xxhash.xxh3_128()
    versions = view.graph_def.versions
    _update(hasher, f"producer={versions.producer};min_consumer={versions.min_consumer}".encode())
    for name in view.reachable:  # already sorted
        canon.hash_node(hasher, view.nodes[name])
    return hasher.hexdigest()


def options_bytes(options: Any) -> bytes:
    """The compile-relevant part of a ConfigProto: its graph_options (rewriter and optimizer options)."""
    if options is None:
        return b""
    graph_options = getattr(options, "graph_options", None)
    if graph_options is None:
        raise TypeError(f"options must be a tf.compat.v1.ConfigProto, got {type(options).__name__}")
    return graph_options.SerializeToString(deterministic=True)


def compute(view: GraphView, options: Any, identity: dict[str, Any], *, name: str = "") -> Fingerprint:
    signature: Signature = view.signature
    parts = {
        "graph": graph_hash(view),
        "feeds": hash_text(json.dumps(signature.feeds)),
        "fetches": hash_text(json.dumps(signature.fetches)),
        "targets": hash_text(json.dumps(signature.targets)),
        "options": hash_text(options_bytes(options)),
        "identity": hash_json(identity),
    }
    key = combine(parts, PART_ORDER)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("key %s for %s: %s", key, name or "graph", " ".join(f"{p}={parts[p]}" for p in PART_ORDER))
    return Fingerprint(key, parts)


def canonical_function_names(graph_def: graph_pb2.GraphDef) -> None:
    """Rename every library function to its content hash, in place (used on compiled artifacts).

    Content-derived names let several compiled signatures live in one tf.Graph without clashing: equal
    names mean equal bodies. Functions with identical bodies collapse into one.
    """
    library = graph_def.library
    if not library.function:
        return
    functions = {f.signature.name: f for f in library.function}
    gradients = {g.function_name: g.gradient_func for g in library.gradient}
    canon = _Canonicalizer(functions, gradients)
    mapping = {name: canon.function_name(name) for name in functions}

    def rename_node(node: node_def_pb2.NodeDef) -> None:
        if node.op in mapping:
            node.op = mapping[node.op]
        for attr in node.attr.values():
            canon._rename_in_attr(attr)

    for node in graph_def.node:
        rename_node(node)
    kept: list[function_pb2.FunctionDef] = []
    seen: set[str] = set()
    for fdef in library.function:
        new_name = mapping[fdef.signature.name]
        if new_name in seen:
            continue
        seen.add(new_name)
        renamed = _copy(fdef)
        renamed.signature.name = new_name
        for node in renamed.node_def:
            rename_node(node)
        for attr in renamed.attr.values():
            canon._rename_in_attr(attr)
        kept.append(renamed)
    new_gradients = {(mapping.get(g.function_name, g.function_name), mapping.get(g.gradient_func, g.gradient_func))
                     for g in library.gradient}
    del library.function[:]
    library.function.extend(kept)
    del library.gradient[:]
    for function_name, gradient_func in sorted(new_gradients):
        library.gradient.add(function_name=function_name, gradient_func=gradient_func)


__all__ = ["DROPPED_ATTRS", "Fingerprint", "canonical_function_names", "compute", "graph_hash", "input_node"]
