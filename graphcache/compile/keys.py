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

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
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
from .graphs import GraphView, Signature, input_node

log = logging.getLogger("graphcache")

PART_ORDER = ("graph", "feeds", "fetches", "targets", "options", "identity")


@dataclass(frozen=True)
class Fingerprint:
    key: str
    parts: dict[str, str]  # part name -> that part's own xxh3-128 hex digest
    nodes: dict[str, str] = field(default_factory=dict)  # fan-in node name -> canonical id (hex)
    # builds ``details`` on first use, from what hashing kept (no second pass over the graph)
    summarize: Callable[[], dict[str, NodeSummary]] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def details(self) -> dict[str, NodeSummary]:
        """Fan-in node name -> what its canonical id covers (op, device, attribute digests, inputs)."""
        return self.summarize() if self.summarize is not None else {}


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


def compute(view: GraphView, options: Any, identity: dict[str, Any], *, name: str = "") -> Fingerprint:
    signature: Signature = view.signature
    graph, nodes, summaries = canonical_graph(view)
    parts = {
        "graph": graph,
        "feeds": hash_text(json.dumps(signature.feeds)),
        "fetches": hash_text(json.dumps(signature.fetches)),
        "targets": hash_text(json.dumps(signature.targets)),
        "options": hash_text(options_bytes(options)),
        "identity": hash_json(identity),
    }
    key = combine(parts, PART_ORDER)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("key %s for %s: %s", key, name or "graph", " ".join(f"{p}={parts[p]}" for p in PART_ORDER))
    return Fingerprint(key, parts, nodes, summaries)


__all__ = ["DROPPED_ATTRS", "LARGE_TENSOR", "PART_ORDER", "Fingerprint", "NodeSummary", "canonical_function_names",
           "canonical_graph", "compute", "graph_hash", "input_node", "named_by_node", "options_bytes"]
