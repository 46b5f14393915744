"""Entry writes that overlap with the caller's first run.

A miss on a big graph ends with writing its entry: copying a payload of hundreds of MB into the page cache
and an fsync, time the caller would otherwise spend waiting before it can import and run the
graph it already has in hand. GraphCache hands such writes to a thread together with the key's compile
lock, which the thread releases once the entry is stored: other processes and threads asking for the
key keep waiting on the lock and then load the entry, so single flight holds.

A write does not start at once: it waits for its gate, which the caller opens when its first run of the
graph is over (``CompiledGraph.first_run_done``: ``compiled.session()`` and graphcache.Session open it
themselves), or for a grace of at most a few seconds. Started at once, the write's Python half (the node
table, the index rows, garbage collections) took the GIL from the caller's import and first run, which
then took about twice as long (the miss's ``session()`` step in benchmarks/cold_warm.py). Waiting for
the writes (``wait``, ``flush()``, the management calls, the exit drain) opens every gate first.

Nothing is lost at exit: pending writes are joined by the exit drain (exits.py), before it waits for
the uploads they queue; ``GraphCache.flush()`` waits for its own. The write itself is the normal atomic write (temp file + fsync
+ rename), so a process killed mid-write leaves no visible entry, only a temp file that the next open
removes once it is old.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import runtime
from . import exits

log = logging.getLogger("graphcache")


class BackgroundWrites:
    """The pending background writes of one GraphCache, joined at exit in exits.py's ``stage``.

    ``daemon``: the threads do not hold up the interpreter's shutdown (which joins other threads before any
    exit hook runs, so a write waiting out its grace would delay every exit): the exit drain opens their
    gates and joins them instead. For writes the caller may lose to a SIGKILL (core/usage.py), not entries.
    """

    def __init__(self, *, daemon: bool = False, stage: str = exits.WRITES) -> None:
        self._threads: dict[threading.Thread, threading.Event] = {}  # each pending write and its gate
        self._keys: dict[str, threading.Thread] = {}  # the entry each pending write of a known key writes
        self._lock = threading.Lock()
        self._daemon = daemon
        self._stage = stage

    def start(self, func: Callable[..., Any], *args: Any, lock: Any = None, gate: threading.Event | None = None,
              grace: float = 0.0, key: str | None = None) -> None:
        """Run ``func(*args)`` in a thread once ``gate`` is set or ``grace`` seconds have passed, then release
        ``lock`` (held by the caller, handed over here), if one is given. ``key``: the entry it writes, which
        ``wait_for_key`` waits for."""
        gate = gate if gate is not None else threading.Event()
        if grace <= 0:
            gate.set()
        from . import priority  # (not loaded by opening a cache: a hit starts no write)

        _register(self, self._stage)
        with self._lock:  # started under the lock: wait() in another thread never joins a thread not yet started
            thread = priority.start_thread(functools.partial(self._run, func, args, lock, gate, grace, key),
                                           "graphcache-write", daemon=self._daemon)
            self._threads[thread] = gate
            if key is not None:
                self._keys[key] = thread

    def _run(self, func: Callable[..., Any], args: tuple[Any, ...], lock: Any, gate: threading.Event,
             grace: float, key: str | None) -> None:
        try:
            gate.wait(grace)
            func(*args)
        except Exception:  # a bug, not a storage failure (those are handled, fail open, inside func)
            log.warning("graphcache: writing an entry in the background failed", exc_info=True)
        finally:
            try:
                if lock is not None:
                    lock.release()
            finally:
                with self._lock:
                    self._threads.pop(threading.current_thread(), None)
                    if key is not None and self._keys.get(key) is threading.current_thread():  # not a later write's
                        del self._keys[key]

    def wait_for_key(self, key: str, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the pending write of the entry ``key``, if there is one and it is
        not the caller's own: single flight within the process. A function traced or first-called again while
        its entry is being written (the same code wrapped again: a test's warm-up loop, a rebuilt step) then
        reads that entry instead of compiling it a second time and writing it again; other processes wait on
        the key's file lock instead."""
        with self._lock:
            thread = self._keys.get(key)
            gate = self._threads.get(thread) if thread is not None else None
        if thread is None or thread is threading.current_thread():
            return
        if gate is not None:
            gate.set()  # whoever waits wants the entry now
        thread.join(timeout)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._threads)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the pending writes (at most ``timeout`` seconds in all); True when none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                # not the current thread: a write that waits for writes (a flush from within one) cannot join itself
                threads = [thread for thread in self._threads if thread is not threading.current_thread()]
                for gate in self._threads.values():
                    gate.set()  # whoever waits wants the entries now
            if not threads:
                return True
            for thread in threads:
                thread.join(time_left(deadline))
                if deadline is not None and time.monotonic() >= deadline:
                    return self.pending == 0


def time_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (a time.monotonic() value), never below 0; None (no bound) for None."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _register(writes: BackgroundWrites, stage: str) -> None:
    """A cache with pending writes is kept alive by its threads; runtime.state.writers holds it weakly."""
    with runtime.state.pending_lock:
        runtime.state.writers.add(writes)
    exits.at_exit(stage, wait_all)


def wait_all(stage: str | None = None) -> None:
    """Join every pending background write of this process (runs at interpreter exit); with ``stage``, only
    those of that exit stage (exits.py)."""
    with runtime.state.pending_lock:
        pending = list(runtime.state.writers)
    for writes in pending:
        if stage is None or writes._stage == stage:
            writes.wait()
