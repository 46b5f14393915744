"""The per-node table an entry keeps of its source graph, and the node diff of two such tables.

A graph part that differs says only *that* the graph changed; naming the nodes needs the cached entry's
own graph, which the entry does not keep (its payload is Grappler's output). So every graph entry's
header carries a compact table of its source fan-in, a by-product of fingerprinting (canonical.py's
``NodeSummary``): per node its name, canonical id, op, device, one digest per attribute and its inputs.
Ids and digests are truncated (``ID_HEX``, ``DIGEST_HEX``: a false "unchanged" needs a 2^-32 collision
on the one attribute that changed, fine for an explanation, never used for a key). Inputs are indices
into the table, names repeat once; the JSON is zstd-compressed and base64'd, so reading a header without
explaining costs one JSON string.

The diff matches the requester's nodes to the cached ones, then says per matched node what changed in the
node itself. Ids carry everything upstream, so a change changes the id of every node below it: a node whose
id matches is unchanged with its whole fan-in; the others are matched by name, else by content (op,
device, attributes) with the inputs already matched agreeing, else through a matched consumer's input
slot (a renamed constant whose value changed), and only then compared: ``op``, ``device``, ``inputs``
(mapped through the matching) and ``attr:NAME``. A node that differs only upstream is not listed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import zstandard

TABLE_FORMAT = 1
EXTRA_KEY = "node_table"  # the entry header's extra field that holds the table
ID_HEX = 12
DIGEST_HEX = 8
# Attributes whose digests hash other nodes' ids (colocation targets, a loop frame's Enters): a change
# upstream of those nodes changes them, so comparing them would blame nodes that did not change.
GROUP_ATTRS = frozenset({"_class", "frame_name"})
_ZSTD_LEVEL = 3
_MATCH_ROUNDS = 4


class Summary(Protocol):
    """What canonical.NodeSummary provides (the table is built from it, without importing TensorFlow)."""

    id: str
    op: str
    device: str
    attrs: dict[str, str]
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class Node:
    """One fan-in node as an explanation needs it."""

    name: str
    id: str  # canonical id, truncated to ID_HEX
    op: str
    device: str
    attrs: dict[str, str]  # attribute -> digest, truncated to DIGEST_HEX
    inputs: tuple[tuple[str, int], ...]  # data inputs: (producer node, port)
    controls: frozenset[str] = frozenset()


@dataclass
class NodeDiff:
    """How one graph's fan-in differs from another's, in the requester's names (removed: the entry's)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # node -> what: op, device, inputs, attr:NAME

    def capped(self, limit: int) -> dict[str, Any]:
        """The JSON form, each list cut to ``limit`` with the count of the rest in ``more``."""
        changed = dict(list(self.changed.items())[:limit])
        return {"added": self.added[:limit], "removed": self.removed[:limit], "changed": changed,
                "more": {"added": max(0, len(self.added) - limit), "removed": max(0, len(self.removed) - limit),
                         "changed": max(0, len(self.changed) - limit)}}

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def _ref(text: str) -> tuple[str, int]:
    node, sep, port = text.rpartition(":")
    if sep and port.isdigit():
        return node, int(port)
    return text, 0


def from_summaries(details: Mapping[str, Summary]) -> list[Node]:
    """Nodes from a Fingerprint's ``details`` (inputs before consumers, as hashed)."""
    nodes = []
    for name, summary in details.items():
        data, controls = [], []
        for text in summary.inputs:
            if text[:1] == "^":
                controls.append(text[1:])
            else:
                data.append(_ref(text))
        nodes.append(Node(name, summary.id[:ID_HEX], summary.op, summary.device,
                          {key: digest[:DIGEST_HEX] for key, digest in summary.attrs.items()}, tuple(data),
                          frozenset(controls)))
    return nodes


# -- the stored form ---------------------------------------------------------------------------------------------
def encode(nodes: list[Node]) -> dict[str, Any]:
    """The header extra value: ``{"format", "nodes" (count), "data" (base64 of zstd of the JSON table)}``."""
    ops: dict[str, int] = {}
    devices: dict[str, int] = {}
    attrs: dict[str, int] = {}
    index = {node.name: i for i, node in enumerate(nodes)}
    rows = []
    for node in nodes:
        pairs: list[Any] = []
        for key, digest in node.attrs.items():
            pairs.append(attrs.setdefault(key, len(attrs)))
            pairs.append(digest)
        inputs: list[Any] = []
        for source, port in node.inputs:
            at = index.get(source)
            if at is None:  # outside the table (a loop body reached only through a back edge)
                inputs.append(f"@{source}:{port}")
            else:
                inputs.append(at if port == 0 else f"{at}:{port}")
        for source in sorted(node.controls):
            at = index.get(source)
            inputs.append(f"^{at}" if at is not None else f"^@{source}")
        rows.append([node.name, node.id, ops.setdefault(node.op, len(ops)),
                     devices.setdefault(node.device, len(devices)), pairs, inputs])
    table = {"ops": list(ops), "devices": list(devices), "attrs": list(attrs), "rows": rows}
    raw = json.dumps(table, separators=(",", ":")).encode()
    data = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(raw)
    return {"format": TABLE_FORMAT, "nodes": len(nodes), "data": base64.b64encode(data).decode("ascii")}


def decode(value: Any) -> list[Node]:
    """The nodes of a stored table; ValueError when it is not a table this version reads."""
    try:
        if not isinstance(value, dict) or value.get("format") != TABLE_FORMAT:
            raise ValueError(f"not a format-{TABLE_FORMAT} node table")
        raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(value["data"], validate=True))
        table = json.loads(raw)
        ops, devices, attrs, rows = table["ops"], table["devices"], table["attrs"], table["rows"]
        names = [row[0] for row in rows]
        nodes = []
        for name, node_id, op, device, pairs, inputs in rows:
            data: list[tuple[str, int]] = []
            controls: set[str] = set()
            for item in inputs:
                if isinstance(item, int):
                    data.append((names[item], 0))
                    continue
                control = item.startswith("^")
                text = item[1:] if control else item
                if text.startswith("@"):
                    source, port = _ref(text[1:]) if not control else (text[1:], 0)
                else:
                    at, _, port_text = text.partition(":")
                    source, port = names[int(at)], int(port_text or 0)
                if control:
                    controls.add(source)
                else:
                    data.append((source, port))
            nodes.append(Node(str(name), str(node_id), str(ops[op]), str(devices[device]),
                              {str(attrs[pairs[i]]): str(pairs[i + 1]) for i in range(0, len(pairs), 2)},
                              tuple(data), frozenset(controls)))
        return nodes
    except (KeyError, IndexError, TypeError, AttributeError, binascii.Error, zstandard.ZstdError,
            json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"damaged node table: {type(exc).__name__}: {exc}") from None


# -- the diff ----------------------------------------------------------------------------------------------------
def _content(node: Node) -> tuple:
    return (node.op, node.device, tuple(sorted(node.attrs.items())))


class _Matcher:
    """Pairs the requester's nodes (``new``) with the entry's (``old``); see the module docstring."""

    def __init__(self, new: list[Node], old: list[Node]) -> None:
        self.new, self.old = new, old
        self.old_by_name = {node.name: node for node in old}
        self.new_by_name = {node.name: node for node in new}
        self.match: dict[str, str] = {}  # new name -> old name
        self.used: set[str] = set()
        self.exact: set[str] = set()  # new names matched by id: unchanged with their whole fan-in

    def pair(self, new: str, old: str) -> None:
        self.match[new] = old
        self.used.add(old)

    def run(self) -> None:
        by_id: dict[str, list[str]] = {}
        for node in self.old:
            by_id.setdefault(node.id, []).append(node.name)
        for node in self.new:
            found = [name for name in by_id.get(node.id, ()) if name not in self.used]
            if found:
                self.pair(node.name, node.name if node.name in found else found[0])
                self.exact.add(node.name)
        for _ in range(_MATCH_ROUNDS):
            before = len(self.match)
            self._forward()
            self._through_consumers()
            if len(self.match) == before:
                break

    def _forward(self) -> None:
        by_content: dict[tuple, list[Node]] = {}
        for node in self.old:
            if node.name not in self.used:
                by_content.setdefault(_content(node), []).append(node)
        for node in self.new:
            if node.name in self.match:
                continue
            same = self.old_by_name.get(node.name)
            if same is not None and same.name not in self.used:
                self.pair(node.name, same.name)
                continue
            for candidate in by_content.get(_content(node), ()):
                if candidate.name not in self.used and self._inputs_agree(node, candidate):
                    self.pair(node.name, candidate.name)
                    break

    def _inputs_agree(self, new: Node, old: Node) -> bool:
        """Same arity, and every input already matched is matched to the old node's input; at least one."""
        if len(new.inputs) != len(old.inputs) or not new.inputs:
            return False
        anchored = False
        for (source, port), (old_source, old_port) in zip(new.inputs, old.inputs, strict=True):
            mapped = self.match.get(source)
            if mapped is None:
                continue
            if mapped != old_source or port != old_port:
                return False
            anchored = True
        return anchored

    def _through_consumers(self) -> None:
        for node in reversed(self.new):  # consumers first
            old_name = self.match.get(node.name)
            if old_name is None:
                continue
            old = self.old_by_name[old_name]
            if len(old.inputs) != len(node.inputs):
                continue
            for (source, _), (old_source, _) in zip(node.inputs, old.inputs, strict=True):
                if source in self.match or old_source in self.used:
                    continue
                producer, requester = self.old_by_name.get(old_source), self.new_by_name.get(source)
                if producer is not None and requester is not None and requester.op == producer.op:
                    self.pair(source, old_source)


def _changes(new: Node, old: Node, match: Mapping[str, str]) -> list[str]:
    what = []
    if new.op != old.op:
        what.append("op")
    if new.device != old.device:
        what.append("device")
    mapped = [(match.get(source, "?" + source), port) for source, port in new.inputs]
    controls = {match.get(source, "?" + source) for source in new.controls}
    if mapped != list(old.inputs) or controls != set(old.controls):
        what.append("inputs")
    for key in sorted(set(new.attrs) | set(old.attrs)):
        if key not in GROUP_ATTRS and new.attrs.get(key) != old.attrs.get(key):
            what.append(f"attr:{key}")
    return what


def diff(new: Iterable[Node], old: Iterable[Node]) -> NodeDiff:
    """What differs between the requester's fan-in (``new``) and a cached entry's (``old``)."""
    matcher = _Matcher(list(new), list(old))
    matcher.run()
    result = NodeDiff()
    for node in matcher.new:
        old_name = matcher.match.get(node.name)
        if old_name is None:
            result.added.append(node.name)
        elif node.name not in matcher.exact:
            what = _changes(node, matcher.old_by_name[old_name], matcher.match)
            if what:
                result.changed[node.name] = what
    result.removed = [node.name for node in matcher.old if node.name not in matcher.used]
    return result


__all__ = ["EXTRA_KEY", "TABLE_FORMAT", "Node", "NodeDiff", "decode", "diff", "encode", "from_summaries"]
