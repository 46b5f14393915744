"""The cache key: xxh3-128 over named parts, each hashed on its own so a miss can be explained.

Parts, in this order: ``graph`` (the canonical form of the fetches' and targets' fan-in, functions
included), ``feeds``, ``fetches``, ``targets``, ``options`` (the ConfigProto's graph_options) and
``identity`` (the compiler identity, see identity.py). ``key = xxh3_128("name=parthash\\n" ...)``.

The ``graph`` part is canonical.py's canonical form: nodes named by their structure, never by their
names, so a model built after other models, or into a graph that already holds another, gets the
key of its fresh twin. ``Fingerprint.nodes`` maps each fan-in node to its canonical id and
``Fingerprint.details`` says what each id covers, for explaining misses.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from ..entry.keyparts import combine, hash_json, hash_text
from .canonical import (
    DROPPED_ATTRS,
    LARGE_TENSOR,
    NodeSummary,
    canonical_function_names,
    canonical_graph,
    named_by_node,
)
from .graphs import GraphView, Signature, exact_hash, input_node

log = logging.getLogger("graphcache")

PART_ORDER = ("graph", "feeds", "fetches", "targets", "options", "identity")


# The fast key (exact_key) is tried on graphs of at least this many nodes: smaller ones canonicalize in a few
# milliseconds, less than an alias entry's read costs.
FAST_MIN_NODES = 500
# The fast key's budget, in serialized bytes per node. Canonical ids cost Python work per node and both keys
# pay per byte of weights. Exact bytes are cheaper on real models' weights and dearer on a few huge tensors,
# whose serialization faults fresh pages every time; the budget lies between the densest keras.applications
# model (Xception), where exact bytes still win, and the lightest such graph tried where they lost (the
# fingerprint table of benchmarks/results/RESULTS.md times both keys on every benchmark model). Bytes, not
# time, so the choice is the graph's own and every miss of a graph locks the same key (a CPU-time budget once
# flipped a model's choice under load, and it was compiled twice).
FAST_BYTES_PER_NODE = 112 * 1024


class Fingerprint:
    """A key and its named parts (part name -> that part's own xxh3-128 hex digest); for graphs also each
    fan-in node's canonical id (hex) and, built on first use from what hashing kept, ``details``."""

    __slots__ = ("key", "parts", "nodes", "fast", "_summarize", "_details")

    def __init__(self, key: str, parts: dict[str, str], nodes: dict[str, str] | None = None,
                 summarize: Callable[[], dict[str, NodeSummary]] | None = None) -> None:
        self.key = key
        self.parts = parts
        self.nodes = nodes if nodes is not None else {}
        self.fast: str | None = None  # the graph's exact_key, where compute(with_fast=True) was asked for it
        self._summarize = summarize  # no second pass over the graph: what hashing kept
        self._details: dict[str, NodeSummary] | None = None

    def __repr__(self) -> str:
        return f"Fingerprint({self.key!r}, {self.parts!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fingerprint) and (self.key, self.parts, self.nodes) == (
            other.key, other.parts, other.nodes)

    __hash__ = None  # type: ignore[assignment]  # mutable parts, as the frozen dataclass with dicts had

    @property
    def details(self) -> dict[str, NodeSummary]:
        """Fan-in node name -> what its canonical id covers (op, device, attribute digests, inputs)."""
        if self._details is None:
            self._details = self._summarize() if self._summarize is not None else {}
            self._summarize = None  # it holds the graph's nodes, and so the whole GraphDef
        return self._details


def graph_hash(view: GraphView) -> str:
    return canonical_graph(view)[0]


def options_bytes(options: Any) -> bytes:
    """The compile-relevant part of a ConfigProto: its graph_options (rewriter and optimizer options)."""
    if options is None:
        return b""
    graph_options = getattr(options, "graph_options", None)
    if graph_options is None:
        raise TypeError(f"options must be a tf.compat.v1.ConfigProto, got {type(options).__name__}")
    return graph_options.SerializeToString(deterministic=True)


def _parts(graph: str, signature: Signature, options: Any, identity: dict[str, Any]) -> dict[str, str]:
    return {
        "graph": graph,
        "feeds": hash_text(json.dumps(signature.feeds)),
        "fetches": hash_text(json.dumps(signature.fetches)),
        "targets": hash_text(json.dumps(signature.targets)),
        "options": hash_text(options_bytes(options)),
        "identity": hash_json(identity),
    }


def compute(view: GraphView, options: Any, identity: dict[str, Any], *, name: str = "",
            with_fast: bool = False) -> Fingerprint:
    """The canonical key and its parts; ``with_fast``: the fast key too (``Fingerprint.fast``, for its alias)."""
    graph, nodes, summaries = canonical_graph(view)
    parts = _parts(graph, view.signature, options, identity)
    key = combine(parts, PART_ORDER)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("key %s for %s: %s", key, name or "graph", " ".join(f"{p}={parts[p]}" for p in PART_ORDER))
    fingerprint = Fingerprint(key, parts, nodes, summaries)
    if with_fast:
        fingerprint.fast = exact_key(view, options, identity)
    return fingerprint


def flight_key(view: GraphView, options: Any, identity: dict[str, Any]) -> str:
    """The lock a first-ever miss compiles under (cache.py), never an entry's key: ``compute``'s parts with the
    graph part a hash of the fan-in's node names (``view.reachable``, which GraphView has already sorted). No
    node is read again: the canonical key hashes every weight and exact_key serializes them, and even a pass
    over each node's op, device and inputs shows in a first-ever miss's time. The same graph
    gives the same lock in every process; graphs whose fan-ins have the same names share it, which only makes
    their first compiles wait for each other (the lock is one of 256 stripes anyway)."""
    names = "\n".join(view.reachable)
    return combine(_parts("flight:" + hash_text(names), view.signature, options, identity), PART_ORDER)


def exact_key(view: GraphView, options: Any, identity: dict[str, Any]) -> str | None:
    """The fast key of a node-heavy graph: ``compute``'s named parts with the graph part the hash of its
    exact serialization (graphs.exact_hash: names included, so sound, just stricter), mapped to the
    canonical key by an alias entry (cache.py). Canonical ids cost Python work per node, exact bytes
    mostly a copy per byte, so the fast key pays on graphs of many small nodes and not on a few huge
    weights: None for graphs under FAST_MIN_NODES nodes, and for graphs over FAST_BYTES_PER_NODE serialized
    bytes a node (weight-heavy graphs, whose bytes cost more to hash than their canonical form)."""
    graph_def = view.graph_def
    if len(graph_def.node) < FAST_MIN_NODES:
        return None
    exact = exact_hash(graph_def, byte_budget=FAST_BYTES_PER_NODE * len(graph_def.node))
    if exact is None:
        return None
    return combine(_parts("exact:" + exact, view.signature, options, identity), PART_ORDER)


__all__ = ["DROPPED_ATTRS", "LARGE_TENSOR", "PART_ORDER", "Fingerprint", "NodeSummary", "canonical_function_names",
           "canonical_graph", "compute", "exact_key", "flight_key", "graph_hash", "input_node", "named_by_node",
           "options_bytes"]
