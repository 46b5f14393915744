"""The persistent counters' names, and what one lookup adds to them (the index's ``counters`` table; every
process on a cache dir adds to the same ones). Kept apart from stats.py, which reads them: a hit counts
without loading what reading needs.

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

tf.function traces that cannot be cached are counted apart (``trace_uncacheable``, TRACE_REASONS), since they
are not lookups of the cache's graphs.

Every lookup is also counted by the kind of entry it is for (``by_kind``: graph, tf_function, xla,
saved_model, and any kind added later), in counters named ``kind.<kind>.<stat>``; ``count_lookup`` writes
those and the older per-kind names (``hits``, ``function_hits``, ``xla_hits``, ...) in one update, so
``stats --json`` keeps its old keys and the headline (``totals``) adds up every kind.
"""

from __future__ import annotations

from ..entry import kinds

REASONS = ("resource_ops", "invalid_graph", "lock_timeout", "read_only", "io_error", "corrupt_entry",
           "untrusted_entry", "disabled", "small_graph", "not_importable")
UNCACHEABLE_PREFIX = "uncacheable."
COUNTERS = ("hits", "misses", "compiles", "compile_seconds", "saved_seconds", "bytes_written", "bytes_evicted",
            "evictions", "errors", "index_rebuilds")
# The remote tier (core/tier.py): ``remote_hits`` local misses served from the remote (also counted in
# ``hits``), ``remote_errors`` failed or timed-out remote calls and remote entries that failed verification,
# ``uploads``/``upload_bytes`` entries written through to the remote, ``fetch_bytes`` the bytes of the remote hits.
REMOTE_COUNTERS = ("remote_hits", "remote_errors", "uploads", "upload_bytes", "fetch_bytes")
# XLA executables (xla/): hits are approximate (see xla/hits.py), the rest exact. ``xla_pulled``: entries fetched
# from the remote at enable, before TensorFlow's first compile (not in ``remote_hits``, which counts lookups).
XLA_COUNTERS = ("xla_hits", "xla_compiles", "xla_materialized", "xla_bad_files", "xla_removed", "xla_pulled")
# TF2 functions (functions/): first calls served from the cache, first calls TensorFlow optimized itself, and
# those whose optimized graph could not be stored or served (``function_uncacheable``, also by reason:
# ``function_uncacheable.<reason>``, FUNCTION_REASONS).
FUNCTION_COUNTERS = ("function_hits", "function_compiles", "function_uncacheable")
FUNCTION_UNCACHEABLE = "function_uncacheable"
FUNCTION_REASONS = ("jit_compile", "busy", "not_collected", "typed_outputs", "control_outputs", "incomplete",
                    "signature", "introduced_ops", "file_name", "user_collection")
# tf.function traces (traces/): traces served from the cache, traces that missed (and were stored), and traces
# that could not be cached at all (``trace_uncacheable``, also by reason: ``trace_uncacheable.<reason>``,
# TRACE_REASONS). Hits and misses are the tf_trace kind's lookups, under these older-style names too.
TRACE_COUNTERS = ("trace_hits", "trace_misses", "trace_uncacheable")
TRACE_UNCACHEABLE = "trace_uncacheable"
TRACE_REASONS = ("library", "method", "not_a_function", "value", "builtin", "writes_state", "side_effect",
                 "creates_variables", "capture", "graph", "structure", "signature", "context", "keras", "hash_order",
                 "recorded")
# accelerate_train_mode (accelerate/): the training runs of its sessions by the precision they actually ran at:
# in bfloat16 or float16 (the reduced-precision variant), at the original precision because the variant's
# rewriter cannot run in that process (``original_unaccelerated``: oneDNN off, say; the session warned why), or
# at the original precision after the switch. Counted as ``accelerate_runs.<precision>``.
ACCELERATE_PREFIX = "accelerate_runs."
ACCELERATE_RUNS = ("bfloat16", "float16", "original_unaccelerated", "original_after_switch")

KIND_PREFIX = "kind."
KIND_STATS = ("hits", "misses", "compiles", "compile_seconds", "saved_seconds")
# What each kind's lookups were counted as before the per-kind counters (and still are, for the old keys of
# ``stats --json``): kind -> {stat: older counter}. A SavedModel alias hit was a graph hit.
LEGACY_NAMES: dict[str, dict[str, str]] = {
    kinds.GRAPH: {"hits": "hits", "misses": "misses", "compiles": "compiles", "compile_seconds": "compile_seconds",
                  "saved_seconds": "saved_seconds"},
    kinds.SAVED_MODEL: {"hits": "hits", "saved_seconds": "saved_seconds"},
    kinds.TF_FUNCTION: {"hits": "function_hits", "compiles": "function_compiles", "saved_seconds": "saved_seconds"},
    kinds.XLA: {"hits": "xla_hits", "compiles": "xla_compiles"},
    kinds.TF_TRACE: {"hits": "trace_hits", "misses": "trace_misses", "saved_seconds": "saved_seconds"},
}


def count_lookup(kind: str, **deltas: float) -> dict[str, float]:
    """The counter deltas for lookups of ``kind`` (``hits``, ``misses``, ``compiles``, ``compile_seconds``,
    ``saved_seconds``): the per-kind counters and the older names, for one ``EntryService.count`` call."""
    legacy = LEGACY_NAMES.get(kind, {})
    counts: dict[str, float] = {}
    for stat, value in deltas.items():
        if stat not in KIND_STATS:
            raise ValueError(f"unknown lookup stat {stat!r}: one of {', '.join(KIND_STATS)}")
        counts[f"{KIND_PREFIX}{kind}.{stat}"] = value
        if stat in legacy:
            counts[legacy[stat]] = counts.get(legacy[stat], 0) + value
    return counts
