"""EntryService: one cache dir's entries, served fail-open. The TensorFlow-free half of GraphCache.

GraphCache (cache.py) adds compiling on top; everything that needs entries (graph hits and misses,
SavedModel aliases, XLA executables, tf.function graphs, bundles, the remote tier) goes through the
public methods here, so the checks, the index rows, the counters and the failure policy live in one place:

- ``read_entry(key)`` / ``write_entry(header, payload)``: the one path to the store for every entry kind;
- ``count(**deltas)``, ``count_uncacheable(reason)``, ``failure(...)``, ``discard_corrupt(...)``,
  ``discard_untrusted(...)``, ``touch(key)``: counters and the fail-open policy (core/failures.py);
- ``start_write(...)`` / ``wait_for_writes()`` / ``flush()``: entries written in the background and
  uploads to the remote tier;
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
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..entry import codec
from ..entry.checked import CheckedEntry, read_checked
from ..errors import CacheIOError, CorruptEntryError, UntrustedEntryError
from ..store import LocalStore, RemoteStore, Store, TieredStore
from .background import BackgroundWrites
from .cachedir import (
    CacheDir,
    is_read_only_fs,
    resolve_cache_dir,
    row_from_header,
    tag_cache_dir,
    warn_if_shared_writable,
)
from .failures import STORAGE_ERRORS, warn_once
from .index import misses
from .index.database import CacheIndex, IndexBusyError, IndexCorruptError, IndexRow
from .index.rebuild import remove_stale_builds
from .settings import CacheSettings
from .stats import UNCACHEABLE_PREFIX, Stats
from .versioning import PurgeResult, purge_stale_versions

INDEX_WAIT = 10.0  # seconds a step waits for the index's write lock (bounded by lock_timeout), then goes on
# What a process without an index does: the truth for every "index failed" warning.
WITHOUT_INDEX = ("serving hits from the entry files and storing new ones, without the index (no LRU order, "
                 "size cap or counters in this process)")


class EntryService:
    """The entries of one cache dir, for one compiler ``version`` (an id such as ``tf2.21.0-1a2b3c4d``;
    ``version_info`` describes it in the index's manifest). Safe to share between threads and processes."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None, settings: CacheSettings, *, version: str,
                 version_info: dict[str, Any], marker_group: Callable[[bytes], str | None] | None = None) -> None:
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
        self.remote: RemoteStore | None = None
        self.store: Store = self._build_store(marker_group)
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

    def _build_store(self, marker_group: Callable[[bytes], str | None] | None) -> Store:
        """The local store, behind a remote tier when one is configured (store/tiered.py: read-through,
        background write-through, fail open). ``marker_group``: which uploaded entries get a remote marker
        (the XLA rule, xla/markers.py; injected so the store layer knows no entry kind)."""
        local = LocalStore(self.cache_dir, read_only=self.read_only)
        settings = self.settings
        if not settings.remote or self.disabled:
            return local
        self.remote = RemoteStore(settings.remote, version=self.version, options=settings.remote_options,
                                  timeout=settings.remote_timeout, read_only=settings.remote_read_only)
        return TieredStore(local, self.remote, store_fetched=self.write_entry, count=self.count, warn=warn_once,
                           signing_key=self.signing_key, marker_group=marker_group,
                           retry_after=settings.remote_retry_after)

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
        record this version, purge stale versions, remove temp files of dead writers, check the index
        against the files when that is due (CacheDir.converge), evict by age."""
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
            self.index.record_version(self.version, self.version_info)
            if self.on_version_change == "purge":
                self.last_purge = purge_stale_versions(self.index, self.dir.store, self.version, self.stale_after)
            self.dir.store.remove_stray_temp_files()
            remove_stale_builds(self.cache_dir)
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
        """Add to the persistent counters (stats.py); a failing index warns once and is otherwise ignored.
        While the index is busy the counts wait in memory for the next write that gets through."""
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

    def count_uncacheable(self, reason: str, errors: int = 0) -> None:
        """Count a lookup the cache could not serve, by reason (stats.REASONS)."""
        self.count(**{UNCACHEABLE_PREFIX + reason: 1, "errors": errors})

    def failure(self, reason: str, what: str, exc: BaseException, *,
                consequence: str = "compiling without the cache", uncacheable: bool = True) -> None:
        """A cache failure: raise in strict mode, else warn once (``reason`` is the warning's kind), count
        it (``errors``, and ``uncacheable.<reason>`` when ``uncacheable``) and carry on; ``consequence``
        says in the warning what happens instead."""
        if self.strict:
            raise CacheIOError(f"graphcache: {what} failed: {type(exc).__name__}: {exc}") from exc
        warn_once(reason, f"graphcache: {what} failed in {self.cache_dir} ({type(exc).__name__}: {exc}); "
                          f"{consequence}")
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
        Best effort: an index failure warns once and is otherwise ignored."""
        if self.index is None or self.read_only:
            return
        try:
            if not self.index.touch(key) and header is not None:
                misses.upsert_entry(self.index, row_from_header(header, size, time.time()), misses.graph_parts(header))
        except (IndexBusyError, IndexCorruptError) as exc:
            self._index_failed("recording a use", exc)
        except STORAGE_ERRORS as exc:
            warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")

    # -- entries -------------------------------------------------------------------------------------------
    def read_entry(self, key: str) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        """A verified entry's header and payload, or None (missing, unreadable or corrupt: fail open).

        Records the use (LRU) but no hit: the caller counts a hit once the payload proved usable.
        """
        entry = self.read_checked(key)
        return None if entry is None else (entry.header, entry.payload)

    def read_checked(self, key: str) -> CheckedEntry | None:
        """``read_entry`` with the entry file's bytes as stored (for callers that pass the file on)."""
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

    def write_entry(self, header: codec.EntryHeader, payload: bytes | memoryview) -> bool:
        """Store an entry atomically, index it and enforce the size cap; False when it could not be stored."""
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
            try:
                misses.upsert_entry(self.index, row_from_header(header, size, header.created),
                                    misses.graph_parts(header))
                self.dir.evict(max_size=self.max_size, max_age=self.max_age, keep=header.key)
            except (IndexBusyError, IndexCorruptError) as exc:
                self._index_failed("indexing a new entry", exc)
            except STORAGE_ERRORS as exc:
                warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")
        return True

    # -- what explains misses (core/misses.py) ---------------------------------------------------------------
    def entry_header(self, key: str) -> codec.EntryHeader | None:
        """An entry's header, read alone (no payload, no checks beyond the header's own), or None."""
        try:
            return codec.read_header(str(self.store.path_for(key)))
        except (CorruptEntryError, *STORAGE_ERRORS):
            return None

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

    def record_miss(self, miss: misses.Miss) -> None:
        """Add ``miss`` to the index's bounded table of recent misses (best effort, like the counters)."""
        if self.index is None or self.read_only:
            return
        try:
            misses.record(self.index, miss)
        except (IndexBusyError, IndexCorruptError) as exc:
            self._index_failed("recording a miss", exc)
        except STORAGE_ERRORS as exc:
            warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")

    def start_write(self, func: Callable[..., Any], *args: Any, lock: Any, gate: threading.Event | None = None,
                    grace: float = 0.0) -> None:
        """Run ``func(*args)`` (an entry write) in the background once ``gate`` is set or ``grace`` seconds
        have passed, then release ``lock`` (background.py)."""
        self._writes.start(func, *args, lock=lock, gate=gate, grace=grace)

    @property
    def pending_writes(self) -> int:
        """Entries this cache is still writing in the background."""
        return self._writes.pending

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait for entries this cache is writing in the background (big misses, see background.py);
        True when none is left."""
        return self._writes.wait(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds in all) for background writes, then for uploads to the remote;
        True when nothing is left pending.

        Uploads are also waited for at interpreter exit (up to a minute); call this where a process must not
        end before its entries are shared, e.g. at the end of a CI job that warms the remote.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        written = self.wait_for_writes(timeout)
        if not isinstance(self.store, TieredStore):
            return written
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self.store.flush(left) and written

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
