"""The canonical form of a graph: what its key covers, and what it deliberately ignores.

Nodes are named by their structure, never by their names. Node names carry counters of the process
or graph that built them (Keras numbers auto-named layers and ops process-wide, ``rescaling_1_1/...``;
a TF1 graph counts scopes up, ``gradients_1/...``), so a key over names would miss for every model
built after another one. Each node gets a Merkle id

    id = H(op, device, attributes, (id, port) of each data input in order, sorted ids of control
           inputs, and the node's name where it is part of the contract)

and the ``graph`` part hashes the sorted multiset of the nodes' *elements*: the id plus what an
upward id cannot see (the node's consumers, so two identical copies wired differently differ, and
a shared node differs from two copies; loop back edges; loop frames; colocation). Names stay in
the key only where they are part of the contract:

- the signature's nodes (feeds, fetches, targets): the node's name is mixed into its id, so two nodes
  swapping roles changes the key (the ``feeds``/``fetches``/``targets`` parts only list the names);
- state resolved by name: a stateful op whose ``shared_name`` is empty (``VariableV2``,
  ``VarHandleOp`` stripped of defaults, ...) finds its state by node name, as checkpoints and other
  sessions do; a non-empty ``shared_name`` is an attribute and hashed as such.

What else varies with a process's history, and how it is normalized:

- TF1 while loops are cycles: a Merge's inputs from NextIteration (the back edges) are left out of its
  id and hashed in its element. TensorFlow rejects every other cycle, and so does the key;
- labels that only group nodes: ``Enter.frame_name`` (``while_3/while_context``) is hashed as the set of
  Enter ids that share it, ``_class`` colocation (``loc:@node``) as the ids of the nodes it names;
- node order and leftover nodes: only the fetches' and targets' fan-in is hashed, as a multiset;
  Grappler prunes everything else;
- function names (``__inference_call_1234``): each library function is named by the hash of its
  canonical body, callees first (``canonical_function_names``); bodies are hashed like the graph, with
  arguments and outputs by position;
- internal attributes: only those on ``DROPPED_ATTRS``, each known not to change the compiled result,
  are left out. Others (``_XlaMustCompile``, ``_noinline``, ``_lower_using_switch_merge``, ...) stay;
- debug data (``experimental_debug_info``, GraphDef ``debug_info``) is never hashed.

Per-node ids are a by-product: ``canonical_graph`` returns each fan-in node's id and, on demand,
what the id covers (``NodeSummary``: op, device, attribute digests, inputs), so an entry can keep what
a miss explanation needs and a hit on a differently named twin can be mapped back to the requester's
names. Large tensor contents are fed to the hasher in place, not serialized with their node, so
fingerprinting costs little more than one pass over the weights' bytes.

Any change to what is hashed, or how, changes every key: bump ``identity.KEY_SCHEME`` with it, so the
entries keyed the old way are purged as a stale version instead of lingering unreachable.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import xxhash
from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, tensor_pb2

from ..core.gcpause import collector_paused
from ..errors import InvalidGraphError
from .graphs import GraphView

# Internal attributes left out of the key, each with why it cannot change the compiled result.
DROPPED_ATTRS = frozenset({
    "_has_manual_control_dependencies",  # tracing bookkeeping for automatic control deps
    "_output_shapes",  # shape annotations from export; Grappler infers shapes itself
    "_user_specified_name",  # the Python argument name typed by the user
    "_construction_context",  # "kEagerRuntime" vs graph: how the function was traced
    "_acd_function_control_output",  # automatic-control-deps bookkeeping on Identity nodes
    # "CustomGradient-<process counter>" (tf.custom_gradient, e.g. Keras's swish/GELU): names a Python
    # gradient function that only tf.gradients looks up, in the building process, to differentiate;
    # Grappler and the runtime never read it, and a compiled graph's gradients are already nodes.
    "_gradient_op_type",
})
LARGE_TENSOR = 1024  # tensor_content above this many bytes is hashed in place
_LEN = struct.Struct("<Q")
_COLOCATION = "_class"  # [b"loc:@<node>"]: hashed as the ids of the nodes it names
_FRAME = "frame_name"  # on Enter: a loop frame's label, hashed as the group of Enters sharing it
_ENTER = frozenset({"Enter", "RefEnter"})
_MERGE = frozenset({"Merge", "RefMerge"})
_NEXT_ITERATION = frozenset({"NextIteration", "RefNextIteration"})
# Input tags: each data input is one tag byte, then a 16-byte id (node inputs), then its port.
_NODE, _BACK, _ARG, _CONTROLS = b"n", b"b", b"a", b"c"
_NO_CONSUMERS = xxhash.xxh3_128_digest(b"no consumers")
_SKIP = DROPPED_ATTRS | {_COLOCATION}  # attributes a node's id leaves out
_SKIP_ON_ENTER = _SKIP | {_FRAME}
_NO_BACK: frozenset[int] = frozenset()
_EMPTY = _LEN.pack(0)


class NodeSummary(NamedTuple):
    """What one fan-in node's id covers, for explaining a miss (all by-products of hashing it)."""

    id: str  # the node's canonical id (hex): its own content and everything upstream of it
    op: str  # the op type; a library function by its content name
    device: str
    attrs: dict[str, str]  # hashed attribute -> digest of its canonical value
    inputs: tuple[str, ...]  # data inputs as written (this graph's names), then sorted "^control" inputs


@functools.cache
def _state_attrs(op: str) -> tuple[str, ...]:
    """The attributes by which an ``op`` node may resolve its state through its own node name."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    if op_def is None:
        return ()
    return tuple(a.name for a in op_def.attr if a.name in ("shared_name", "use_node_name_sharing"))


def named_by_node(node: node_def_pb2.NodeDef) -> bool:
    """Whether TensorFlow finds this node's state by its node name: its name then carries state.

    True for ops with a ``shared_name`` attribute left empty (or stripped as a default), and for
    ``use_node_name_sharing=True``. Conservative: ops that make a private resource of an empty
    ``shared_name`` count too (a name in the key costs hits, never correctness).
    """
    for key in _state_attrs(node.op):
        value = node.attr.get(key)
        if key == "use_node_name_sharing":
            if value is not None and value.b:
                return True
        elif value is None or not value.s:
            return True
    return False


def _graph_ref(text: str) -> tuple[str, bytes]:
    """A graph input ``"a:1"`` / ``"a"`` as (node, port); ``a`` and ``a:0`` are the same tensor."""
    node, sep, index = text.rpartition(":")
    if sep and index.isdigit():
        return node, index.encode()
    return text, b"0"


class _Parsed(NamedTuple):  # one per node, alive until the key is done: a tuple, no per-instance dict
    data: list[tuple[str | None, bytes]]  # (source node or None for a function argument, port)
    controls: list[str]  # distinct control-input nodes
    arg_controls: list[bytes]  # distinct control inputs on function arguments, by position
    back: frozenset[int]  # positions of data inputs that are loop back edges (NextIteration -> Merge)
    deps: list[str]  # the nodes this one's id depends on: data sources but back edges, then controls


class Canonicalizer:
    """Hashes nodes and functions in canonical form; names functions by their content."""

    def __init__(self, functions: dict[str, function_pb2.FunctionDef], gradients: dict[str, str]) -> None:
        self.functions = functions
        self.gradients = gradients
        self._names: dict[str, str] = {}
        self._in_progress: set[str] = set()
        self._texts: dict[str | bytes, bytes] = {}

    # -- functions -----------------------------------------------------------------------------------------
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
            canonical = "gc_" + self._function_digest(self.functions[name]).hex()[:24]
        finally:
            self._in_progress.discard(name)
        self._names[name] = canonical
        return canonical

    def _function_digest(self, fdef: function_pb2.FunctionDef) -> bytes:
        hasher = xxhash.xxh3_128()
        signature = _copy(fdef.signature)
        signature.name = ""
        # Argument names carry tracing counters too (``while_34_0``): hashed by position. Control
        # outputs are named after body nodes: hashed as those nodes' ids (below).
        arg_index = {arg.name: i for i, arg in enumerate(signature.input_arg)}
        for i, arg in enumerate(signature.input_arg):
            arg.name = f"in{i}"
        for i, arg in enumerate(signature.output_arg):
            arg.name = f"out{i}"
        del signature.control_output[:]
        _update(hasher, signature.SerializeToString(deterministic=True))
        for key in sorted(fdef.attr):
            if key not in DROPPED_ATTRS:
                _update(hasher, key.encode())
                hasher.update(self._attr_digest(fdef.attr[key]))
        for index in sorted(fdef.arg_attr):
            arg = function_pb2.FunctionDef.ArgAttrs()
            for key in sorted(fdef.arg_attr[index].attr):
                if key not in DROPPED_ATTRS:
                    arg.attr[key].CopyFrom(fdef.arg_attr[index].attr[key])
            _update(hasher, f"arg{index}".encode())
            _update(hasher, arg.SerializeToString(deterministic=True))
        for index in sorted(fdef.resource_arg_unique_id):
            _update(hasher, f"res{index}={fdef.resource_arg_unique_id[index]}".encode())
        body = {node.name: node for node in fdef.node_def}
        ref = self._body_ref(fdef.signature.name, arg_index, body)
        contract = {name for name, node in body.items() if named_by_node(node)}
        scope = self.hash_scope(body, body, contract, ref)
        ids, elements = scope.ids, scope.elements
        for arg in fdef.signature.output_arg:  # outputs in order: what each returns
            text = fdef.ret.get(arg.name)
            if text is None:
                _update(hasher, b"ret?")
                continue
            source, port = ref(text)
            hasher.update((_NODE + ids[source]) if source is not None else _ARG)
            _update(hasher, port)
        hasher.update(_CONTROLS)
        for digest in sorted(ids[name] for name in set(fdef.control_ret.values()) if name in ids):
            hasher.update(digest)
        _update(hasher, b"body")
        for element in sorted(elements):
            hasher.update(element)
        gradient = self.gradients.get(fdef.signature.name)
        if gradient:
            _update(hasher, b"gradient=" + self.function_name(gradient).encode())
        return hasher.digest()

    def _body_ref(self, fname: str, arg_index: dict[str, int], body: dict[str, node_def_pb2.NodeDef]
                  ) -> Callable[[str], tuple[str | None, bytes]]:
        """Resolve a function-body input: an argument by position, ``node:out_arg:i`` to (node, port),
        a callee function's output argument by its position (its name is the callee's)."""

        def ref(text: str) -> tuple[str | None, bytes]:
            index = arg_index.get(text)
            if index is not None:
                return None, b"%d" % index
            node, _, rest = text.partition(":")
            source = body.get(node)
            if source is None:
                raise InvalidGraphError(f"function {fname!r}: input {text!r} names no argument or node "
                                        f"of its body")
            callee = self.functions.get(source.op)
            if callee is not None and rest:
                out_arg, _, index_text = rest.partition(":")
                outputs = [a.name for a in callee.signature.output_arg]
                if out_arg in outputs:
                    rest = f"out{outputs.index(out_arg)}" + (f":{index_text}" if index_text else "")
            return node, rest.encode()

        return ref

    # -- attributes ----------------------------------------------------------------------------------------
    def rename_in_attr(self, attr: attr_value_pb2.AttrValue) -> None:
        kind = attr.WhichOneof("value")
        if kind == "func":
            attr.func.name = self.function_name(attr.func.name)
            for nested in attr.func.attr.values():
                self.rename_in_attr(nested)
        elif kind == "list":
            for fn in attr.list.func:
                fn.name = self.function_name(fn.name)
                for nested in fn.attr.values():
                    self.rename_in_attr(nested)

    def _attr_digest(self, attr: attr_value_pb2.AttrValue) -> bytes:
        kind = attr.WhichOneof("value")
        if kind == "tensor":
            tensor = attr.tensor
            content = tensor.tensor_content  # read once: the upb binding copies bytes on every read
            if len(content) > LARGE_TENSOR:  # hashed in place, never serialized with the attribute
                stub = tensor_pb2.TensorProto(dtype=tensor.dtype, version_number=tensor.version_number)
                stub.tensor_shape.CopyFrom(tensor.tensor_shape)
                hasher = xxhash.xxh3_128()
                _update(hasher, stub.SerializeToString(deterministic=True))
                _update(hasher, content)
                return hasher.digest()
        elif self.functions and (kind == "func" or (kind == "list" and attr.list.func)):
            attr = _copy(attr)  # names library functions: hashed under their content names
            self.rename_in_attr(attr)
        return xxhash.xxh3_128_digest(attr.SerializeToString(deterministic=True))

    # -- one scope: the graph's fan-in, or a function body -------------------------------------------------
    def hash_scope(self, nodes: dict[str, node_def_pb2.NodeDef], members: Iterable[str], contract: set[str],
                   ref: Callable[[str], tuple[str | None, bytes]]) -> _Scope:
        """Canonical ids and elements for ``members`` and everything upstream of them.

        ``contract``: the nodes whose names are part of the key.
        """
        scope = _Scope(nodes)
        ids, parsed, attrs, order = scope.ids, scope.parsed, scope.attrs, scope.order
        for start in members:
            if start in ids:
                continue
            stack, active = [(start, False)], set()
            while stack:  # iterative: deep models exceed Python's recursion limit
                name, ready = stack.pop()
                if ready:
                    active.discard(name)
                    ids[name] = self._node_id(nodes[name], parsed[name], ids, name in contract, attrs)
                    order.append(name)
                    continue
                if name in ids:
                    continue
                if name in active:
                    raise InvalidGraphError(f"the graph has a cycle through {name!r} that is not a while "
                                            f"loop's NextIteration -> Merge back edge (TensorFlow rejects "
                                            f"it too)")
                inputs = parsed[name] = self._parse(nodes[name], nodes, ref)
                active.add(name)
                stack.append((name, True))
                for dep in inputs.deps:
                    if dep not in ids:
                        stack.append((dep, False))
        cores = self._cores(nodes, order, parsed, ids, attrs)
        scope.elements = self._elements(order, parsed, cores)
        return scope

    @staticmethod
    def _parse(node: node_def_pb2.NodeDef, nodes: dict[str, node_def_pb2.NodeDef],
               ref: Callable[[str], tuple[str | None, bytes]]) -> _Parsed:
        data: list[tuple[str | None, bytes]] = []
        controls: set[str] = set()
        arg_controls: set[bytes] = set()
        for text in node.input:
            if text[:1] != "^":
                data.append(ref(text))
            elif text[1:] in nodes:
                controls.add(text[1:])
            else:  # a function body may wait on an argument
                src, index = ref(text[1:])
                if src is not None:
                    raise InvalidGraphError(f"node {node.name!r}: control input {text!r} is not in the graph")
                arg_controls.add(index)
        ordered = sorted(controls)
        if node.op in _MERGE:  # only a Merge has loop back edges
            back = frozenset(i for i, (src, _) in enumerate(data)
                             if src is not None and nodes[src].op in _NEXT_ITERATION)
            deps = [src for i, (src, _) in enumerate(data) if src is not None and i not in back]
        else:
            back, deps = _NO_BACK, [src for src, _ in data if src is not None]
        return _Parsed(data, ordered, sorted(arg_controls), back, deps + ordered)

    def _node_id(self, node: node_def_pb2.NodeDef, inputs: _Parsed, ids: dict[str, bytes], named: bool,
                 attrs: dict[str, dict[str, bytes]]) -> bytes:
        """H(op, device, name if in the contract, attributes, (id, port) per data input, control ids).

        One digest over one joined buffer, every variable-length piece prefixed by its length or count
        (ids and digests are 16 bytes): the encoding is unambiguous, and cheap in Python.
        """
        op = node.op
        enc = self._encoded
        pieces = [enc(self.function_name(op)), enc(node.device), _text(node.name) if named else _EMPTY]
        digests: dict[str, bytes] = {}
        skip = _SKIP_ON_ENTER if op in _ENTER else _SKIP  # colocation, frame: in the node's element (_cores)
        attr_digest = self._attr_digest
        for key, value in sorted(node.attr.items()):
            if key not in skip:
                digests[key] = attr_digest(value)
        attrs[node.name] = digests
        pieces.append(_LEN.pack(len(digests)))
        for key, digest in digests.items():
            pieces.append(enc(key))
            pieces.append(digest)
        if node.HasField("experimental_type"):
            pieces.append(b"t" + xxhash.xxh3_128_digest(node.experimental_type.SerializeToString(deterministic=True)))
        else:
            pieces.append(b"-")
        data = inputs.data
        pieces.append(_LEN.pack(len(data)))
        back = inputs.back
        for i, (src, port) in enumerate(data):
            if src is None:
                pieces.append(_ARG)
            elif back and i in back:
                pieces.append(_BACK)
            else:
                pieces.append(_NODE)
                pieces.append(ids[src])
            pieces.append(enc(port))
        controls = inputs.controls
        pieces.append(_LEN.pack(len(controls)))
        if controls:
            pieces.extend(sorted([ids[c] for c in controls]))
        arg_controls = inputs.arg_controls
        pieces.append(_LEN.pack(len(arg_controls)))
        if arg_controls:
            pieces.extend([enc(index) for index in arg_controls])
        return xxhash.xxh3_128_digest(b"".join(pieces))

    def _encoded(self, text: str | bytes) -> bytes:
        """``text`` length-prefixed, memoized: op names, devices, attribute keys and ports repeat."""
        known = self._texts.get(text)
        if known is None:
            known = self._texts[text] = _text(text)
        return known

    @staticmethod
    def _cores(nodes: dict[str, node_def_pb2.NodeDef], order: list[str], parsed: dict[str, _Parsed],
               ids: dict[str, bytes], attrs: dict[str, dict[str, bytes]]) -> dict[str, bytes]:
        """Each node's id plus what an upward id cannot hold: loop back edges, frame, colocation."""
        frames: dict[bytes, list[bytes]] = {}
        for name in order:
            if nodes[name].op in _ENTER:
                frames.setdefault(_frame(nodes[name]), []).append(ids[name])
        frame_keys = {label: xxhash.xxh3_128_digest(b"".join(sorted(group)))
                      for label, group in frames.items()}
        cores: dict[str, bytes] = {}
        for name in order:
            node, inputs = nodes[name], parsed[name]
            colocation = node.attr.get(_COLOCATION)
            if not inputs.back and colocation is None and node.op not in _ENTER:
                cores[name] = ids[name]
                continue
            extra: list[bytes] = []
            for i in sorted(inputs.back):
                src, port = inputs.data[i]
                extra.append(_BACK + ids[src] + _text(port))
            if node.op in _ENTER:
                digest = attrs[name][_FRAME] = frame_keys[_frame(node)]
                extra.append(b"f" + digest)
            if colocation is not None:
                targets = []
                for raw in colocation.list.s:
                    target = raw[5:].decode(errors="replace") if raw.startswith(b"loc:@") else None
                    targets.append(ids[target] if target in ids else b"?" + raw)  # outside: by its text
                digest = attrs[name][_COLOCATION] = xxhash.xxh3_128_digest(b"".join(sorted(targets)))
                extra.append(b"l" + digest)
            cores[name] = xxhash.xxh3_128_digest(ids[name] + b"".join(extra))
        return cores

    @staticmethod
    def _elements(order: list[str], parsed: dict[str, _Parsed], cores: dict[str, bytes]) -> list[bytes]:
        """Per node: H(core, each consumer's core and downstream hash with the slot it reads).

        The downward part tells apart identical copies wired to different consumers (a stateful op
        duplicated, say), which the multiset of upward ids alone cannot.
        """
        consumers: dict[str, list[bytes]] = {}
        down: dict[str, bytes] = {}
        elements: list[bytes] = []
        for name in reversed(order):  # consumers before their inputs
            edges = consumers.get(name)
            if edges is None:
                mine = _NO_CONSUMERS
            else:
                edges.sort()
                mine = xxhash.xxh3_128_digest(b"".join(edges))
            down[name] = mine
            elements.append(xxhash.xxh3_128_digest(cores[name] + mine))
            inputs = parsed[name]
            edge = cores[name] + mine
            for i, (src, port) in enumerate(inputs.data):
                if src is not None and i not in inputs.back:  # (producer port, consumer slot) + consumer
                    consumers.setdefault(src, []).append(edge + _text(b"%s>%d" % (port, i)))
            for src in inputs.controls:
                consumers.setdefault(src, []).append(edge + _text(b"^"))
        return elements


class _Scope:
    """What hashing one scope produced; ``summaries`` turns it into NodeSummaries when asked."""

    def __init__(self, nodes: dict[str, node_def_pb2.NodeDef]) -> None:
        self.nodes = nodes
        self.ids: dict[str, bytes] = {}  # node -> canonical id
        self.parsed: dict[str, _Parsed] = {}
        self.attrs: dict[str, dict[str, bytes]] = {}  # node -> hashed attribute -> digest
        self.order: list[str] = []  # inputs before consumers (back edges aside)
        self.elements: list[bytes] = []

    def summaries(self, canon: Canonicalizer) -> dict[str, NodeSummary]:
        result = {}
        for name in self.order:
            node = self.nodes[name]
            result[name] = NodeSummary(
                self.ids[name].hex(), canon.function_name(node.op), node.device,
                {key: digest.hex() for key, digest in sorted(self.attrs[name].items())},
                tuple(text for text in node.input if text[:1] != "^")
                + tuple("^" + c for c in self.parsed[name].controls))
        return result


def _frame(node: node_def_pb2.NodeDef) -> bytes:
    value = node.attr.get(_FRAME)
    return value.s if value is not None else b""


def _copy(message):
    clone = type(message)()
    clone.CopyFrom(message)
    return clone


def _update(hasher: Any, data: bytes) -> None:
    hasher.update(_LEN.pack(len(data)))
    hasher.update(data)


def _text(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return _LEN.pack(len(data)) + data


def canonical_graph(view: GraphView) -> tuple[str, dict[str, str], Callable[[], dict[str, NodeSummary]]]:
    """The ``graph`` part's digest, each fan-in node's canonical id, and a callable that returns each
    node's NodeSummary (built only when asked: a hit never needs them). Python's garbage collector is
    paused meanwhile (gcpause.py: about half the time of a large function's key went to its collections)."""
    with collector_paused():
        return _canonical_graph(view)


def _canonical_graph(view: GraphView) -> tuple[str, dict[str, str], Callable[[], dict[str, NodeSummary]]]:
    canon = Canonicalizer(view.functions, view.gradients)
    signature = view.signature
    contract = {name.rpartition(":")[0] for name in (*signature.feeds, *signature.fetches)}
    contract.update(signature.targets)
    contract.update(name for name in view.reachable if named_by_node(view.nodes[name]))
    scope = canon.hash_scope(view.nodes, view.reachable, contract, _graph_ref)
    hasher = xxhash.xxh3_128()
    versions = view.graph_def.versions
    _update(hasher, f"producer={versions.producer};min_consumer={versions.min_consumer}".encode())
    for element in sorted(scope.elements):
        hasher.update(element)
    nodes = {name: scope.ids[name].hex() for name in scope.order}
    return hasher.hexdigest(), nodes, functools.partial(scope.summaries, canon)


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
    canon = Canonicalizer(functions, gradients)
    mapping = {name: canon.function_name(name) for name in functions}

    def rename_node(node: node_def_pb2.NodeDef) -> None:
        if node.op in mapping:
            node.op = mapping[node.op]
        for attr in node.attr.values():
            canon.rename_in_attr(attr)

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
            canon.rename_in_attr(attr)
        kept.append(renamed)
    new_gradients = {(mapping.get(g.function_name, g.function_name), mapping.get(g.gradient_func, g.gradient_func))
                     for g in library.gradient}
    del library.function[:]
    library.function.extend(kept)
    del library.gradient[:]
    for function_name, gradient_func in sorted(new_gradients):
        library.gradient.add(function_name=function_name, gradient_func=gradient_func)


__all__ = ["DROPPED_ATTRS", "LARGE_TENSOR", "Canonicalizer", "NodeSummary", "canonical_function_names",
           "canonical_graph", "named_by_node"]
