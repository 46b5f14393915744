"""Pausing Python's cyclic garbage collector around canonicalization, a large computation that makes no cycles.

Canonicalizing a graph (canonical.py) allocates hundreds of thousands of containers, most of which live
until the pass ends (node ids, elements, summaries). In a process that has imported TensorFlow the
collector already tracks about a million long-lived objects, and so many survivors set off full collections
over all of them: on a big traced function the functions plugin's key (functionlib.canonical_function_hash)
took about twice as long with the collector on as paused, in a process's first calls (later ones, once the
collector's thresholds had grown, took the same either way). The pass makes no reference cycles, so pausing
loses nothing: what it allocated is looked at by the next collection, as usual.

The collector's switch is process-wide. Pauses nest and may overlap across threads: the first one in
turns the collector off and the last one out turns it back on, only if it was on when the first came in
(a program that runs with the collector disabled keeps it disabled).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


class _Pauses:
    """How many pauses run now, and whether the collector was on when the first came in."""

    lock = threading.Lock()
    depth = 0
    was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector off (see the module docstring)."""
    with _Pauses.lock:
        if _Pauses.depth == 0:
            _Pauses.was_enabled = gc.isenabled()
            gc.disable()
        _Pauses.depth += 1
    try:
        yield
    finally:
        with _Pauses.lock:
            _Pauses.depth -= 1
            if _Pauses.depth == 0 and _Pauses.was_enabled:
                gc.enable()


def collect_young() -> None:
    """The young generation's collection, now and in the calling thread, when a pause left it over its threshold.

    A pause lets the young generation grow past its threshold (a Keras trace: tens of thousands of live young
    containers); the first allocation after it, in whatever thread, collects them all at once. Where that is
    a background thread at a lowered priority (core/priority.py) that holds the GIL for the whole collection,
    the caller waits for it: 0.15 s on EfficientNetV2B0's first-ever ``predict`` on a busy machine (ad hoc,
    gc callbacks), against the caller's own collections of 10-20 ms. The caller that paused collects instead,
    as an allocation of its own would have (generation 0 only: the older ones' turn comes as ever)."""
    with _Pauses.lock:  # on, or paused only by graphcache (another thread's pause, which would end in that thread)
        collecting = gc.isenabled() or (_Pauses.depth > 0 and _Pauses.was_enabled)
    if collecting and gc.get_count()[0] > gc.get_threshold()[0]:
        gc.collect(0)
