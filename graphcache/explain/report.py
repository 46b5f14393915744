"""Explaining a graph's key against what is cached: the nearest entries, the parts and nodes that differ.

Two callers. ``explain`` (the ``graphcache explain`` command, or a user) scores every cached graph entry
and reads the nearest entries' node tables. A miss (``note_miss``, from GraphCache's miss path) does
the cheap part only: the nearest entry by indexed lookups (core/index/misses.py), the parts that differ, and one
row in the index's table of recent misses; the node-level diff is deferred to ``explain``, unless
``GRAPHCACHE_EXPLAIN=1`` (a warning per miss) or the ``graphcache`` logger at INFO ask for it then.

The cache is always passed in, typed as the entry service (its ``identity`` is the compiler identity a
GraphCache computes): this plugin never imports its host (explain/plugin.py registers the miss hook).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..compile import keys
from ..compile.graphs import Signature
from ..core import settings
from ..core.index.misses import Candidate, Miss, identity_changes
from ..core.service import EntryService
from . import nodes

log = logging.getLogger("graphcache")

NEAREST = 3  # nearest entries an explanation shows by default
NODE_LIMIT = 20  # names per list (added, removed, changed) before "and N more"
_SIGNATURE_PARTS = ("feeds", "fetches", "targets")


@dataclass
class NearestEntry:
    """One cached entry compared with the graph: the parts that differ, in words where a hash cannot say,
    and (when the graph part differs) the nodes."""

    key: str
    name: str
    version: str
    created: float
    differs: list[str]
    detail: dict[str, str] = field(default_factory=dict)  # part -> what changed, in words
    nodes: nodes.NodeDiff | None = None  # None: the graph part is the same, or no node table to compare
    nodes_note: str = ""  # why there is no node diff although the graph part differs

    def as_json(self, limit: int = NODE_LIMIT) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "version": self.version, "differs": list(self.differs),
                "detail": dict(self.detail), "nodes": self.nodes.capped(limit) if self.nodes is not None else None,
                "nodes_note": self.nodes_note or None}

    def summary(self, limit: int = 5) -> str:
        """One line: which parts differ and how."""
        said = []
        for part in self.differs:
            if part == "graph" and self.nodes is not None:
                said.append(f"graph ({graph_words(self.nodes, limit)})")
            elif part == "graph" and self.nodes_note:
                said.append(f"graph ({self.nodes_note})")
            elif part in self.detail:
                said.append(f"{part} ({self.detail[part]})")
            else:
                said.append(part)
        return "; ".join(said) or "nothing (the same key)"


@dataclass
class Explanation:
    """What ``explain`` found: the key the graph would have, whether it is cached, and the nearest
    entries (same name first, then most key parts shared). ``reason``: why the graph cannot be cached."""

    key: str
    name: str
    cached: bool
    signature: Signature | None
    nearest: list[NearestEntry] = field(default_factory=list)
    more: int = 0  # further entries compared, not shown
    reason: str | None = None

    @property
    def cacheable(self) -> bool:
        return self.reason is None

    def as_json(self, limit: int = NODE_LIMIT) -> dict[str, Any]:
        """The JSON contract (README, "Why did it miss?")."""
        signature = self.signature.as_dict() if self.signature is not None else None
        return {"key": self.key, "name": self.name, "cached": self.cached, "cacheable": self.cacheable,
                "reason": self.reason, "signature": signature,
                "nearest": [entry.as_json(limit) for entry in self.nearest], "more": self.more}

    def text(self) -> str:
        """One log line."""
        head = f"graphcache: {self.name} key={self.key or '-'}"
        if not self.cacheable:
            return f"{head}: not cacheable: {self.reason}"
        if self.cached:
            return f"{head}: cached"
        if not self.nearest:
            return f"{head}: not cached; no cached graph entry to compare with"
        best = self.nearest[0]
        return f"{head}: not cached; nearest entry {best.key} ({best.name}) differs in {best.summary()}"


def graph_words(diff: nodes.NodeDiff, limit: int = 5) -> str:
    """``changed dense/MatMul (attr:transpose_a); added x, y and 3 more`` (lists cut to ``limit``)."""
    def listed(names: list[str]) -> str:
        shown = ", ".join(names[:limit])
        return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")

    said = []
    if diff.changed:
        changed = [f"{name} ({', '.join(what)})" for name, what in diff.changed.items()]
        said.append("changed " + listed(changed))
    if diff.added:
        said.append("added " + listed(diff.added))
    if diff.removed:
        said.append("removed " + listed(diff.removed))
    return "; ".join(said) or "no node differs in itself: the wiring between nodes or the graph version does"


# -- what an entry keeps ---------------------------------------------------------------------------------------
def table_extra(fp: keys.Fingerprint) -> dict[str, Any]:
    """The entry header's extra field holding the source graph's node table (nodes.py)."""
    return {nodes.EXTRA_KEY: nodes.encode(nodes.from_summaries(fp.details))}


# -- comparing -------------------------------------------------------------------------------------------------
def _signature_words(old: Any, new: tuple[str, ...]) -> str:
    before = [str(name) for name in old] if isinstance(old, list) else []
    return f"{', '.join(before) or '(none)'} -> {', '.join(new) or '(none)'}"


def _identity_words(cache: EntryService, candidate: Candidate, header: Any) -> str:
    if header is not None and isinstance(header.identity, dict) and header.identity:
        said = identity_changes(header.identity, cache.identity)
    elif candidate.version != cache.version:  # no header: what the manifest says about its version
        described = cache.version_description(candidate.version)
        said = identity_changes(described, cache.version_info) if described is not None else ""
    else:
        said = ""
    return said or "the compiler identity differs"


def compare(cache: EntryService, fp: keys.Fingerprint, signature: Signature | None, candidate: Candidate, *,
            with_nodes: bool = True) -> NearestEntry:
    """``candidate`` against the graph fingerprinted as ``fp``: the parts that differ, in words."""
    differs = candidate.differs(fp.parts)
    entry = NearestEntry(candidate.key, candidate.name, candidate.version, candidate.created, differs)
    wants_header = (with_nodes and "graph" in differs) or "identity" in differs or (
        signature is not None and any(part in differs for part in _SIGNATURE_PARTS))
    header = cache.entry_header(candidate.key) if wants_header else None
    if "identity" in differs:
        entry.detail["identity"] = _identity_words(cache, candidate, header)
    if signature is not None and header is not None:
        for part in _SIGNATURE_PARTS:
            if part in differs:
                entry.detail[part] = _signature_words(header.extra.get(part), getattr(signature, part))
    if "options" in differs:
        entry.detail["options"] = "the ConfigProto's graph_options (rewriter options) differ"
    if "graph" in differs and with_nodes:
        stored = header.extra.get(nodes.EXTRA_KEY) if header is not None else None
        if stored is None:
            entry.nodes_note = ("the entry keeps no node table (written by an older graphcache)" if header
                                is not None else "the entry's header could not be read")
        else:
            try:
                entry.nodes = nodes.diff(nodes.from_summaries(fp.details), nodes.decode(stored))
            except ValueError as exc:  # a table this version cannot read
                entry.nodes_note = str(exc)
            except Exception as exc:  # noqa: BLE001 - an explanation is never worth a failed miss
                log.debug("graphcache: the node diff against %s failed", candidate.key, exc_info=True)
                entry.nodes_note = f"the node diff failed ({type(exc).__name__}: {exc})"
    return entry


def explain_fingerprint(cache: EntryService, fp: keys.Fingerprint, name: str, signature: Signature | None, *,
                        limit: int = NEAREST, everything: bool = True,
                        found: tuple[list[Candidate], int] | None = None) -> Explanation:
    """The explanation of a fingerprinted graph (``found``: nearest entries already looked up)."""
    cached = cache.entry_header(fp.key) is not None
    candidates, more = found if found is not None else cache.nearest_entries(
        name, fp.parts, exclude=fp.key, limit=limit, everything=everything)
    explained = Explanation(fp.key, name, cached, signature, more=more)
    explained.nearest = [compare(cache, fp, signature, candidate) for candidate in candidates]
    return explained


def explain(graph: Any, fetches: Any, feeds: Any = (), targets: Any = (), *, cache: EntryService,
            options: Any = None, name: str | None = None, limit: int = NEAREST) -> Explanation:
    """Why ``graph`` (with this signature) hits or misses in ``cache``: its key, whether it is cached, and
    the ``limit`` nearest cached entries with what differs. ``name`` defaults as in ``GraphCache.compile``
    (entries of the same name are compared first). A graph that cannot be cached says why (``reason``).
    Reads the cache only."""
    from ..compile.graphs import GraphView, load
    from ..errors import UnsupportedGraphError

    source = load(graph)
    signature = Signature.create(fetches, feeds, targets)
    view = GraphView(source.graph_def, signature)
    label = name or ",".join(signature.fetches + signature.targets)[:120]
    try:
        view.check_supported()
    except UnsupportedGraphError as exc:
        return Explanation("", label, False, signature, reason=str(exc))
    fp = keys.compute(view, options, cache.identity, name=label)
    return explain_fingerprint(cache, fp, label, signature, limit=limit)


# -- at a miss -------------------------------------------------------------------------------------------------
def note_miss(cache: EntryService, fp: keys.Fingerprint, name: str, signature: Signature) -> None:
    """Record a miss in the index (nearest entry and the parts that differ: indexed lookups, one row) and,
    when asked for (GRAPHCACHE_EXPLAIN=1, or the ``graphcache`` logger at INFO), log its explanation."""
    loud = settings.explain_misses()
    wanted = loud or log.isEnabledFor(logging.INFO)
    found = cache.nearest_entries(name, fp.parts, exclude=fp.key, limit=1)
    candidates = found[0]
    best = compare(cache, fp, signature, candidates[0], with_nodes=wanted) if candidates else None
    detail = "; ".join(f"{part}: {words}" for part, words in best.detail.items() if part != "options") if best else ""
    cache.record_miss(Miss(time.time(), name, fp.key, best.key if best else None,
                           tuple(best.differs) if best else (), detail), parts=fp.parts)
    if loud or (wanted and best is not None):  # at INFO, a first compile's miss line says all there is
        explained = Explanation(fp.key, name, False, signature, [best] if best else [], found[1])
        (log.warning if loud else log.info)("%s", explained.text())


__all__ = ["NEAREST", "NODE_LIMIT", "Explanation", "NearestEntry", "compare", "explain", "explain_fingerprint",
           "graph_words", "note_miss", "table_extra"]
