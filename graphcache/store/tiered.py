"""The tiered store: the local store in front of a shared remote one (remote.py).

- Read-through: a local miss asks the remote (bounded by a deadline). A remote entry is trusted only
  after it passed the same checks as a local read (core/checked.py); it is then written locally through GraphCache's
  normal write path (``write_entry``: atomic file, index row, size cap and eviction) and served. A corrupt
  remote object is a miss, counted in ``remote_errors`` and never stored. A compile looks its key up twice
  (before and after its lock): a remote miss is remembered for ``MISS_TTL`` seconds, so one compile costs
  one remote request.
- Write-through: an entry written locally (a new compile) is queued for upload, unless the remote is
  read-only here. Uploads run in a background thread, so they never add to the compile that produced
  them; ``flush()`` waits for them, and at interpreter exit they are waited for up to ``EXIT_WAIT``
  seconds (then abandoned, with a log line).
- Marker groups (remote.py): GraphCache injects ``marker_group``, the rule naming the group an entry is
  listed in (xla/markers.py: an XLA executable under its XLA identity). Once such an entry is uploaded, its
  marker is published in the same background job, so ``flush()`` covers both and a marker never names an
  entry that is not there yet. ``marked_keys`` lists a group and ``prefetch`` copies the entries the local
  store lacks, downloading in parallel and verifying each exactly as a read-through does (the XLA
  directory calls both at enable, before TensorFlow reads it).
- Fail open, cheaply: a remote that fails or does not answer within the timeout costs one warning per
  process and a ``remote_errors`` count, never a failed compile; the circuit breaker then skips the remote
  for ``retry_after`` seconds (lookups are local only, uploads are dropped) instead of paying the timeout
  on every lookup. After that the next call tries again (one failure re-opens the breaker). Calls that
  were already in flight when the breaker opened (parallel downloads, concurrent lookups) fail with the
  same outage: they are not counted or warned about again.

Everything else (locks, quarantine, scans, stale-version purges) is the local store's: remote entries are
managed explicitly (``graphcache ls --remote``, ``graphcache purge --remote``).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import filelock

from ..core import exits
from ..entry import codec
from ..entry.checked import check
from ..errors import CorruptEntryError
from .base import Store, StoredFile, split_hashed
from .local import LocalStore, is_key
from .remote import RemoteStore, call_with_deadline

log = logging.getLogger("graphcache")

EXIT_WAIT = 60.0  # seconds the interpreter's exit waits for pending uploads, all caches together
MAX_PENDING_BYTES = 2 * 2**30  # uploads queued beyond this are dropped (memory bound); the entry stays local
# A compile looks a key up twice (before and after taking its lock): a remote miss (or a corrupt object) is
# remembered this long, so that one compile costs one remote request and counts one remote error.
MISS_TTL = 2.0
PREFETCH_THREADS = 8  # parallel downloads of a prefetch (each one within the remote timeout)


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


class TieredStore(Store):
    """``local`` first, ``remote`` behind it. The callbacks come from GraphCache:

    ``store_fetched(header, payload)`` keeps a verified remote entry locally (GraphCache.write_entry),
    ``count(**deltas)`` adds to the persistent counters, ``warn(kind, message)`` warns once per process,
    ``marker_group(data)`` names the marker group an uploaded entry is listed in (None: not listed).
    Remote bytes are checked exactly as local ones (core/checked.py), with ``signing_key`` when one is set.
    """

    def __init__(self, local: LocalStore, remote: RemoteStore, *,
                 store_fetched: Callable[[codec.EntryHeader, bytes], object],
                 count: Callable[..., None], warn: Callable[[str, str], None],
                 signing_key: bytes | None = None, marker_group: Callable[[bytes], str | None] | None = None,
                 retry_after: float = 60.0) -> None:
        self.local = local
        self.remote = remote
        self.read_only = local.read_only
        self._store_fetched = store_fetched
        self._count = count
        self._warn = warn
        self._signing_key = signing_key
        self._marker_group = marker_group
        self.breaker = CircuitBreaker(retry_after)
        self._breaker_lock = threading.Lock()
        self._fetching = threading.local()
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, bytes]] = deque()
        self._pending = 0  # queued + in flight
        self._pending_bytes = 0
        self._worker: threading.Thread | None = None
        self._missed: dict[str, float] = {}  # key -> monotonic time of its remote miss
        self._missed_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TieredStore({self.local.root!s}, {self.remote.url!r})"

    # -- Store interface -----------------------------------------------------------------------------------
    def read(self, key: str) -> bytes | None:
        data = self.local.read(key)
        if data is not None or not self.breaker.closed or not is_key(key):
            return data
        return self._fetch(key)

    def read_parts(self, key: str, hasher: Any = None) -> tuple[bytes | memoryview, bytes | memoryview] | None:
        """The local file in two pieces (no copy of the payload); else the remote's copy, split in place."""
        parts = self.local.read_parts(key, hasher)
        if parts is not None or not self.breaker.closed or not is_key(key):
            return parts
        data = self._fetch(key)
        return None if data is None else split_hashed(data, hasher)

    def write(self, key: str, data: bytes) -> None:
        self.local.write(key, data)
        if getattr(self._fetching, "key", None) == key:
            return  # the local copy of an entry just fetched from the remote
        if not self.remote.read_only and is_key(key):
            self._enqueue(key, data)

    def delete(self, key: str) -> int:
        return self.local.delete(key)

    def scan(self) -> Iterator[StoredFile]:
        return self.local.scan()

    # -- the local store's extras (GraphCache uses them) ------------------------------------------------------
    @property
    def root(self) -> Path:
        return self.local.root

    def path_for(self, key: str) -> Path:
        return self.local.path_for(key)

    def lock_for(self, key: str, timeout: float) -> filelock.FileLock:
        return self.local.lock_for(key, timeout)

    def stat(self, key: str) -> StoredFile | None:
        return self.local.stat(key)

    def stray_temp_files(self, *args: Any, **kwargs: Any) -> list[Path]:
        return self.local.stray_temp_files(*args, **kwargs)

    def remove_stray_temp_files(self, *args: Any, **kwargs: Any) -> int:
        return self.local.remove_stray_temp_files(*args, **kwargs)

    # -- read-through --------------------------------------------------------------------------------------
    def _missed_recently(self, key: str) -> bool:
        with self._missed_lock:
            when = self._missed.get(key)
            return when is not None and time.monotonic() - when < MISS_TTL

    def _remember_miss(self, key: str) -> None:
        now = time.monotonic()
        with self._missed_lock:
            if len(self._missed) >= 1024:
                self._missed = {k: t for k, t in self._missed.items() if now - t < MISS_TTL}
            self._missed[key] = now

    def _fetch(self, key: str) -> bytes | None:
        if self._missed_recently(key):
            return None
        data = self._download(key)
        if data is None:
            return None
        entry = self._verified(key, data)
        if entry is None:
            return None
        self._keep(*entry)
        self._count(remote_hits=1)
        log.info("graphcache: fetched %s (%d bytes) from %s", key, len(data), self.remote.url)
        return data

    def _download(self, key: str) -> bytes | None:
        """``key``'s remote bytes, unchecked; None when missing (remembered), or the remote is skipped or failed."""
        if not self.breaker.closed:
            return None
        try:
            data = call_with_deadline(lambda: self.remote.read(key), self.remote.timeout,
                                      f"reading {key} from {self.remote.url}")
        except Exception as exc:
            self._remote_failed(f"reading entry {key}", exc)
            return None
        if data is None:
            self._remember_miss(key)
        return data

    def _verified(self, key: str, data: bytes) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        """The checked header and payload of remote bytes; None (counted, warned, remembered) when they fail."""
        try:
            entry = check(data, key, signing_key=self._signing_key)
        except CorruptEntryError as exc:
            self._remember_miss(key)
            self._count(remote_errors=1)
            self._warn("remote_corrupt", f"graphcache: remote entry {key} in {self.remote.url} is corrupt ({exc}); "
                                         "ignored it and compiling locally")
            return None
        return entry.header, entry.payload

    def _keep(self, header: codec.EntryHeader, payload: bytes) -> bool:
        """Store a verified remote entry locally (not uploaded back); False when it could not be stored."""
        self._fetching.key = header.key
        try:
            return self._store_fetched(header, payload) is not False
        finally:
            self._fetching.key = None

    # -- pulling a list of entries (a marker group) -----------------------------------------------------------
    def marked_keys(self, group: str) -> list[str]:
        """The keys the remote lists in a marker group (remote.py); [] when the remote is skipped or fails."""
        if not self.breaker.closed:
            return []
        try:
            return call_with_deadline(lambda: self.remote.marked_keys(group), self.remote.timeout,
                                      f"listing the marker group {group} in {self.remote.url}")
        except Exception as exc:
            self._remote_failed(f"listing the marker group {group}", exc)
            return []

    def prefetch(self, keys: Iterable[str]) -> list[str]:
        """Copy the entries of ``keys`` that the local store lacks from the remote; the keys stored.

        Each is verified as a read-through does (a corrupt or untrusted object is refused, counted in
        ``remote_errors`` and never stored) and stored with ``store_fetched``, in this thread. Downloads run
        in parallel, each within the remote timeout; the first failure opens the breaker and the downloads
        not started yet are skipped, so an outage costs one timeout.
        """
        wanted = [key for key in dict.fromkeys(keys) if is_key(key) and self.local.stat(key) is None]
        if not wanted or not self.breaker.closed:
            return []
        with ThreadPoolExecutor(max_workers=min(PREFETCH_THREADS, len(wanted)),
                                thread_name_prefix="graphcache-prefetch") as pool:
            return [key for key, data in zip(wanted, pool.map(self._download, wanted), strict=True)
                    if data is not None and self._take(key, data)]

    def _take(self, key: str, data: bytes) -> bool:
        entry = self._verified(key, data)
        if entry is None or not self._keep(*entry):
            return False
        log.info("graphcache: fetched %s (%d bytes) from %s", key, len(data), self.remote.url)
        return True

    def _remote_failed(self, what: str, exc: BaseException) -> None:
        with self._breaker_lock:
            first = self.breaker.closed
            self.breaker.trip()
        if not first:  # in flight when an earlier failure opened the breaker: the same outage
            log.debug("graphcache: %s failed on %s too (%s: %s)", what, self.remote.url, type(exc).__name__, exc)
            return
        self._count(remote_errors=1)
        self._warn("remote_error", f"graphcache: {what} failed on the remote cache {self.remote.url} "
                                   f"({type(exc).__name__}: {exc}); skipping the remote for "
                                   f"{self.breaker.retry_after:g}s, the local cache still works")

    # -- write-through -------------------------------------------------------------------------------------
    def _enqueue(self, key: str, data: bytes) -> None:
        if not self.breaker.closed:
            log.debug("graphcache: remote %s skipped (circuit open): not uploading %s", self.remote.url, key)
            return
        with self._cond:
            if self._pending_bytes + len(data) > MAX_PENDING_BYTES:
                log.warning("graphcache: %d bytes of uploads pending: not uploading %s", self._pending_bytes, key)
                return
            self._queue.append((key, data))
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
                key, data = self._queue.popleft()
            try:
                self._upload(key, data)
            finally:
                with self._cond:
                    self._pending -= 1
                    self._pending_bytes -= len(data)
                    self._cond.notify_all()

    def _upload(self, key: str, data: bytes) -> None:
        if not self.breaker.closed:
            log.debug("graphcache: remote %s skipped (circuit open): not uploading %s", self.remote.url, key)
            return
        start = time.perf_counter()
        try:
            self.remote.write(key, data)
        except Exception as exc:
            self._remote_failed(f"uploading entry {key}", exc)
            return
        self._count(uploads=1, upload_bytes=len(data))
        log.info("graphcache: uploaded %s (%d bytes) to %s in %.2fs", key, len(data), self.remote.url,
                 time.perf_counter() - start)
        group = None if self._marker_group is None else self._marker_group(data)
        if group is not None:
            self._publish_marker(group, key)

    def _publish_marker(self, group: str, key: str) -> None:
        """List an uploaded entry in its marker group, so other machines find it before they need it."""
        try:
            self.remote.publish_marker(group, key)
        except Exception as exc:  # the entry is up; only machines that pull the group miss it
            self._remote_failed(f"publishing the marker of entry {key} in group {group}", exc)

    @property
    def pending_uploads(self) -> int:
        with self._cond:
            return self._pending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for the queued uploads (at most ``timeout`` seconds); True when none is left pending."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)


# -- waiting for uploads at exit ------------------------------------------------------------------------------
_live: weakref.WeakSet[TieredStore] = weakref.WeakSet()
_live_lock = threading.Lock()


def _register(store: TieredStore) -> None:
    """Track a store with uploads; its uploads are waited for by the exit drain's last stage (exits.py),
    after the XLA sync and the background writes that may queue more."""
    with _live_lock:
        _live.add(store)
    exits.at_exit(exits.UPLOADS, flush_uploads)


def flush_uploads(wait: float | None = None) -> None:
    """Wait (at most ``wait``, default EXIT_WAIT, in all) for every store's pending uploads."""
    deadline = time.monotonic() + (EXIT_WAIT if wait is None else wait)
    with _live_lock:
        stores = list(_live)
    for store in stores:
        if store.flush(max(0.0, deadline - time.monotonic())):
            continue
        log.warning("graphcache: gave up waiting for %d upload(s) to %s at exit; those entries stay local",
                    store.pending_uploads, store.remote.url)
