"""Cache entries built off the caller's critical path: once, in the background, when first asked for.

A SavedModel miss (saved_model.py) answers from TensorFlow's own loaded SavedModel, as plain TensorFlow
would, and builds the entry later processes hit (freeze, compile, write the alias) here instead of before
the first answer: seconds of CPU on a big model that the first call no longer waits for.

- **When**: ``start()`` is called by whoever knows the moment is right (saved_model.py: once the first
  call has returned; started with the load, the build competed with that call for the cores); ``wait()``
  starts it too, and so does the exit drain for a build still waiting there (stage ``functions``, before
  ``writes`` joins it), so a process that never made the call still leaves the entry behind. A build whose
  owner was dropped unstarted never runs.
- **Where**: in the cache's background writes (``GraphCache.start_write``), at a lower CPU priority than
  the caller's threads (core/priority.py), so ``flush()``, the management calls (``stats``, ``entries``,
  ``purge``...), ``close()`` and the exit drain (core/exits.py, stage ``writes``) all wait for it like
  for any pending write: a process that got its answer and exits still leaves the entry behind.
- **Single flight**: in a process, one build per (cache dir, key): ``find`` gives the pending one, so a
  second load of the same SavedModel waits for it instead of loading again. Across processes it is the
  compile's own lock (cache.py), as for any miss.
- **Fail open**: an error is warned once and counted as a cache failure; the caller's answers never
  depended on the build.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .. import runtime
from ..core import exits, priority
from ..core.failures import warn_once
from ..errors import GraphCacheError

log = logging.getLogger("graphcache")

T = TypeVar("T")

# The pending builds are runtime.state.deferred, by (cache dir, key). Weak: a build nobody started goes away
# with its owner (and the loaded model its closure holds); a started one is held by its thread until it ends.


class DeferredBuild(Generic[T]):
    """``build()`` run once in ``cache``'s background writes, for the entry ``key``; see the module docstring."""

    def __init__(self, cache: Any, key: str, build: Callable[[], T], what: str) -> None:
        self.cache = cache
        self.key = key
        self.what = what
        self._build = build
        self._started = False
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.result: T | None = None
        self.error: BaseException | None = None
        with runtime.state.pending_lock:
            runtime.state.deferred[(str(cache.cache_dir), key)] = self
        exits.at_exit(exits.FUNCTIONS, start_all)

    def start(self) -> None:
        """Start the build (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        self.cache.start_write(priority.in_background(self._run))  # the compile inside takes the key's lock

    @property
    def started(self) -> bool:
        return self._started

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Start the build if it is not running, wait for it (at most ``timeout`` s); True once it ended."""
        self.start()
        return self._done.wait(timeout)

    def _run(self) -> None:
        try:
            self.result = self._build()
        except (GraphCacheError, ValueError, OSError) as exc:
            self.error = exc
            warn_once("deferred_build", f"graphcache: building the cache entry for {self.what} in the background "
                                        f"failed ({type(exc).__name__}: {exc}); this process was served by "
                                        "TensorFlow, the next one will try again")
            self.cache.count(errors=1)
        except Exception as exc:  # a bug: never the caller's problem, but say it loudly
            self.error = exc
            log.warning("graphcache: building the cache entry for %s in the background failed", self.what,
                        exc_info=True)
        finally:
            with runtime.state.pending_lock:
                pending = runtime.state.deferred
                if pending.get((str(self.cache.cache_dir), self.key)) is self:
                    del pending[(str(self.cache.cache_dir), self.key)]
            self._done.set()


def find(cache: Any, key: str) -> DeferredBuild[Any] | None:
    """This process's pending build of ``key`` in ``cache``'s dir, if there is one."""
    with runtime.state.pending_lock:
        return runtime.state.deferred.get((str(cache.cache_dir), key))


def start_all() -> None:
    """Start every pending build nobody started yet (at exit: the ``writes`` stage then joins them)."""
    with runtime.state.pending_lock:
        waiting = [build for build in runtime.state.deferred.values() if not build.started]
    for build in waiting:
        build.start()
