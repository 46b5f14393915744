"""Single flight across machines: one compile of a key in the whole fleet, coordinated by leases in Redis.

A miss already takes the key's local lock (cache.py): one compile per host. With a Redis remote, or a
coordinator beside another remote (``GRAPHCACHE_COORDINATOR``), the compiling process then takes the key's
lease too; the order is fixed so that every wait is bounded and nothing waits on itself::

    local lock -> re-check local -> lease (or wait for it) -> re-check local and remote -> compile
      -> store locally -> release the local lock -> upload -> release the lease

- **Taking**: ``SET lease token NX PX ttl`` (store/redis.py). The token names the holder (host, pid and a
  random part) for the log line of whoever waits.
- **Holding**: a thread renews the lease every ``ttl / 3`` seconds while the compile runs. A holder that dies
  (SIGKILL, a lost machine) stops renewing and its lease expires within ``LEASE_TTL`` seconds; a waiter takes
  it over. The lease is released only once the entry's upload is done (tier.after_upload), so a waiter that
  sees the lease free finds the entry on the remote.
- **Waiting**: a process that finds the lease taken polls (every ``POLL_FIRST`` s, backing off to ``POLL_MAX``)
  for the entry on the remote and for the lease to come free; either ends the wait, and the caller looks
  the entry up again before compiling.
- **Hedging**: a holder still renewing after ``hedge`` seconds (a slow machine, a stuck process) lets one
  waiter compile too: from then on the waiters also try a second lease, the hedge, so that a slow holder
  costs one extra compile, not one per waiter.
- **Bounds**: nobody waits past the lock timeout (then it compiles, warned as a local lock timeout is); a
  Redis failure ends the wait at once, through the tier's breaker (one warning, ``remote_errors``).

Correctness never rests on a lease: entries are content-addressed and verified on every read, so a lease
lost (expired under a paused holder, Redis restarted empty) costs at most one extra compile, never a wrong
entry. That is why the token only guards renewing and releasing and fences no write.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # a miss without a remote loads this module (Guard) but never the remote tier
    from collections.abc import Callable

    from .settings import CacheSettings
    from .tier import RemoteTier

log = logging.getLogger("graphcache")

LEASE_TTL = 6.0  # seconds: how long a dead holder blocks the key (renewed every LEASE_TTL / 3 while alive)
POLL_FIRST = 0.05  # seconds between a waiter's first looks; each next wait is 1.5 times longer...
POLL_MAX = 0.5  # ...up to this


class Lease:
    """A held lease, renewed by a daemon thread until ``release()`` (idempotent)."""

    def __init__(self, fleet: Fleet, key: str, token: str, hedge: bool) -> None:
        self.fleet, self.key, self.token, self.hedge = fleet, key, token, hedge
        self._stop = threading.Event()
        self._released = False
        self._lock = threading.Lock()
        threading.Thread(target=self._renew, name="graphcache-lease", daemon=True).start()

    def _renew(self) -> None:
        fleet = self.fleet
        while not self._stop.wait(fleet.ttl / 3):
            ok, held = fleet.coordinator.call(
                lambda: fleet.leases.renew_lease(self.key, self.token, fleet.ttl, self.hedge),
                f"renewing the lease on {self.key}")
            if ok and not held:  # expired under us (a long pause) or Redis restarted empty: compile on anyway
                log.info("graphcache: the lease on %s was lost; another machine may compile it too", self.key)
                return

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._stop.set()
        fleet = self.fleet
        fleet.coordinator.call(lambda: fleet.leases.release_lease(self.key, self.token, self.hedge),
                               f"releasing the lease on {self.key}")


class Claim(NamedTuple):
    """What waiting for a key's lease ended with: the lease (None: not held), whether the remote may hold the
    entry now (look again before compiling), and whether the wait ran out of time."""

    lease: Lease | None
    recheck: bool
    timed_out: bool = False


class Fleet:
    """The leases of one cache: ``leases`` (a store answering store/base.py's Leases) behind ``coordinator``
    (its tier: deadline, breaker, reporting); ``entries`` is the tier the entries are published to."""

    def __init__(self, leases: Any, coordinator: RemoteTier, entries: RemoteTier, *, timeout: float,
                 hedge: float, ttl: float = LEASE_TTL) -> None:
        self.leases, self.coordinator, self.entries = leases, coordinator, entries
        self.timeout, self.hedge, self.ttl = timeout, hedge, ttl

    def __repr__(self) -> str:
        return f"Fleet({self.coordinator.name!r})"

    def _take(self, key: str, token: str, hedge: bool) -> bool | None:
        """True: taken; False: someone holds it; None: the coordinator failed (reported)."""
        ok, taken = self.coordinator.call(lambda: self.leases.acquire_lease(key, token, self.ttl, hedge),
                                          f"taking the lease on {key}")
        return bool(taken) if ok else None

    def _published(self, key: str) -> bool | None:
        """Whether the entry is on the remote now (None: the remote failed, reported)."""
        ok, found = self.entries.call(lambda: self.entries.remote.stat(key), f"looking up {key}")
        return found is not None if ok else None

    def claim(self, key: str) -> Claim:
        """Take ``key``'s lease, or wait until its holder published the entry, died or overran the hedge."""
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        start = time.monotonic()
        delay, waited = POLL_FIRST, False
        while True:
            hedging = time.monotonic() - start >= self.hedge
            for hedge in (False, True) if hedging else (False,):
                taken = self._take(key, token, hedge)
                if taken is None:
                    return Claim(None, waited)
                if taken:
                    if hedge:
                        log.info("graphcache: %s is still being compiled elsewhere after %.0fs: compiling it here "
                                 "too", key, self.hedge)
                    return Claim(Lease(self, key, token, hedge), True)
            if not waited:
                ok, holder = self.coordinator.call(lambda: self.leases.lease_holder(key), f"reading the lease on {key}")
                log.info("graphcache: %s is being compiled by %s; waiting for its entry", key, holder if ok else "?")
                waited = True
            published = self._published(key)
            if published is None or published:
                return Claim(None, bool(published))
            if time.monotonic() - start >= self.timeout:
                return Claim(None, True, timed_out=True)
            time.sleep(delay)
            delay = min(delay * 1.5, POLL_MAX)


class FleetSide(NamedTuple):
    """What a cache with a remote has of the fleet: the Redis holding leases, counters and misses (``store``,
    behind ``tier``: the remote's own tier when the remote is Redis), the leases (``fleet``: None on a
    read-only remote) and the counters' report (``log``, core/fleetlog.py)."""

    store: Any
    tier: RemoteTier
    fleet: Fleet | None
    log: Any


def open_fleet(settings: CacheSettings, entries: RemoteTier, *, version: str,
               on_failure: Callable[[str, BaseException], None]) -> FleetSide | None:
    """Leases in the Redis remote itself, or in the coordinator beside another remote (behind a tier of its
    own, reporting to ``on_failure``); None when neither is configured. A read-only remote gets no leases (it
    would hold leases it never fulfils) but still reports its counters."""
    from ..store import open_remote
    from ..store.urls import is_redis
    from .fleetlog import FleetLog
    from .tier import RemoteTier

    if not (settings.coordinator or is_redis(settings.remote)):
        return None
    leases, coordinator = entries.remote, entries
    if settings.coordinator:
        if not is_redis(settings.coordinator):
            raise ValueError(f"coordinator {settings.coordinator!r}: use a redis:// or rediss:// URL")
        leases = open_remote(settings.coordinator, version=version, timeout=settings.remote_timeout,
                             options=settings.store_options(settings.coordinator))
        coordinator = RemoteTier(leases, timeout=settings.remote_timeout, retry_after=settings.remote_retry_after,
                                 on_failure=on_failure, on_upload=lambda size: None)
    fleet = None if entries.read_only else Fleet(leases, coordinator, entries, timeout=settings.lock_timeout,
                                                 hedge=settings.fleet_hedge)
    return FleetSide(leases, coordinator, fleet, FleetLog(leases, coordinator, uses=coordinator is entries))


class Guard:
    """What one compile holds: this host's lock (``local``; None when taking it failed), then the fleet's
    lease (``lease``). ``release()`` frees the local lock first (this host's waiters then load the local entry)
    and the lease once the entry's upload is done, so machines waiting for it find it on the remote."""

    def __init__(self, key: str, local: Any, tier: RemoteTier | None = None) -> None:
        self.key, self.local, self.tier = key, local, tier
        self.lease: Lease | None = None

    def release(self) -> None:
        try:
            local, self.local = self.local, None
            if local is not None:
                local.release()
        finally:
            lease, self.lease = self.lease, None
            if lease is not None and self.tier is not None:
                self.tier.after_upload(self.key, lease.release)
            elif lease is not None:
                lease.release()
