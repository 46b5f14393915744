"""EntryService: one cache dir's entries, served fail-open. The TensorFlow-free half of GraphCache.

GraphCache (cache.py) adds compiling on top; everything that needs entries (graph hits and misses,
SavedModel aliases, XLA executables, tf.function graphs, bundles, pushes) goes through the public methods
here, so the checks, the index rows, the counters and the failure policy live in one place:

- ``read_entry(key, kind=...)`` / ``write_entry(header, payload)``: the one path to the stores for every
  entry kind. The local store is read first; a miss there asks the remote tier (tier.py: bytes only, within
  a deadline, behind a circuit breaker), whose bytes are verified here exactly as local ones, once, then
  kept locally through ``write_entry`` (atomic file, index row, size cap), counted and served. A remote
  object that fails its checks is a miss, counted in ``remote_errors`` and never kept. A new entry is
  queued for upload (and marked in its group, entry/kinds.py) unless the remote is read-only here;
- ``has_entry``, ``wait_for_entry``, ``entry_header``, ``pull_group``: what callers ask of the stores,
  within the store contract (store/base.py);
- ``count(**deltas)``, ``count_uncacheable(reason)``, ``failure(...)``, ``discard_corrupt(...)``,
  ``discard_untrusted(...)``, ``touch(key)``: counters and the fail-open policy (core/failures.py);
- ``start_write(...)`` / ``wait_for_writes()`` / ``flush()``: entries written in the background, the
  plugins' flush hooks (``hooks``, core/plugins.py) and uploads to the remote tier;
- ``management()`` and the calls built on it (``stats``, ``entries``, ``purge``, ``clear``, ``verify``).

Opening: a read-only cache (asked for, or a dir this process cannot write) serves hits without opening
the index at all (no last-use updates, no counters: a read-only mount is never written, not even SQLite's
``-shm`` file); management calls open it lazily.

The index is an accelerator, never a gate: the entry files are served without it. An unreadable index is
rebuilt from them (core/cachedir.py); a busy one (another process holds its write lock) costs one bounded
wait (``INDEX_WAIT``, at most ``lock_timeout``), after which that step goes on without it: counters are
kept in memory and written with the next write that gets through, rows and LRU order catch up later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..entry import codec, kinds
from ..entry.checked import CheckedEntry, check, read_checked
from ..errors import CacheIOError, CorruptEntryError, UntrustedEntryError
from ..store.local import LocalStore
from .background import BackgroundWrites
from .cachedir import (
    CacheDir,
    is_read_only_fs,
    resolve_cache_dir,
    row_from_header,
    tag_cache_dir,
    warn_if_shared_writable,
)
from .failures import STORAGE_ERRORS, fail_open, warn_once
from .index.database import CacheIndex, IndexBusyError, IndexCorruptError, IndexRow
from .plugins import Hooks
from .settings import CacheSettings
from .versioning import PurgeResult, purge_stale_versions

if TYPE_CHECKING:  # loaded where used: a remote only where one is configured, misses' records on writes
    from ..store.base import Store
    from .fleetlog import FleetLog
    from .flight import Fleet, FleetSide, Guard
    from .index import misses
    from .stats import Stats
    from .tier import RemoteTier

log = logging.getLogger("graphcache")

# An open records its version only when the manifest's last open of it is older than this or a tenth of
# stale_after (a day by default): every other open is a read, and no version in use looks stale.
VERSION_TOUCH = 3600.0
INDEX_WAIT = 10.0  # seconds a step waits for the index's write lock (bounded by lock_timeout), then goes on
# What a process without an index does: the truth for every "index failed" warning.
WITHOUT_INDEX = ("serving hits from the entry files and storing new ones, without the index (no LRU order, "
                 "size cap or counters in this process)")


class EntryService:
    """The entries of one cache dir, for one compiler ``version`` (an id such as ``tf2.21.0-1a2b3c4d``;
    ``version_info`` describes it in the index's manifest). Safe to share between threads and processes."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None, settings: CacheSettings, *, version: str,
                 version_info: dict[str, Any]) -> None:
        self.settings = settings
        self.strict = settings.strict
        self.read_only = settings.read_only
        self.disabled = settings.disabled
        self.identity_salt = settings.identity_salt
        self.on_version_change = settings.on_version_change
        self.stale_after = settings.stale_after
        self.lock_timeout = settings.lock_timeout
        self.max_size = settings.max_size
        self.max_age = settings.max_age
        self.signing_key = settings.signing_key  # HMAC-SHA256 of every entry when set (codec.py); never logged
        self.version = version
        self.version_info = version_info
        self.cache_dir = resolve_cache_dir(cache_dir)
        self.dir: CacheDir | None = None
        self.index: CacheIndex | None = None
        self.store = LocalStore(self.cache_dir, read_only=self.read_only)
        self.remote: Store | None = None  # store/remote.py's RemoteStore (fsspec) or store/redis.py's RedisStore
        self.tier: RemoteTier | None = None
        self.fleet: Fleet | None = None  # cross-host single flight (core/flight.py)
        self.fleet_side: FleetSide | None = None  # the fleet's Redis: leases, counters, misses (core/fleetlog.py)
        self.fleet_log: FleetLog | None = None
        if settings.remote and not self.disabled:
            from ..store import open_remote
            from .tier import RemoteTier

            self.remote = open_remote(settings.remote, version=version, options=settings.store_options(settings.remote),
                                      timeout=settings.remote_timeout, read_only=settings.remote_read_only)
            self.tier = RemoteTier(self.remote, timeout=settings.remote_timeout,
                                   retry_after=settings.remote_retry_after, on_failure=self._remote_failed,
                                   on_upload=lambda size: self.count(uploads=1, upload_bytes=size),
                                   max_size=settings.remote_max_size)  # the remote's budget (core/budget.py)
            from .flight import open_fleet

            self.fleet_side = open_fleet(settings, self.tier, version=version, on_failure=self._coordinator_failed)
            if self.fleet_side is not None:
                self.fleet, self.fleet_log = self.fleet_side.fleet, self.fleet_side.log
        self.hooks = Hooks()
        self.last_purge = PurgeResult(0, 0, ())
        self._writes = BackgroundWrites()
        self._pending: dict[str, float] = {}  # counts not yet written: the index was busy
        self._pending_lock = threading.Lock()
        warn_if_shared_writable(self.cache_dir)
        if not self.disabled and not self.read_only and not os.access(self.cache_dir, os.W_OK):
            # A read-only mount (or someone else's dir): serve hits, store nothing, say so once.
            reason = "read-only file system" if is_read_only_fs(self.cache_dir) else "permission denied"
            warn_once("read_only", f"graphcache: cache dir {self.cache_dir} is not writable ({reason}): serving "
                                   "hits only, nothing is stored; pass read_only=True (GRAPHCACHE_READ_ONLY=1) "
                                   "to say so and silence this")
            self.read_only = True
            self.store.read_only = True
        if not self.disabled and not self.read_only:
            self._open()

    @property
    def identity(self) -> dict[str, Any]:
        """The compiler identity entries are written under (GraphCache adds the device kind to it)."""
        return self.version_info

    @property
    def index_wait(self) -> float:
        """The longest one step waits for the index's write lock (or for another process's rebuild)."""
        return max(0.0, min(self.lock_timeout, INDEX_WAIT))

    def _management_dir(self) -> CacheDir:
        cache = CacheDir(self.cache_dir, read_only=self.read_only, heal=not self.read_only, timeout=self.index_wait)
        cache.own_version = (self.version, self.version_info)
        return cache

    def _open(self) -> None:
        """Open the index (rebuilding it when unreadable, core/cachedir.py) and do the housekeeping a
        writable cache does once per process: tag the dir, index the entry files when the index is new,
        record this version (hourly), purge stale versions, check the index against the files and remove
        temp files of dead writers when that is due (CacheDir.converge, hourly), evict by age."""
        try:
            self.dir = self._management_dir()
        except STORAGE_ERRORS as exc:
            self._index_failed("opening the cache index", exc)
            return
        self.index = self.dir.index
        if self.index is None:
            return
        try:
            tag_cache_dir(self.cache_dir)
            if self.index.created_now:
                self.dir.index_files()
            self.index.record_version(self.version, self.version_info,
                                      unless_within=min(VERSION_TOUCH, self.stale_after / 10))
            if self.on_version_change == "purge":
                self.last_purge = purge_stale_versions(self.index, self.dir.store, self.version, self.stale_after)
            self.dir.converge()
            if self.max_age is not None:
                self.dir.evict(max_age=self.max_age)
        except STORAGE_ERRORS as exc:
            self._index_failed("housekeeping on open", exc)

    def _index_failed(self, what: str, exc: BaseException) -> None:
        """An index operation failed: say so once, truthfully (hits are served either way)."""
        if isinstance(exc, IndexCorruptError):
            return  # CacheDir warned once about the unreadable index and what it did about it
        if isinstance(exc, IndexBusyError):
            if self.strict:
                raise CacheIOError(f"graphcache: {what} failed: the cache index is busy: {exc}") from exc
            warn_once("index_busy", f"graphcache: the cache index in {self.cache_dir} is busy ({exc}); this step "
                                    "goes on without it: hits are still served and new entries stored, while LRU "
                                    "order, the size cap and counters catch up once the index is free")
            return
        self.failure("io_error", f"{what}", exc, consequence=WITHOUT_INDEX if self.index is None else
                     "the cache is still used; the index catches up later", uncacheable=False)

    # -- counters and the fail-open policy -----------------------------------------------------------------
    def count(self, **deltas: float) -> None:
        """Add to the persistent counters (counters.py); a failing index warns once and is otherwise ignored.
        While the index is busy the counts wait in memory for the next write that gets through. With a fleet,
        they are also reported to it (batched, in the background: core/fleetlog.py), read-only or not."""
        if self.fleet_log is not None:
            self.fleet_log.count(deltas)
        if self.index is None or self.read_only:
            return
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for name, value in deltas.items():
            pending[name] = pending.get(name, 0) + value
        try:
            self.index.add_counters(pending)
        except IndexBusyError as exc:
            with self._pending_lock:
                for name, value in pending.items():
                    self._pending[name] = self._pending.get(name, 0) + value
            self._index_failed("updating the counters", exc)
        except IndexCorruptError:
            pass  # warned where it was found; these counts are lost with the old index's
        except STORAGE_ERRORS as exc:
            warn_once("stats", f"graphcache: could not update stats in {self.cache_dir}: {exc}")

    def count_lookup(self, kind: str, **deltas: float) -> None:
        """Count lookups of an entry kind (hits, misses, compiles, compile/saved seconds: counters.count_lookup)."""
        from .counters import count_lookup

        self.count(**count_lookup(kind, **deltas))

    def count_uncacheable(self, reason: str, errors: int = 0) -> None:
        """Count a lookup the cache could not serve, by reason (counters.REASONS)."""
        from .counters import UNCACHEABLE_PREFIX

        self.count(**{UNCACHEABLE_PREFIX + reason: 1, "errors": errors})

    def failure(self, reason: str, what: str, exc: BaseException, *,
                consequence: str = "compiling without the cache", uncacheable: bool = True) -> None:
        """A cache failure: raise in strict mode, else warn once (``reason`` is the warning's kind), count
        it (``errors``, and ``uncacheable.<reason>`` when ``uncacheable``) and carry on; ``consequence``
        says in the warning what happens instead."""
        fail_open(reason, what, exc, where=self.cache_dir, strict=self.strict, consequence=consequence)
        if uncacheable:
            self.count_uncacheable(reason, errors=1)
        else:
            self.count(errors=1)

    def discard_corrupt(self, key: str, exc: BaseException) -> None:
        """An entry failed a check: raise (strict) or warn once, count, and remove it so it is rebuilt."""
        self._discard(key, "corrupt_entry", f"is corrupt ({exc});", f"is corrupt: {exc}", cause=exc)

    def discard_untrusted(self, key: str, why: str) -> None:
        """An entry that decodes but must not be used (poisoned, unsigned): warn once, count, remove, rebuild."""
        self._discard(key, "untrusted_entry", f"rejected: {why};", f"rejected: {why}")

    def _discard(self, key: str, reason: str, warning: str, strict_message: str,
                 cause: BaseException | None = None) -> None:
        if self.strict:
            raise CacheIOError(f"graphcache: entry {key} {strict_message}") from cause
        warn_once(reason, f"graphcache: entry {key} in {self.cache_dir} {warning} removed it and compiling again")
        self.count_uncacheable(reason, errors=1)
        if not self.read_only:
            with contextlib.suppress(*STORAGE_ERRORS):
                self.store.delete(key)
                if self.index is not None:
                    self.index.remove([key])

    def touch(self, key: str, header: codec.EntryHeader | None = None, size: int = 0) -> None:
        """Record a use of ``key`` (its LRU position); a row the index lacks is re-added from ``header``.
        Best effort: an index failure warns once and is otherwise ignored. The fleet hears of it too (its LRU)."""
        if self.fleet_log is not None:
            self.fleet_log.used(key)
        if self.index is None or self.read_only:
            return
        try:
            if not self.index.touch(key) and header is not None:
                from .index import misses  # a row the index lacks: re-added as a write adds it

                misses.upsert_entry(self.index, row_from_header(header, size, time.time()), misses.graph_parts(header))
        except (IndexBusyError, IndexCorruptError) as exc:
            self._index_failed("recording a use", exc)
        except STORAGE_ERRORS as exc:
            warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")

    # -- entries -------------------------------------------------------------------------------------------
    def read_entry(self, key: str, kind: str | None = None) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        """A verified entry's header and payload, or None (missing, unreadable or corrupt: fail open; with
        ``kind``, an entry of another kind is a miss too).

        Records the use (LRU) but no hit: the caller counts a hit once the payload proved usable.
        """
        entry = self.read_checked(key)
        if entry is None:
            return None
        if kind is not None and entry.header.kind != kind:
            log.debug("graphcache: entry %s is a %r entry, not %r: a miss", key, entry.header.kind, kind)
            return None
        return entry.header, entry.payload

    def read_checked(self, key: str) -> CheckedEntry | None:
        """``read_entry`` with the entry file's bytes as stored (for callers that pass the file on): the
        local store's, else the remote tier's (verified, then kept locally)."""
        try:
            entry = read_checked(self.store, key, signing_key=self.signing_key)
        except STORAGE_ERRORS as exc:
            self.failure("io_error", f"reading entry {key}", exc)
            return None
        except UntrustedEntryError as exc:
            self.discard_untrusted(key, str(exc))
            return None
        except CorruptEntryError as exc:
            self.discard_corrupt(key, exc)
            return None
        if entry is not None:
            self.touch(key, entry.header, entry.size)
            return entry
        return self._fetch(key) if self.tier is not None else None

    def _fetch(self, key: str) -> CheckedEntry | None:
        """A local miss asks the remote: its bytes checked, kept locally (not uploaded back), counted."""
        assert self.tier is not None
        data = self.tier.fetch(key)
        entry = None if data is None else self._checked_remote(key, data)
        if entry is None:
            return None
        self.write_entry(entry.header, entry.payload, share=False)
        self.count(remote_hits=1, fetch_bytes=len(data))
        log.info("graphcache: fetched %s (%d bytes) from %s", key, len(data), self.tier.name)
        return entry

    def _checked_remote(self, key: str, data: bytes) -> CheckedEntry | None:
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

    def _remote_failed(self, what: str, exc: BaseException) -> None:
        """The remote failed (the tier reports its first failure of an outage): warn once, count, go on."""
        assert self.tier is not None
        self.count(remote_errors=1)
        warn_once("remote_error", f"graphcache: {what} failed on the remote cache {self.tier.name} "
                                  f"({type(exc).__name__}: {exc}); skipping the remote for "
                                  f"{self.tier.breaker.retry_after:g}s, the local cache still works")

    def _coordinator_failed(self, what: str, exc: BaseException) -> None:
        assert self.fleet_side is not None
        self.count(remote_errors=1)
        warn_once("coordinator_error", f"graphcache: {what} failed on the coordinator {self.fleet_side.tier.name} "
                                       f"({type(exc).__name__}: {exc}); compiling without waiting for other "
                                       f"machines for {self.fleet_side.tier.breaker.retry_after:g}s")

    # -- single flight: this host's lock, then the fleet's lease (core/flight.py) ---------------------------
    def compile_guard(self, key: str) -> Guard:
        """A Guard holding ``key``'s local compile lock; ``guard.local`` is None when taking it failed
        (reported, fail open: the caller compiles without storing)."""
        from .flight import Guard

        try:
            lock = self.store.lock(key, self.lock_timeout)
            if lock is not None:
                lock.acquire()
        except TimeoutError as exc:
            self.failure("lock_timeout", f"waiting {self.lock_timeout:.0f}s for the compile lock", exc)
            lock = None
        except STORAGE_ERRORS as exc:
            self.failure("io_error", "taking the compile lock", exc)
            lock = None
        return Guard(key, lock, self.tier)

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
            entry = self._checked_remote(key, data)
            if entry is not None and self.write_entry(entry.header, entry.payload, share=False):
                log.info("graphcache: fetched %s (%d bytes) from %s", key, len(data), self.tier.name)
                stored.append(key)
        return stored

    def write_entry(self, header: codec.EntryHeader, payload: bytes | memoryview, *, share: bool = True) -> bool:
        """Store an entry atomically, index it and enforce the size cap; False when it could not be stored.
        ``share``: queue it for upload to the remote tier (not for what was just fetched from there)."""
        if self.read_only or self.disabled:
            return False
        try:
            parts = codec.encode_parts(header, payload, signing_key=self.signing_key)
            self.store.write_parts(header.key, parts)
        except STORAGE_ERRORS as exc:
            self.failure("io_error", f"writing entry {header.key}", exc)
            return False
        size = sum(len(part) for part in parts)
        self.count(bytes_written=size)
        if self.index is not None and self.dir is not None:
            from .index import misses

            try:
                misses.upsert_entry(self.index, row_from_header(header, size, header.created),
                                    misses.graph_parts(header))
                self.dir.evict(max_size=self.max_size, max_age=self.max_age, keep=header.key)
            except (IndexBusyError, IndexCorruptError) as exc:
                self._index_failed("indexing a new entry", exc)
            except STORAGE_ERRORS as exc:
                warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")
        if share and self.tier is not None and not self.tier.read_only:
            self.tier.upload(header.key, b"".join(parts), kinds.group_of(header))
            if self.fleet_log is not None:
                self.fleet_log.published(header)
        return True

    def has_entry(self, key: str) -> bool:
        """Whether the local store holds ``key``'s entry (nothing is read or checked)."""
        try:
            return self.store.stat(key) is not None
        except STORAGE_ERRORS:
            return False

    def wait_for_entry(self, key: str) -> bool:
        """Whether ``key``'s entry is stored, once a compile of it in progress has finished. A compile
        holds the key's lock until its entry is stored (cache.py, background.py), so taking the lock waits
        for exactly that, from any thread or process (``wait_for_writes`` waits for every write)."""
        if not self.has_entry(key):
            try:
                lock = self.store.lock(key, self.lock_timeout)
                if lock is not None:
                    with lock:
                        pass
            except (TimeoutError, *STORAGE_ERRORS):
                return False
        return self.has_entry(key)

    def may_hold(self, kind: str) -> bool:
        """Whether a lookup of an entry of ``kind`` (this version) could find one: False only when there is no
        remote tier and the index holds no such row, so a caller can skip computing an expensive key for a
        lookup that must miss (a first-ever run on an empty cache). Unsure (no index, an index error): True."""
        if self.tier is not None or self.index is None:
            return True
        try:
            return bool(self.index.rows("kind = ? AND version = ?", (kind, self.version), order="key LIMIT 1"))
        except STORAGE_ERRORS:
            return True

    def entry_header(self, key: str) -> codec.EntryHeader | None:
        """A local entry's header, read alone (no payload, no checks beyond the header's own), or None."""
        try:
            head = self.store.read_head(key)
            return None if head is None else codec.peek_header(head)
        except (CorruptEntryError, *STORAGE_ERRORS):
            return None

    # -- what explains misses (core/index/misses.py) ---------------------------------------------------------
    def _explain_index(self) -> CacheIndex | None:
        if self.index is not None:
            return self.index
        if self.disabled:
            return None
        return self.management().index  # a read-only cache: its index opened read-only, for explain

    def nearest_entries(self, name: str, parts: dict[str, str], *, exclude: str = "", limit: int = 1,
                        everything: bool = False) -> tuple[list[misses.Candidate], int]:
        """The cached graph entries nearest a graph (see misses.nearest), and how many more there were;
        nothing when the index fails (fail open: an explanation is never worth a failed run)."""
        from .index import misses

        try:
            index = self._explain_index()
            if index is None:
                return [], 0
            return misses.nearest(index, name, parts, exclude=exclude, limit=limit, everything=everything,
                                  header_of=self.entry_header)
        except (IndexBusyError, IndexCorruptError) as exc:
            self._index_failed("finding the entries nearest a miss", exc)
        except STORAGE_ERRORS as exc:
            warn_once("index", f"graphcache: could not read the index in {self.cache_dir}: {exc}")
        return [], 0

    def version_description(self, version: str) -> dict[str, Any] | None:
        """What the index's manifest says about a compiler version (None: unknown, or no index)."""
        try:
            index = self._explain_index()
            found = index.versions().get(version) if index is not None else None
        except (IndexBusyError, IndexCorruptError, *STORAGE_ERRORS):
            return None
        return found[0] if found is not None else None

    def record_miss(self, miss: misses.Miss, parts: dict[str, str] | None = None) -> None:
        """Add ``miss`` to the index's bounded table of recent misses (best effort, like the counters), and with
        a fleet to its list too, with the graph's key ``parts`` (its nearest entry is found fleet-wide)."""
        if self.fleet_log is not None:
            self.fleet_log.missed({**miss.__dict__, "differs": list(miss.differs), "parts": parts or {},
                                   "version": self.version, "identity": self.identity})
        if self.index is None or self.read_only:
            return
        from .index import misses

        try:
            misses.record(self.index, miss)
        except (IndexBusyError, IndexCorruptError) as exc:
            self._index_failed("recording a miss", exc)
        except STORAGE_ERRORS as exc:
            warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")

    def start_write(self, func: Callable[..., Any], *args: Any, lock: Any = None,
                    gate: threading.Event | None = None, grace: float = 0.0) -> None:
        """Run ``func(*args)`` (an entry write) in the background once ``gate`` is set or ``grace`` seconds
        have passed, then release ``lock``, if one is handed over (background.py)."""
        self._writes.start(func, *args, lock=lock, gate=gate, grace=grace)

    @property
    def pending_writes(self) -> int:
        """Entries this cache is still writing in the background."""
        return self._writes.pending

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait for entries this cache is writing in the background (big misses, see background.py);
        True when none is left."""
        return self._writes.wait(timeout)

    @property
    def pending_uploads(self) -> int:
        """Entries queued for upload to the remote tier (0 without one)."""
        return 0 if self.tier is None else self.tier.pending_uploads

    def flush(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds in all) for background writes, then run the plugins' flush hooks
        (new XLA executables become entries, so they are uploaded too), then wait for uploads to the
        remote; True when nothing is left pending.

        Uploads are also waited for at interpreter exit (up to a minute); call this where a process must not
        end before its entries are shared, e.g. at the end of a CI job that warms the remote.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        written = self.wait_for_writes(timeout)
        self.hooks.flush()
        if self.tier is None:
            return written
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        uploaded = self.tier.flush(left)
        if self.fleet_log is not None:  # best effort: counters are not entries (a failed push is kept)
            self.fleet_log.push()
        return uploaded and written

    # -- management (the TF-free CacheDir) -------------------------------------------------------------------
    def management(self) -> CacheDir:
        """The cache dir's management view, with what this cache just wrote listed, counted and purgeable."""
        self.wait_for_writes()
        if self.dir is None:
            self.dir = self._management_dir()
            self.index = self.dir.index
        return self.dir

    def stats(self) -> Stats:
        return self.management().stats(current_version=self.version, max_size=self.max_size)

    def entries(self) -> list[IndexRow]:
        return self.management().entries()

    def purge(self, keys: list[str] | None = None, *, all: bool = False, stale: bool = False,
              older_than: float | str | None = None, max_size: int | str | None = None,
              filters: list[str] | tuple[str, ...] = (), dry_run: bool = False) -> PurgeResult:
        """Remove entries, with the CLI's selections (see CacheDir.plan_purge); returns what was freed."""
        return self.management().purge(keys, all=all, stale=stale, older_than=older_than, max_size=max_size,
                                       filters=filters, current_version=self.version, dry_run=dry_run)

    def clear(self) -> PurgeResult:
        return self.management().purge(all=True)

    def verify(self, fix: bool = False) -> list[tuple[str, str]]:
        """Check every entry's format and checksum: a list of (key, problem). ``fix`` removes bad ones."""
        return self.management().verify(fix=fix)

    def close(self) -> None:
        """Release the index connection (a closed cache reopens it lazily for management calls)."""
        self.wait_for_writes()
        if self.index is not None:
            self.index.close()
        self.index = None
        self.dir = None
