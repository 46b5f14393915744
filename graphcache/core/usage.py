"""What lookups owe the index (uses and counts), kept in memory and written off the caller's path.

A hit records a use of its entry (its LRU position; a row the index lacks is re-added from the header) and
counts itself. Written at once, that is a write transaction on the caller's path, and in a fresh process
opening the index first (importing sqlite3, connecting, the once-per-process housekeeping): milliseconds
before the caller can run the graph it has in hand. So uses and counts wait here, and EntryService
(core/service.py) writes them in the background once the caller's first run is over (the same gate a miss's
entry write waits for: ``CompiledGraph.first_run_done``) or after a grace, and at the latest when
something waits for the cache's writes: ``flush()``, the management calls (``stats`` included), ``close()``
and the exit drain (core/exits.py's ``INDEX`` stage, after the uploads that count too).

Best effort, like the counters always were: a process killed with SIGKILL (or ending in ``os._exit``) loses
the uses and counts still waiting here, never an entry; an index that stays busy keeps the counts for the
next write that gets through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from . import exits
from .background import BackgroundWrites, wait_all

if TYPE_CHECKING:
    from ..entry import codec
    from .index.database import CacheIndex

# Seconds a write of what lookups owe waits for the caller's first run to end before it starts anyway
# (as a miss's entry write does: cache.py WRITE_GRACE).
USAGE_GRACE = 2.0


class Use(NamedTuple):
    """A use of an entry: when, and what re-adds its row should the index lack one."""

    when: float
    header: codec.EntryHeader | None
    size: int


class PendingUsage:
    """The uses and counts one EntryService has not written yet, and the background write that will write
    them: one at a time, started by the first use or count after the last one began, through ``write`` (the
    service's: it opens the index and fails open). Thread-safe."""

    def __init__(self, write: Callable[[dict[str, float], dict[str, Use]], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._counts: dict[str, float] = {}
        self._uses: dict[str, Use] = {}
        self._gate: threading.Event | None = None  # the waiting write's gate; None: none waits
        self._writes = BackgroundWrites(daemon=True, stage=exits.INDEX)

    @property
    def gate(self) -> threading.Event | None:
        """What the waiting write waits for (besides its grace): a hit hands it to the caller as its
        CompiledGraph's write gate, which the first run opens. None when no write waits."""
        return self._gate

    def count(self, deltas: dict[str, float]) -> None:
        with self._lock:
            for name, value in deltas.items():
                self._counts[name] = self._counts.get(name, 0) + value
        self._schedule()

    def use(self, key: str, header: codec.EntryHeader | None, size: int) -> None:
        self._merge({key: Use(time.time(), header, size)})
        self._schedule()

    def give_back(self, counts: dict[str, float], uses: dict[str, Use]) -> None:
        """What a write could not write (a busy index): kept for the next write, which the next use or count
        starts (not this one: a busy index would be retried in a loop)."""
        with self._lock:
            for name, value in counts.items():
                self._counts[name] = self._counts.get(name, 0) + value
        self._merge(uses)

    def _merge(self, uses: dict[str, Use]) -> None:
        with self._lock:
            for key, use in uses.items():
                known = self._uses.get(key)
                if known is None:
                    self._uses[key] = use
                    continue
                newer, older = (use, known) if use.when >= known.when else (known, use)
                # the newest use wins; a header already known is kept (the row can be re-added from it)
                self._uses[key] = newer if newer.header is not None else newer._replace(header=older.header,
                                                                                         size=older.size)

    def _schedule(self) -> None:
        with self._lock:
            if self._gate is not None:
                return
            gate = self._gate = threading.Event()
        self._writes.start(self._run, gate=gate, grace=USAGE_GRACE)

    def _run(self) -> None:
        with self._lock:
            self._gate = None  # from here on, a new use or count starts the next write
            counts, uses = self._counts, self._uses
            self._counts, self._uses = {}, {}
        if counts or uses:
            self._write(counts, uses)

    def wait(self, timeout: float | None = None) -> bool:
        """Start the waiting write now and wait for it (at most ``timeout`` seconds); True when none is left."""
        return self._writes.wait(timeout)


def write_all() -> None:
    """Write what lookups owe the index, for every cache of this process: a management call (``stats``) in
    one GraphCache then sees the hits another GraphCache of the same process just served."""
    wait_all(exits.INDEX)


def write_usage(index: CacheIndex, counts: dict[str, float], uses: dict[str, Use],
                exists: Callable[[str], bool]) -> None:
    """Write ``uses`` (re-adding the rows the index lacks for entries still stored: ``exists``) and add
    ``counts``: two transactions. Raises what the index raises; the counts are written last, so a caller that
    catches a busy index hands back all of them (a use already written, written again, changes nothing)."""
    missing = index.touch_many({key: use.when for key, use in uses.items()})
    for key in missing:
        use = uses[key]
        # A row the index lacks is re-added as a write adds it, unless the entry went meanwhile (another
        # process purged or evicted it since the hit: its row must not come back without its file).
        if use.header is not None and exists(key):
            from .index import misses
            from .index.schema import row_from_header

            misses.upsert_entry(index, row_from_header(use.header, use.size, use.when), misses.graph_parts(use.header))
    index.add_counters(counts)
