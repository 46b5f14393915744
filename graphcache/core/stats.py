"""Persistent counters shared by every process on a cache dir (stored in the index's ``counters`` table).

Uncacheable lookups are counted by reason, from this fixed set:

- ``resource_ops``: the graph holds non-variable resource state (tables, iterators, queues, ...)
- ``invalid_graph``: the input was not a usable graph or signature
- ``lock_timeout``: the compile lock was not obtained in time; compiled without the cache
- ``read_only``: a miss in read-only mode (compiled, not stored)
- ``io_error``: the store failed (read, write, index); compiled without the cache
- ``corrupt_entry``: an entry failed its checks; it was removed and recompiled
- ``untrusted_entry``: an entry was rejected: it adds ops its source does not have (safety.py), or it is
  unsigned or badly signed while ``GRAPHCACHE_SIGNING_KEY`` is set
- ``disabled``: ``GRAPHCACHE_DISABLE=1``
"""

from __future__ import annotations

from dataclasses import dataclass, field

REASONS = ("resource_ops", "invalid_graph", "lock_timeout", "read_only", "io_error", "corrupt_entry",
           "untrusted_entry", "disabled", "small_graph")
UNCACHEABLE_PREFIX = "uncacheable."
COUNTERS = ("hits", "misses", "compiles", "compile_seconds", "saved_seconds", "bytes_written", "bytes_evicted",
            "evictions", "errors", "index_rebuilds")
# The remote tier (core/tier.py): ``remote_hits`` local misses served from the remote (also counted in
# ``hits``), ``remote_errors`` failed or timed-out remote calls and remote entries that failed verification,
# ``uploads``/``upload_bytes`` entries written through to the remote.
REMOTE_COUNTERS = ("remote_hits", "remote_errors", "uploads", "upload_bytes")
# XLA executables (xla/): hits are approximate (see xla/hits.py), the rest exact. ``xla_pulled``: entries fetched
# from the remote at enable, before TensorFlow's first compile (not in ``remote_hits``, which counts lookups).
XLA_COUNTERS = ("xla_hits", "xla_compiles", "xla_materialized", "xla_bad_files", "xla_removed", "xla_pulled")
# TF2 functions (functions/): first calls served from the cache, and first calls TensorFlow optimized itself.
FUNCTION_COUNTERS = ("function_hits", "function_compiles")


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
    functions: dict[str, int] = field(default_factory=dict)

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
                      max_size: int | None = None) -> Stats:
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
            **{name: int(counters.get(name, 0)) for name in REMOTE_COUNTERS},
        )
