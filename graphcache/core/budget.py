"""The remote's size budget (``GRAPHCACHE_REMOTE_MAX_SIZE``): beyond it, the entries the whole fleet used least
recently are evicted from the remote, by whichever host just uploaded (and by ``purge --remote --max-size``).

The order is the fleet's last use of each entry:

- **Redis**: a sorted set the store keeps (store/redis.py): publishing and every remote read set an entry's
  score, and each host's local hits are pushed into it, batched (core/fleetlog.py). The total is kept beside it
  (one counter updated with every publish and delete), so a check after an upload is one ``GET``, and an
  eviction reads only the oldest ``BATCH`` members: bounded work whatever the remote holds.
- **An fsspec remote** (S3, GCS, a shared dir) has no last use, only each object's last-modified time: the
  order is that (the oldest upload goes first), and the total needs a listing, so a host checks at most once
  per ``SCAN_EVERY`` seconds.

Enforced after an upload, in the upload thread (never in a compile); fail open: an eviction that fails is
logged and retried after the next upload, never reported as the remote failing (the breaker stays closed).
The entry just uploaded is never evicted by its own writer. Entries are content-addressed and verified on
read, so evicting one that another host is reading costs that host a miss, never a wrong entry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

log = logging.getLogger("graphcache")

BATCH = 64  # least recently used entries read per step (Redis)
MAX_EVICT = 1000  # entries one check removes at most (the next upload's check goes on)
SCAN_EVERY = 60.0  # seconds between two listings of an fsspec remote by one process
DEADLINE = 60.0  # seconds one eviction step may take (listing a big bucket takes longer than a lookup)


class Evicted(NamedTuple):
    count: int
    bytes: int


def plan(files: Iterable[Any], max_size: int, *, last_use: dict[tuple[str, str], float] | None = None,
         keep: Iterable[str] = ()) -> list[Any]:
    """The entries to remove, least recently used first, so that the rest fits in ``max_size`` bytes.
    ``files``: RemoteFile-like (key, size, mtime, version); ``last_use``: (version, key) -> time, else mtime."""
    uses = last_use or {}
    kept = set(keep)
    files = list(files)
    total = sum(f.size for f in files)
    doomed = []
    for f in sorted(files, key=lambda f: (uses.get((f.version, f.key), f.mtime), f.key)):
        if total <= max_size:
            break
        if f.key in kept:
            continue
        doomed.append(f)
        total -= f.size
    return doomed


class RemoteBudget:
    """``max_size`` bytes on ``store`` (a RedisStore, or a RemoteStore); ``after_upload(key)`` enforces it."""

    def __init__(self, store: Any, max_size: int, *, timeout: float) -> None:
        self.store, self.max_size = store, max_size
        self.deadline = max(DEADLINE, timeout)
        self.tracked = hasattr(store, "least_recent")  # Redis keeps the order and the total
        self._last_scan = float("-inf")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteBudget({self.max_size} bytes on {getattr(self.store, 'url', self.store)!r})"

    def after_upload(self, key: str) -> Evicted:
        """Evict beyond the budget (bounded work); what was evicted. Never raises."""
        from ..store.remote import call_with_deadline

        if not self._lock.acquire(blocking=False):
            return Evicted(0, 0)  # another upload of this process is enforcing it now
        try:
            step = self._tracked_step if self.tracked else self._scanned_step
            return call_with_deadline(lambda: step(key), self.deadline, "enforcing the remote budget")
        except Exception as exc:  # fail open: the budget is retried after the next upload
            log.warning("graphcache: enforcing the remote budget on %s failed (%s: %s); retried after the next "
                        "upload", getattr(self.store, "url", self.store), type(exc).__name__, exc)
            return Evicted(0, 0)
        finally:
            self._lock.release()

    def _tracked_step(self, key: str) -> Evicted:
        count = freed = rounds = 0
        used = self.store.used_bytes()
        while used > self.max_size and count < MAX_EVICT and rounds <= MAX_EVICT // BATCH:
            rounds += 1
            batch = [f for f in self.store.least_recent(BATCH + 1) if f.key != key]
            if not batch:
                break
            doomed = []
            for f in batch:
                if used <= self.max_size:
                    break
                doomed.append(f)
                used -= f.size
            removed, size = self.store.remove(doomed)
            count, freed = count + removed, freed + size
            used = self.store.used_bytes()
        return self._said(Evicted(count, freed))

    def _scanned_step(self, key: str) -> Evicted:
        now = time.monotonic()
        if now - self._last_scan < SCAN_EVERY:
            return Evicted(0, 0)
        self._last_scan = now
        doomed = plan(self.store.scan(), self.max_size, keep=[key])[:MAX_EVICT]
        return self._said(Evicted(*self.store.remove(doomed))) if doomed else Evicted(0, 0)

    def _said(self, evicted: Evicted) -> Evicted:
        if evicted.count:
            log.info("graphcache: evicted %d least recently used entries (%d bytes) from %s to keep it under "
                     "%d bytes", evicted.count, evicted.bytes, getattr(self.store, "url", self.store), self.max_size)
        return evicted
