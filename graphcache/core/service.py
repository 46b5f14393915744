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

Opening: ``GraphCache(dir)`` checks the dir (writable, shared) and nothing more. The index (sqlite3
included) opens at the first operation that needs it (``open_index``: a write, a miss's record, explain,
management), with the once-per-process housekeeping. A hit needs none: the use and the count it owes the
index wait in memory and are written off the caller's path (core/usage.py). A read-only cache (asked for, or
a dir this process cannot write) never opens it to write (no last-use updates, no counters: a read-only
mount is never written, not even SQLite's ``-shm`` file); management calls open it read-only.

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
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ..entry import codec, kinds
from ..entry.checked import CheckedEntry, read_checked
from ..errors import CacheIOError, CorruptEntryError, UntrustedEntryError
from ..store.local import LocalStore
from . import failures
from .background import BackgroundWrites, time_left
from .dirchecks import is_read_only_fs, warn_if_shared_writable
from .failures import fail_open, warn_once
from .plugins import Hooks
from .remoteside import RemoteSide
from .settings import CacheSettings, resolve_cache_dir
from .usage import PendingUsage, Use, write_all, write_usage

# Loaded where used: the index (and sqlite3) when it opens (open_index), a remote only where one is configured,
# misses' records on writes. ``except failures.STORAGE_ERRORS`` names sqlite3's errors only once one is raised.
if TYPE_CHECKING:
    from .cachedir import CacheDir
    from .flight import Guard
    from .index import misses
    from .index.database import CacheIndex, IndexRow
    from .stats import Stats
    from .versioning import PurgeResult

log = logging.getLogger("graphcache")

# An open records its version only when the manifest's last open of it is older than this or a tenth of
# stale_after (a day by default): every other open is a read, and no version in use looks stale.
VERSION_TOUCH = 3600.0
# Seconds a lookup waits for this process's own background write of the same entry (then: a miss, as before)
IN_FLIGHT_WAIT = 5.0
INDEX_WAIT = 10.0  # seconds a step waits for the index's write lock (bounded by lock_timeout), then goes on
# What a process without an index does: the truth for every "index failed" warning.
WITHOUT_INDEX = ("serving hits from the entry files and storing new ones, without the index (no LRU order, "
                 "size cap or counters in this process)")


# may_hold compares at most this many of the caller's own keys with the index's rows (one row each): past it,
# the answer is "maybe" and the caller computes its key as it would without the check.
MAY_HOLD_BESIDES = 256


class EntryService(RemoteSide):
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
        self._dir: CacheDir | None = None  # the index's management view, once open_index opened it
        self._opened = False  # open_index has run (whatever came of it)
        self._opening = False  # ... and is running, in the thread that holds _open_lock
        self._open_lock = threading.RLock()
        self.store = LocalStore(self.cache_dir, read_only=self.read_only)
        self.usage = PendingUsage(self._write_usage)  # what hits owe the index: uses, counts (core/usage.py)
        self.open_remote(settings)  # the remote tier and the fleet, where configured (core/remoteside.py)
        self.hooks = Hooks()
        self._last_purge: PurgeResult | None = None  # set by _open when it purged
        self._writes = BackgroundWrites()
        warn_if_shared_writable(self.cache_dir)
        if not self.disabled and not self.read_only and not os.access(self.cache_dir, os.W_OK):
            # A read-only mount (or someone else's dir): serve hits, store nothing, say so once.
            reason = "read-only file system" if is_read_only_fs(self.cache_dir) else "permission denied"
            warn_once("read_only", f"graphcache: cache dir {self.cache_dir} is not writable ({reason}): serving "
                                   "hits only, nothing is stored; pass read_only=True (GRAPHCACHE_READ_ONLY=1) "
                                   "to say so and silence this")
            self.read_only = True
            self.store.read_only = True

    @property
    def identity(self) -> dict[str, Any]:
        """The compiler identity entries are written under (GraphCache adds the device kind to it)."""
        return self.version_info

    @property
    def index_wait(self) -> float:
        """The longest one step waits for the index's write lock (or for another process's rebuild)."""
        return max(0.0, min(self.lock_timeout, INDEX_WAIT))

    def _management_dir(self) -> CacheDir:
        from .cachedir import CacheDir

        # No quick check at open: it reads every page of the index, every process would pay it (converge and
        # verify check the pages; an operation that meets damage rebuilds the index). A read-only view cannot
        # rebuild: it checks at open, to list the entry files instead of failing later.
        cache = CacheDir(self.cache_dir, read_only=self.read_only, heal=not self.read_only, timeout=self.index_wait,
                         quick_check=self.read_only)
        cache.own_version = (self.version, self.version_info)
        return cache

    def open_index(self) -> CacheDir | None:
        """The cache dir's management view with its index (``dir``; ``index`` is its index), opened by the
        first call: the first operation that needs the index, not ``GraphCache(dir)`` nor a hit. Threads race
        here safely: one opens, the others wait for it. None: a read-only or disabled cache (management()
        opens a read-only view), or opening failed (warned once; the run goes on without the index)."""
        if not self._opened:
            with self._open_lock:
                if not self._opened and not self._opening:  # _opening: a call from within _open itself
                    self._opening = True
                    try:
                        if not (self.disabled or self.read_only):
                            self._open()
                    finally:
                        self._opening = False
                        self._opened = True
        return self._dir

    @property
    def dir(self) -> CacheDir | None:
        return self.open_index()

    @property
    def index(self) -> CacheIndex | None:
        opened = self.open_index()
        return None if opened is None else opened.index

    @property
    def last_purge(self) -> PurgeResult:
        """What opening the index purged (stale versions, ``on_version_change="purge"``): reading it opens it."""
        from .versioning import PurgeResult

        self.open_index()
        return self._last_purge or PurgeResult(0, 0, ())

    def _open(self) -> None:
        """Open the index (rebuilding it when unreadable, core/cachedir.py) and do the housekeeping a
        writable cache does once per process: tag the dir, index the entry files when the index is new,
        record this version (hourly), purge stale versions, check the index against the files and remove
        temp files of dead writers when that is due (CacheDir.converge, hourly), evict by age."""
        from .dirchecks import tag_cache_dir
        from .versioning import purge_stale_versions

        try:
            self._dir = opened = self._management_dir()
        except failures.STORAGE_ERRORS as exc:
            self._index_failed("opening the cache index", exc)
            return
        index = opened.index
        if index is None:
            return
        try:
            tag_cache_dir(self.cache_dir)
            if index.created_now:
                opened.index_files()
            index.record_version(self.version, self.version_info,
                                 unless_within=min(VERSION_TOUCH, self.stale_after / 10))
            if self.on_version_change == "purge":
                self._last_purge = purge_stale_versions(index, opened.store, self.version, self.stale_after)
            opened.converge()
            if self.max_age is not None:
                opened.evict(max_age=self.max_age)
        except failures.STORAGE_ERRORS as exc:
            self._index_failed("housekeeping on open", exc)

    def _index_failed(self, what: str, exc: BaseException) -> None:
        """An index operation failed: say so once, truthfully (hits are served either way)."""
        from .index.database import IndexBusyError, IndexCorruptError

        if isinstance(exc, IndexCorruptError):
            return  # CacheDir warned once about the unreadable index and what it did about it
        if isinstance(exc, IndexBusyError):
            if self.strict:
                raise CacheIOError(f"graphcache: {what} failed: the cache index is busy: {exc}") from exc
            warn_once("index_busy", f"graphcache: the cache index in {self.cache_dir} is busy ({exc}); this step "
                                    "goes on without it: hits are still served and new entries stored, while LRU "
                                    "order, the size cap and counters catch up once the index is free")
            return
        without = self._dir is None or self._dir.index is None  # not self.index: this may run inside the open
        self.failure("io_error", f"{what}", exc, consequence=WITHOUT_INDEX if without else
                     "the cache is still used; the index catches up later", uncacheable=False)

    def _index_step_failed(self, what: str, exc: BaseException, verb: str = "update") -> None:
        """A best-effort index step failed: a busy or unreadable index as _index_failed says, else warn once."""
        from .index.database import IndexBusyError, IndexCorruptError

        if isinstance(exc, IndexBusyError | IndexCorruptError):
            self._index_failed(what, exc)
        else:
            warn_once("index", f"graphcache: could not {verb} the index in {self.cache_dir}: {exc}")

    # -- counters and the fail-open policy -----------------------------------------------------------------
    def count(self, **deltas: float) -> None:
        """Add to the persistent counters (counters.py): kept in memory and written off the caller's path
        with the uses (core/usage.py: in the background, at flush(), management calls and exit). With a
        fleet, they are also reported to it (batched, in the background: core/fleetlog.py), read-only or not."""
        if self.fleet_log is not None:
            self.fleet_log.count(deltas)
        if not (self.read_only or self.disabled):
            self.usage.count(deltas)

    def _write_usage(self, counts: dict[str, float], uses: dict[str, Use]) -> None:
        """Write what lookups owe the index (PendingUsage calls this, off the caller's path), opening the index
        first if nothing did. Fail open: a failing index warns once; while it is busy the counts wait for the
        next write that gets through."""
        index = self.index
        if index is None:
            return  # no index in this process: these are lost with it, as they always were
        from .index.database import IndexBusyError, IndexCorruptError

        try:
            write_usage(index, counts, uses, self.has_entry)
        except IndexBusyError as exc:
            self.usage.give_back(counts, uses)
            if not self.strict:  # strict raises to a caller, and none waits for this write
                self._index_failed("updating the counters", exc)
        except IndexCorruptError:
            pass  # warned where it was found; these counts are lost with the old index's
        except failures.STORAGE_ERRORS as exc:
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
            with contextlib.suppress(*failures.STORAGE_ERRORS):
                self.store.delete(key)
                index = self.index
                if index is not None:
                    index.remove([key])

    def touch(self, key: str, header: codec.EntryHeader | None = None, size: int = 0) -> None:
        """Record a use of ``key`` (its LRU position); a row the index lacks is re-added from ``header``.
        Written off the caller's path with the counts (core/usage.py); best effort. The fleet hears of it
        too (its LRU)."""
        if self.fleet_log is not None:
            self.fleet_log.used(key)
        if not (self.read_only or self.disabled):
            self.usage.use(key, header, size)

    # -- entries -------------------------------------------------------------------------------------------
    def read_entry(self, key: str, kind: str | None = None) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        """A verified entry's header and payload, or None (missing, unreadable or corrupt: fail open; with
        ``kind``, an entry of another kind is a miss too).

        Records the use (LRU) but no hit: the caller counts a hit once the payload proved usable. An entry this
        process is writing in the background is waited for first (background.py: ``wait_for_key``).
        """
        self._writes.wait_for_key(key, IN_FLIGHT_WAIT)
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
        except failures.STORAGE_ERRORS as exc:
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
        return self.fetch_remote(key) if self.tier is not None else None

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
        except failures.STORAGE_ERRORS as exc:
            self.failure("io_error", "taking the compile lock", exc)
            lock = None
        return Guard(key, lock, self.tier)

    def write_entry(self, header: codec.EntryHeader, payload: bytes | memoryview, *, share: bool = True) -> bool:
        """Store an entry atomically, index it and enforce the size cap; False when it could not be stored.
        ``share``: queue it for upload to the remote tier (not for what was just fetched from there)."""
        if self.read_only or self.disabled:
            return False
        try:
            parts = codec.encode_parts(header, payload, signing_key=self.signing_key)
            self.store.write_parts(header.key, parts)
        except failures.STORAGE_ERRORS as exc:
            self.failure("io_error", f"writing entry {header.key}", exc)
            return False
        size = sum(len(part) for part in parts)
        self.count(bytes_written=size)
        opened = self.open_index()  # the first write in this process opens the index
        if opened is not None and opened.index is not None:
            from .index import misses
            from .index.schema import row_from_header

            try:
                misses.upsert_entry(opened.index, row_from_header(header, size, header.created),
                                    misses.graph_parts(header))
                opened.evict(max_size=self.max_size, max_age=self.max_age, keep=header.key)
            except failures.STORAGE_ERRORS as exc:
                self._index_step_failed("indexing a new entry", exc)
        if share and self.tier is not None and not self.tier.read_only:
            self.tier.upload(header.key, b"".join(parts), kinds.group_of(header))
            if self.fleet_log is not None:
                self.fleet_log.published(header)
        return True

    def has_entry(self, key: str) -> bool:
        """Whether the local store holds ``key``'s entry (nothing is read or checked)."""
        try:
            return self.store.stat(key) is not None
        except failures.STORAGE_ERRORS:
            return False

    def wait_for_entry(self, key: str) -> bool:
        """Whether ``key``'s entry is stored, once a compile of it in progress has finished: this process's
        background writes are waited for, then the key's lock, which a compile holds until its entry is
        stored (cache.py, background.py), so that waits for another process's compile. (A first-ever run's
        miss holds its fast key's lock instead: another process waiting on the canonical key's sees it free.)"""
        if not self.has_entry(key):  # this process's own background write of it (under any key's lock)
            self._writes.wait(self.lock_timeout)
        if not self.has_entry(key):
            try:
                lock = self.store.lock(key, self.lock_timeout)
                if lock is not None:
                    with lock:
                        pass
            except (TimeoutError, *failures.STORAGE_ERRORS):
                return False
        return self.has_entry(key)

    def holds_nothing(self) -> bool:
        """True when no lookup can find an entry: no remote tier, and the local store holds no entry file (a
        first-ever run). Read from the store's directory, not the index (which is not opened for it)."""
        if self.tier is not None:
            return False
        try:
            return self.store.is_empty()
        except failures.STORAGE_ERRORS:
            return False

    def may_hold(self, kind: str, besides: Collection[str] = ()) -> bool:
        """Whether a lookup of an entry of ``kind`` (this version) could find one other than the keys in
        ``besides`` (those the caller wrote itself): False only when there is no remote tier and the store
        holds no entry, or the index no such row, so a caller can skip computing an expensive key for a
        lookup that must miss (a first-ever run). Unsure (no index, an index error, ``besides`` too many to
        compare cheaply): True."""
        if self.tier is not None or len(besides) > MAY_HOLD_BESIDES:
            return True
        if not besides and self.holds_nothing():
            return False  # an empty store (a first-ever run) needs no index to say so
        index = self.index
        if index is None:
            return True
        try:
            rows = index.rows("kind = ? AND version = ?", (kind, self.version), order=f"key LIMIT {len(besides) + 1}")
        except failures.STORAGE_ERRORS:
            return True
        return any(row.key not in besides for row in rows)

    def entry_header(self, key: str) -> codec.EntryHeader | None:
        """A local entry's header, read alone (no payload, no checks beyond the header's own), or None."""
        try:
            head = self.store.read_head(key)
            return None if head is None else codec.peek_header(head)
        except (CorruptEntryError, *failures.STORAGE_ERRORS):
            return None

    # -- what explains misses (core/index/misses.py) ---------------------------------------------------------
    def _explain_index(self) -> CacheIndex | None:
        index = self.index
        if index is not None:
            return index
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
        except failures.STORAGE_ERRORS as exc:
            self._index_step_failed("finding the entries nearest a miss", exc, verb="read")
        return [], 0

    def version_description(self, version: str) -> dict[str, Any] | None:
        """What the index's manifest says about a compiler version (None: unknown, or no index)."""
        try:
            index = self._explain_index()
            found = index.versions().get(version) if index is not None else None
        except failures.STORAGE_ERRORS:  # the index's own errors included
            return None
        return found[0] if found is not None else None

    def record_miss(self, miss: misses.Miss, parts: dict[str, str] | None = None) -> None:
        """Add ``miss`` to the index's bounded table of recent misses (best effort, like the counters), and with
        a fleet to its list too, with the graph's key ``parts`` (its nearest entry is found fleet-wide)."""
        if self.fleet_log is not None:
            self.fleet_log.missed({**miss.__dict__, "differs": list(miss.differs), "parts": parts or {},
                                   "version": self.version, "identity": self.identity})
        index = None if self.read_only else self.index
        if index is None:
            return
        from .index import misses

        try:
            misses.record(index, miss)
        except failures.STORAGE_ERRORS as exc:
            self._index_step_failed("recording a miss", exc)

    def start_write(self, func: Callable[..., Any], *args: Any, lock: Any = None,
                    gate: threading.Event | None = None, grace: float = 0.0, key: str | None = None) -> None:
        """Run ``func(*args)`` (an entry write) in the background once ``gate`` is set or ``grace`` seconds
        have passed, then release ``lock``, if one is handed over (background.py); ``key``: the entry it writes,
        which ``read_entry`` waits for meanwhile."""
        self._writes.start(func, *args, lock=lock, gate=gate, grace=grace, key=key)

    @property
    def pending_writes(self) -> int:
        """Entries this cache is still writing in the background."""
        return self._writes.pending

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait for entries this cache is writing in the background (big misses, see background.py), then
        write what lookups owe the index (core/usage.py); True when none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        written = self._writes.wait(timeout)
        return self.usage.wait(time_left(deadline)) and written

    @property
    def pending_uploads(self) -> int:
        """Entries queued for upload to the remote tier (0 without one)."""
        return 0 if self.tier is None else self.tier.pending_uploads

    def flush(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds in all) for background writes, then run the plugins' flush hooks
        (new XLA executables become entries, so they are uploaded too), then wait for uploads to the
        remote, then write what lookups owe the index (core/usage.py); True when nothing is left pending.

        Uploads are also waited for at interpreter exit (up to a minute); call this where a process must not
        end before its entries are shared, e.g. at the end of a CI job that warms the remote.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        written = self.wait_for_writes(timeout)
        self.hooks.flush()
        uploaded = True
        if self.tier is not None:
            uploaded = self.tier.flush(time_left(deadline))
            if self.fleet_log is not None:  # best effort: counters are not entries (a failed push is kept)
                self.fleet_log.push()
        # what the hooks and the uploads counted
        counted = self.usage.wait(time_left(deadline))
        return uploaded and written and counted

    # -- management (the TF-free CacheDir) -------------------------------------------------------------------
    def management(self) -> CacheDir:
        """The cache dir's management view, with what this cache just wrote listed, counted and purgeable."""
        self.wait_for_writes()
        write_all()  # what other caches of this process owe the index too (their hits show in these stats)
        opened = self.open_index()
        if opened is None:  # a read-only cache (or opening failed: this raises what it raises)
            with self._open_lock:
                if self._dir is None:
                    self._dir = self._management_dir()
                opened = self._dir
        return opened

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
        """Release the index connection (a closed cache opens it again when an operation needs it)."""
        self.wait_for_writes()
        with self._open_lock:
            if self._dir is not None and self._dir.index is not None:
                self._dir.index.close()
            self._dir, self._opened = None, False
