"""A snapshot of a cache dir's counters (core/counters.py names them): ``Stats``, with the headline over every
kind of entry (``totals``) and the breakdown by kind (``by_kind``), as ``graphcache stats`` shows them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..entry import kinds
from .counters import (
    ACCELERATE_PREFIX,
    ACCELERATE_RUNS,
    FUNCTION_COUNTERS,
    FUNCTION_REASONS,
    FUNCTION_UNCACHEABLE,
    KIND_PREFIX,
    KIND_STATS,
    REASONS,
    REMOTE_COUNTERS,
    TRACE_COUNTERS,
    TRACE_REASONS,
    TRACE_UNCACHEABLE,
    UNCACHEABLE_PREFIX,
    XLA_COUNTERS,
)

KindStats = dict[str, float]  # one kind's figures: entries, bytes and the KIND_STATS (as stats --json shows them)


def _no_figures() -> KindStats:
    return {"entries": 0, "bytes": 0, **{stat: 0 for stat in KIND_STATS}}


def kind_breakdown(counters: dict[str, float], entries_by_kind: dict[str, tuple[int, int]]) -> dict[str, KindStats]:
    """Per kind of entry as stored (an alias kind has entries, its lookups are its target kind's): entries,
    bytes and lookups. Counts made before the per-kind counters existed are read from the older names."""
    breakdown: dict[str, KindStats] = {}
    for kind, (count, size) in entries_by_kind.items():
        row = breakdown.setdefault(kind, _no_figures())
        row["entries"] += count
        row["bytes"] += size
    recorded: set[str] = set()
    for name, value in counters.items():
        if name.startswith(KIND_PREFIX):
            kind, _, stat = name[len(KIND_PREFIX):].rpartition(".")
            if kind and stat in KIND_STATS:
                breakdown.setdefault(kind, _no_figures())[stat] += value
                recorded.add(kind)
    if not recorded:  # a dir whose counts all predate the per-kind counters
        _legacy_breakdown(counters, breakdown)
    for row in breakdown.values():
        for stat in ("hits", "misses", "compiles"):
            row[stat] = int(row[stat])
    return dict(sorted(breakdown.items()))


def _legacy_breakdown(counters: dict[str, float], breakdown: dict[str, KindStats]) -> None:
    # SavedModel hits and TF2 functions' saved seconds were folded into the graph counters then.
    for kind, stat, name in ((kinds.GRAPH, "hits", "hits"), (kinds.GRAPH, "misses", "misses"),
                             (kinds.GRAPH, "compiles", "compiles"), (kinds.GRAPH, "compile_seconds", "compile_seconds"),
                             (kinds.GRAPH, "saved_seconds", "saved_seconds"),
                             (kinds.TF_FUNCTION, "hits", "function_hits"),
                             (kinds.TF_FUNCTION, "misses", "function_compiles"),
                             (kinds.TF_FUNCTION, "compiles", "function_compiles"),
                             (kinds.XLA, "hits", "xla_hits"), (kinds.XLA, "misses", "xla_compiles"),
                             (kinds.XLA, "compiles", "xla_compiles")):
        if counters.get(name):
            breakdown.setdefault(kind, _no_figures())[stat] += counters[name]


@dataclass(frozen=True)
class Stats:
    """A snapshot of a cache dir: its entries and its counters."""

    entries: int
    bytes: int
    hits: int
    misses: int
    compiles: int
    compile_seconds: float
    saved_seconds: float
    bytes_written: int
    bytes_evicted: int
    errors: int
    uncacheable: dict[str, int] = field(default_factory=dict)
    version: str = ""  # the current compiler version id
    evictions: int = 0
    index_rebuilds: int = 0  # times the index was rebuilt from the entry files (core/index/rebuild.py)
    max_size: int | None = None
    xla: dict[str, int] = field(default_factory=dict)
    remote_hits: int = 0
    remote_errors: int = 0
    uploads: int = 0
    upload_bytes: int = 0
    fetch_bytes: int = 0
    functions: dict[str, int] = field(default_factory=dict)
    function_reasons: dict[str, int] = field(default_factory=dict)  # function_uncacheable by reason (nonzero only)
    traces: dict[str, int] = field(default_factory=dict)  # trace_hits, trace_misses, trace_uncacheable
    trace_reasons: dict[str, int] = field(default_factory=dict)  # trace_uncacheable by reason (nonzero only)
    by_kind: dict[str, KindStats] = field(default_factory=dict)
    accelerate_runs: dict[str, int] = field(default_factory=dict)  # training runs by the precision they ran at

    @property
    def totals(self) -> dict[str, Any]:
        """Lookups over every kind of entry: what ``stats`` shows first."""
        summed = {stat: sum(row[stat] for row in self.by_kind.values()) for stat in KIND_STATS}
        lookups = summed["hits"] + summed["misses"]
        return {**summed, "hit_rate": summed["hits"] / lookups if lookups else None}

    @property
    def identity(self) -> str:
        """graphcache 0.1's name for ``version``, kept for existing code."""
        return self.version

    @property
    def hit_rate(self) -> float | None:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else None

    @classmethod
    def from_counters(cls, entries: int, size: int, counters: dict[str, float], version: str = "",
                      max_size: int | None = None, entries_by_kind: dict[str, tuple[int, int]] | None = None
                      ) -> Stats:
        uncacheable = {reason: int(counters.get(UNCACHEABLE_PREFIX + reason, 0)) for reason in REASONS}
        return cls(
            entries=entries,
            bytes=size,
            hits=int(counters.get("hits", 0)),
            misses=int(counters.get("misses", 0)),
            compiles=int(counters.get("compiles", 0)),
            compile_seconds=float(counters.get("compile_seconds", 0.0)),
            saved_seconds=float(counters.get("saved_seconds", 0.0)),
            bytes_written=int(counters.get("bytes_written", 0)),
            bytes_evicted=int(counters.get("bytes_evicted", 0)),
            errors=int(counters.get("errors", 0)),
            uncacheable=uncacheable,
            version=version,
            evictions=int(counters.get("evictions", 0)),
            index_rebuilds=int(counters.get("index_rebuilds", 0)),
            xla={name: int(counters.get(name, 0)) for name in XLA_COUNTERS},
            max_size=max_size,
            functions={name: int(counters.get(name, 0)) for name in FUNCTION_COUNTERS},
            function_reasons={reason: int(counters[f"{FUNCTION_UNCACHEABLE}.{reason}"]) for reason in FUNCTION_REASONS
                              if counters.get(f"{FUNCTION_UNCACHEABLE}.{reason}")},
            traces={name: int(counters.get(name, 0)) for name in TRACE_COUNTERS},
            trace_reasons={reason: int(counters[f"{TRACE_UNCACHEABLE}.{reason}"]) for reason in TRACE_REASONS
                           if counters.get(f"{TRACE_UNCACHEABLE}.{reason}")},
            by_kind=kind_breakdown(counters, entries_by_kind or {}),
            accelerate_runs={name: int(counters.get(ACCELERATE_PREFIX + name, 0)) for name in ACCELERATE_RUNS},
            **{name: int(counters.get(name, 0)) for name in REMOTE_COUNTERS},
        )
