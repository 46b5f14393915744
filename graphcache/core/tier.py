"""The remote tier: how the entry service talks to a shared store that may be slow, down or far away.

Bytes only: what comes back is unchecked, and what goes up was written locally first. The entry service
(service.py) verifies every remote read, keeps it locally, counts it and warns; this module only bounds
and schedules the traffic:

- **Deadline**: every call runs within the remote timeout (store/remote.py ``call_with_deadline``), so a
  server that accepts but never answers costs one timeout, never a hung compile.
- **Circuit breaker**: a failure opens it for ``retry_after`` seconds, during which the remote is skipped
  (lookups are local only, uploads are dropped) instead of paying the timeout on every lookup. Calls already
  in flight when it opened fail with the same outage and are not reported again.
- **Miss memory**: a compile looks its key up twice (before and after its lock); a remote miss (or an
  object the service found corrupt) is remembered for ``MISS_TTL`` seconds, so one compile costs one remote
  request.
- **Uploads**: queued and sent by one background thread, so they never add to the compile that produced
  them; after an upload succeeds the entry is marked in its group, if it has one (entry/kinds.py), so a
  mark never names an entry that is not there yet. ``flush()`` waits for them, and at interpreter exit the
  drain waits up to ``EXIT_WAIT`` seconds (core/exits.py, after the writes that may queue more).
- **Fetching a group**: ``marked`` lists a group, ``fetch_many`` downloads in parallel, each within the
  timeout; the first failure opens the breaker and the downloads not started yet are skipped.
- **After an upload**: ``after_upload(key, callback)`` runs ``callback`` once ``key``'s queued upload has
  finished (landed or failed), or at once when none is queued: a compile lease (core/flight.py) is released
  only once its entry is on the remote, so the machines waiting for it find it there.
- **The budget**: with ``max_size`` given (core/budget.py), each upload that landed is followed, in the same
  thread, by its check: the remote's least recently used entries beyond the budget are evicted.
- **Other calls**: ``call(func, what)`` runs any other remote call (the fleet's leases) under the same deadline,
  breaker and reporting.

Failures are reported to ``on_failure(what, exc)`` (the service warns once and counts them), finished
uploads to ``on_upload(size)``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import runtime
from ..entry.keyshape import is_key
from ..store.remote import call_with_deadline
from . import exits

log = logging.getLogger("graphcache")

EXIT_WAIT = 60.0  # seconds the interpreter's exit waits for pending uploads, all tiers together
MAX_PENDING_BYTES = 2 * 2**30  # uploads queued beyond this are dropped (memory bound); the entry stays local
# A compile looks a key up twice (before and after taking its lock): a remote miss (or a corrupt object) is
# remembered this long, so that one compile costs one remote request and counts one remote error.
MISS_TTL = 2.0
FETCH_THREADS = 8  # parallel downloads of a group (each one within the remote timeout)


class CircuitBreaker:
    """Open for ``retry_after`` seconds after a failure: the remote is skipped while open."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        self._open_until = 0.0

    @property
    def closed(self) -> bool:
        return time.monotonic() >= self._open_until

    def trip(self) -> None:
        self._open_until = time.monotonic() + self.retry_after


class RemoteTier:
    """``remote`` (a store: store/remote.py, or any other) behind the policies of the module docstring."""

    def __init__(self, remote: Any, *, timeout: float, retry_after: float,
                 on_failure: Callable[[str, BaseException], None], on_upload: Callable[[int], None],
                 max_size: int | None = None) -> None:
        self.remote = remote
        self.name = str(getattr(remote, "url", remote))
        self.timeout = timeout
        self.breaker = CircuitBreaker(retry_after)
        self._breaker_lock = threading.Lock()
        self._on_failure = on_failure
        self._on_upload = on_upload
        self._missed: dict[str, float] = {}  # key -> monotonic time of its remote miss
        self._corrupt: set[str] = set()  # those of them that were there but failed their checks
        self._missed_lock = threading.Lock()
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, bytes, str | None]] = deque()
        self._pending = 0  # queued + in flight
        self._pending_bytes = 0
        self._worker: threading.Thread | None = None
        self._after: dict[str, list[Callable[[], None]]] = {}  # key queued or in flight -> run when it is done
        self.budget: Any = None  # core/budget.py's RemoteBudget, enforced after each upload
        if max_size and not self.read_only:
            from .budget import RemoteBudget

            self.budget = RemoteBudget(remote, max_size, timeout=timeout)

    def __repr__(self) -> str:
        return f"RemoteTier({self.name!r})"

    @property
    def read_only(self) -> bool:
        return bool(self.remote.read_only)

    def _call(self, func: Callable[[], Any], what: str) -> Any:
        return call_with_deadline(func, self.timeout, f"{what} on {self.name}")

    def call(self, func: Callable[[], Any], what: str) -> tuple[bool, Any]:
        """(True, ``func()``) within the deadline; (False, None) when the breaker is open or the call failed
        (reported as any remote failure: the breaker opens, the service warns once and counts)."""
        if not self.breaker.closed:
            return False, None
        try:
            return True, self._call(func, what)
        except Exception as exc:
            self._failed(what, exc)
            return False, None

    # -- reads ---------------------------------------------------------------------------------------------
    def fetch(self, key: str) -> bytes | None:
        """``key``'s remote bytes, unchecked; None when missing (remembered), skipped or failed (reported)."""
        if not is_key(key) or not self.breaker.closed or self._missed_recently(key):
            return None
        try:
            data = self._call(lambda: self.remote.read(key), f"reading {key}")
        except Exception as exc:
            self._failed(f"reading entry {key}", exc)
            return None
        if data is None:
            self.remember_miss(key)
        return data

    def remember_miss(self, key: str, corrupt: bool = False) -> None:
        """Treat ``key`` as missing for MISS_TTL seconds (a miss, or an object that failed its checks)."""
        now = time.monotonic()
        with self._missed_lock:
            if len(self._missed) >= 1024:
                self._missed = {k: t for k, t in self._missed.items() if now - t < MISS_TTL}
                self._corrupt &= self._missed.keys()
            self._missed[key] = now
            if corrupt:
                self._corrupt.add(key)
            else:
                self._corrupt.discard(key)

    def forget_miss(self, key: str) -> None:
        """Ask the remote again at the next lookup of ``key`` (another machine may have published it since);
        an object that failed its checks stays skipped (it would only fail, and count, again)."""
        with self._missed_lock:
            if key not in self._corrupt:
                self._missed.pop(key, None)

    def _missed_recently(self, key: str) -> bool:
        with self._missed_lock:
            when = self._missed.get(key)
            return when is not None and time.monotonic() - when < MISS_TTL

    def marked(self, group: str) -> list[str]:
        """The keys the remote lists in ``group``; [] when the remote is skipped or fails."""
        if not self.breaker.closed:
            return []
        try:
            return self._call(lambda: self.remote.marked(group), f"listing the group {group}")
        except Exception as exc:
            self._failed(f"listing the group {group}", exc)
            return []

    def fetch_many(self, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        """(key, unchecked bytes) of each of ``keys`` the remote has, downloaded in parallel."""
        wanted = [key for key in dict.fromkeys(keys) if is_key(key)]
        if not wanted or not self.breaker.closed:
            return
        with ThreadPoolExecutor(max_workers=min(FETCH_THREADS, len(wanted)),
                                thread_name_prefix="graphcache-fetch") as pool:
            for key, data in zip(wanted, pool.map(self.fetch, wanted), strict=True):
                if data is not None:
                    yield key, data

    def _failed(self, what: str, exc: BaseException) -> None:
        with self._breaker_lock:
            first = self.breaker.closed
            self.breaker.trip()
        if not first:  # in flight when an earlier failure opened the breaker: the same outage
            log.debug("graphcache: %s failed on %s too (%s: %s)", what, self.name, type(exc).__name__, exc)
            return
        self._on_failure(what, exc)

    # -- uploads -------------------------------------------------------------------------------------------
    def upload(self, key: str, data: bytes, group: str | None = None) -> None:
        """Queue ``data`` for upload under ``key`` (then marked in ``group``, if given)."""
        if self.read_only or not is_key(key):
            return
        if not self.breaker.closed:
            log.debug("graphcache: remote %s skipped (circuit open): not uploading %s", self.name, key)
            return
        with self._cond:
            if self._pending_bytes + len(data) > MAX_PENDING_BYTES:
                log.warning("graphcache: %d bytes of uploads pending: not uploading %s", self._pending_bytes, key)
                return
            self._queue.append((key, data, group))
            self._after.setdefault(key, [])
            self._pending += 1
            self._pending_bytes += len(data)
            if self._worker is None:
                _register(self)
                self._worker = threading.Thread(target=self._upload_loop, name="graphcache-upload", daemon=True)
                self._worker.start()

    def _upload_loop(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._worker = None
                    return
                key, data, group = self._queue.popleft()
            try:
                self._upload(key, data, group)
            finally:
                with self._cond:
                    callbacks = self._after.pop(key, [])
                for callback in callbacks:  # before the flush waiters wake: their process may exit next
                    _run_quietly(callback)
                with self._cond:
                    self._pending -= 1
                    self._pending_bytes -= len(data)
                    self._cond.notify_all()

    def after_upload(self, key: str, callback: Callable[[], None]) -> None:
        """Run ``callback`` once ``key``'s queued upload is done (landed or failed), or now if none is queued."""
        with self._cond:
            waiting = self._after.get(key)
            if waiting is not None:
                waiting.append(callback)
                return
        _run_quietly(callback)

    def _upload(self, key: str, data: bytes, group: str | None) -> None:
        if not self.breaker.closed:
            log.debug("graphcache: remote %s skipped (circuit open): not uploading %s", self.name, key)
            return
        start = time.perf_counter()
        try:
            self.remote.write(key, data)
        except Exception as exc:
            self._failed(f"uploading entry {key}", exc)
            return
        self._on_upload(len(data))
        log.info("graphcache: uploaded %s (%d bytes) to %s in %.2fs", key, len(data), self.name,
                 time.perf_counter() - start)
        if group is not None:
            try:
                self.remote.mark(group, key)
            except Exception as exc:  # the entry is up; only machines that fetch the group miss it
                self._failed(f"marking entry {key} in group {group}", exc)
        if self.budget is not None:
            self.budget.after_upload(key)

    @property
    def pending_uploads(self) -> int:
        with self._cond:
            return self._pending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for the queued uploads (at most ``timeout`` seconds); True when none is left pending."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)


def _run_quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # a bug in a callback must not stop the uploads
        log.warning("graphcache: a callback after an upload failed", exc_info=True)


# -- waiting for uploads at exit ------------------------------------------------------------------------------
def _register(tier: RemoteTier) -> None:
    """Track a tier with uploads; its uploads are waited for by the exit drain's last stage (exits.py),
    after the XLA sync and the background writes that may queue more."""
    with runtime.state.pending_lock:
        runtime.state.tiers.add(tier)
    exits.at_exit(exits.UPLOADS, flush_uploads)


def flush_uploads(wait: float | None = None) -> None:
    """Wait (at most ``wait``, default EXIT_WAIT, in all) for every tier's pending uploads."""
    deadline = time.monotonic() + (EXIT_WAIT if wait is None else wait)
    with runtime.state.pending_lock:
        tiers = list(runtime.state.tiers)
    for tier in tiers:
        if tier.flush(max(0.0, deadline - time.monotonic())):
            continue
        log.warning("graphcache: gave up waiting for %d upload(s) to %s at exit; those entries stay local",
                    tier.pending_uploads, tier.name)
