"""The remote side of the entry service: the remote tier's reads (verified like local ones), its failures,
the fleet's lease and the groups pulled from the remote.

A part of EntryService (core/service.py), which inherits it: kept apart because a cache without a remote
never runs any of it (the remote's modules load only where one is configured).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..entry.checked import CheckedEntry, check
from ..errors import CorruptEntryError
from .failures import warn_once

if TYPE_CHECKING:
    from ..entry import codec
    from ..store.base import Store
    from .fleetlog import FleetLog
    from .flight import Fleet, FleetSide, Guard
    from .settings import CacheSettings
    from .tier import RemoteTier

log = logging.getLogger("graphcache")


class RemoteSide:
    """EntryService's remote tier and fleet (both None without a remote)."""

    remote: Store | None  # store/remote.py's RemoteStore (fsspec) or store/redis.py's RedisStore
    tier: RemoteTier | None
    fleet: Fleet | None  # cross-host single flight (core/flight.py)
    fleet_side: FleetSide | None  # the fleet's Redis: leases, counters, misses (core/fleetlog.py)
    fleet_log: FleetLog | None

    if TYPE_CHECKING:  # EntryService's, which this is a part of
        version: str
        disabled: bool
        read_only: bool
        lock_timeout: float
        signing_key: bytes | None

        def count(self, **deltas: float) -> None: ...
        def failure(self, reason: str, what: str, exc: BaseException, *, consequence: str = ...,
                    uncacheable: bool = ...) -> None: ...
        def write_entry(self, header: codec.EntryHeader, payload: bytes | memoryview, *,
                        share: bool = ...) -> bool: ...
        def has_entry(self, key: str) -> bool: ...

    def open_remote(self, settings: CacheSettings) -> None:
        """Open the remote tier and the fleet's coordinator, where ``settings`` configure them."""
        self.remote = None
        self.tier = None
        self.fleet = None
        self.fleet_side = None
        self.fleet_log = None
        if settings.remote and not self.disabled:
            from ..store import open_remote
            from .tier import RemoteTier

            self.remote = open_remote(settings.remote, version=self.version, options=settings.store_options(settings.remote),
                                      timeout=settings.remote_timeout, read_only=settings.remote_read_only)
            self.tier = RemoteTier(self.remote, timeout=settings.remote_timeout,
                                   retry_after=settings.remote_retry_after, on_failure=self.remote_failed,
                                   on_upload=lambda size: self.count(uploads=1, upload_bytes=size),
                                   max_size=settings.remote_max_size)  # the remote's budget (core/budget.py)
            from .flight import open_fleet

            self.fleet_side = open_fleet(settings, self.tier, version=self.version, on_failure=self.coordinator_failed)
            if self.fleet_side is not None:
                self.fleet, self.fleet_log = self.fleet_side.fleet, self.fleet_side.log

    def fetch_remote(self, key: str) -> CheckedEntry | None:
        """A local miss asks the remote: its bytes checked, kept locally (not uploaded back), counted."""
        assert self.tier is not None
        data = self.tier.fetch(key)
        entry = None if data is None else self.checked_remote(key, data)
        if entry is None:
            return None
        self.write_entry(entry.header, entry.payload, share=False)
        self.count(remote_hits=1, fetch_bytes=len(data))
        log.info("graphcache: fetched %s (%d bytes) from %s", key, len(data), self.tier.name)
        return entry

    def checked_remote(self, key: str, data: bytes) -> CheckedEntry | None:
        """Remote bytes that passed every check a local read passes; None (counted, warned, remembered as a
        miss) when they fail one."""
        assert self.tier is not None
        try:
            return check(data, key, signing_key=self.signing_key)
        except CorruptEntryError as exc:  # untrusted entries included
            self.tier.remember_miss(key, corrupt=True)
            self.count(remote_errors=1)
            warn_once("remote_corrupt", f"graphcache: remote entry {key} in {self.tier.name} is corrupt ({exc}); "
                                        "ignored it and compiling locally")
            return None

    def remote_failed(self, what: str, exc: BaseException) -> None:
        """The remote failed (the tier reports its first failure of an outage): warn once, count, go on."""
        assert self.tier is not None
        self._tier_failed("remote_error", f"the remote cache {self.tier.name}", what, exc,
                          f"skipping the remote for {self.tier.breaker.retry_after:g}s, the local cache still works")

    def coordinator_failed(self, what: str, exc: BaseException) -> None:
        """The coordinator failed (as remote_failed): compiles stop waiting for other machines meanwhile."""
        assert self.fleet_side is not None
        tier = self.fleet_side.tier
        self._tier_failed("coordinator_error", f"the coordinator {tier.name}", what, exc,
                          f"compiling without waiting for other machines for {tier.breaker.retry_after:g}s")

    def _tier_failed(self, kind: str, where: str, what: str, exc: BaseException, consequence: str) -> None:
        self.count(remote_errors=1)
        warn_once(kind, f"graphcache: {what} failed on {where} ({type(exc).__name__}: {exc}); {consequence}")

    def join_fleet(self, guard: Guard) -> bool:
        """Take the fleet's lease on ``guard.key`` (kept in ``guard.lease``) or wait for the machine that holds
        it; True when the remote may hold the entry now: look it up again before compiling."""
        if self.fleet is None:
            return False
        claim = self.fleet.claim(guard.key)
        if claim.timed_out:
            self.failure("lock_timeout", f"waiting {self.lock_timeout:.0f}s for another machine's compile of "
                         f"{guard.key}", TimeoutError("the lease was still held"), consequence="compiling it here")
        guard.lease = claim.lease
        if claim.recheck and self.tier is not None:
            self.tier.forget_miss(guard.key)
        return claim.recheck

    def pull_group(self, group: str) -> list[str]:
        """Copy the entries the remote lists in ``group`` (entry/kinds.py) that the local store lacks; the
        keys stored. Each is verified as a remote read is (a corrupt or untrusted object is refused, counted
        and never kept); an outage costs one timeout and one warning."""
        if self.tier is None or self.read_only:
            return []
        wanted = [key for key in self.tier.marked(group) if not self.has_entry(key)]
        stored = []
        for key, data in self.tier.fetch_many(wanted):
            entry = self.checked_remote(key, data)
            if entry is not None and self.write_entry(entry.header, entry.payload, share=False):
                log.info("graphcache: fetched %s (%d bytes) from %s", key, len(data), self.tier.name)
                stored.append(key)
        return stored
