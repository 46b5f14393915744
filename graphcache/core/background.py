"""Entry writes that overlap with the caller's first run.

A miss on a big graph ends with writing its entry: for a 100 MB ResNet50 that is ~0.3 s of copying into
the page cache and fsync, time the caller would otherwise spend waiting before it can import and run the
graph it already has in hand. GraphCache hands such writes to a thread together with the key's compile
lock, which the thread releases once the entry is stored: other processes and threads asking for the
key keep waiting on the lock and then load the entry, so single flight holds.

Nothing is lost at exit: pending writes are joined by the exit drain (exits.py), before it waits for
the uploads they queue; ``GraphCache.flush()`` waits for its own. The write itself is the normal atomic write (temp file + fsync
+ rename), so a process killed mid-write leaves no visible entry, only a temp file that the next open
removes once it is old.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import exits

log = logging.getLogger("graphcache")

_all: weakref.WeakSet[BackgroundWrites] = weakref.WeakSet()  # a cache with pending writes is kept alive by its threads
_all_lock = threading.Lock()


class BackgroundWrites:
    """The pending background writes of one GraphCache."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def start(self, func: Callable[..., Any], *args: Any, lock: Any) -> None:
        """Run ``func(*args)`` in a thread, then release ``lock`` (held by the caller, handed over here)."""
        thread = threading.Thread(target=self._run, args=(func, args, lock), name="graphcache-write")
        with self._lock:
            self._threads.add(thread)
        _register(self)
        thread.start()

    def _run(self, func: Callable[..., Any], args: tuple[Any, ...], lock: Any) -> None:
        try:
            func(*args)
        except Exception:  # a bug, not a storage failure (those are handled, fail open, inside func)
            log.warning("graphcache: writing an entry in the background failed", exc_info=True)
        finally:
            try:
                lock.release()
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._threads)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the pending writes (at most ``timeout`` seconds in all); True when none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                return True
            for thread in threads:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                thread.join(left)
                if deadline is not None and time.monotonic() >= deadline:
                    return self.pending == 0


def _register(writes: BackgroundWrites) -> None:
    with _all_lock:
        _all.add(writes)
    exits.at_exit(exits.WRITES, wait_all)


def wait_all() -> None:
    """Join every pending background write of this process (runs at interpreter exit)."""
    with _all_lock:
        pending = list(_all)
    for writes in pending:
        writes.wait()
