"""CacheDir: one cache directory's files, index and counters, managed without TensorFlow.

The CLI's ``ls``, ``stats``, ``show``, ``purge`` and ``verify`` work through this class only, so they
never import TensorFlow (which alone takes seconds to import). The current compiler version comes
from the index's manifest (the version most recently opened by a GraphCache).

The index heals here: one found unreadable, at open or by any later operation, is rebuilt from the entry
files (core/index/rebuild.py) with one warning, and the operation goes on on the new index. ``converge`` is the
periodic open-time check of the index against the files; ``audit`` (``verify``) checks everything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..store.local import LocalStore
from .failures import warn_once
from .index.database import INDEX_ERRORS, INDEX_FILE, CacheIndex, IndexCorruptError, IndexRow
from .index.schema import META_CHECKED
from .index.schema import row_from_header as row_from_header
from .settings import resolve_cache_dir as resolve_cache_dir
from .units import parse_size
from .versioning import PurgeResult, purge_stale_versions

if TYPE_CHECKING:  # loaded by the calls that use them (management: purge, ls, stats, verify; rebuilds)
    from .filters import Filter
    from .index.audit import VerifyReport
    from .index.rebuild import Rebuild
    from .selection import Selection
    from .stats import Stats

log = logging.getLogger("graphcache")

CHECK_EVERY = 3600.0  # seconds between open-time checks of the index against the entry files, per cache dir
HEAL_RETRY = 60.0  # seconds before a process tries again to rebuild an index it could not rebuild


class CacheDir:
    """The files of a cache dir and its index.

    An index SQLite cannot read (at open or later) is rebuilt from the entry files when ``heal`` (default:
    when the dir is writable; ``read_only`` concerns the entries, not this), with one warning (``warn``).
    Otherwise ``problem`` says what is wrong and ``index`` is an index in memory built from the entry files
    (a read-only view), or None for a writable cache (which then serves its entry files without an index).
    ``timeout``: the longest wait for the index's write lock, and for another process's rebuild.
    ``quick_check``: run SQLite's quick check when the index opens (core/index/database.py): the CLI's views
    do; a GraphCache does not (its damage is found by the operation that reads it, or by ``converge``).
    """

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False, index: CacheIndex | None = None,
                 heal: bool | None = None, warn: bool = True, timeout: float = 60.0, quick_check: bool = True) -> None:
        self.root = Path(root)
        self.read_only = read_only
        self.quick_check = quick_check
        self.store = LocalStore(self.root, read_only=read_only)
        self.heal = os.access(self.root, os.W_OK) if heal is None else heal
        self.warn = warn
        self.timeout = timeout
        self.problem = ""  # why the index on disk is unusable, while it is not rebuilt
        self.rebuilt: Rebuild | None = None  # what opening did about an unreadable index
        self.own_version: tuple[str, dict] | None = None  # (version, description) recorded after a rebuild
        self._retry_heal_at = 0.0
        if warn:  # a cache dir on NFS, CIFS, Lustre, ...: say once how to share safely instead
            from .filesystems import warn_if_network

            warn_if_network(self.root)
        self.index: CacheIndex | None = index if index is not None else self._open_index()
        if self.index is not None and not self.index.available:
            self.index = None
        if self.index is not None and not self.index.memory:
            self.index.on_corrupt = self._corrupt_handler()

    def index_files(self) -> int:
        """Index the entry files into a new index (``index.created_now``: a first open, an index deleted or
        emptied); returns how many were indexed, and warns when an existing index file was found empty."""
        if self.store.is_empty():  # a new cache dir: nothing to index (and no audit to load)
            return 0
        added, _ = self.reconcile()
        if added and self.index is not None and self.index.was_empty and self.warn:
            warn_once("index_corrupt", f"graphcache: the cache index {self.index_path} was empty (truncated?); "
                                       f"indexed the {added} entry files again, counters reset (no cached entry "
                                       "was lost)")
        return added

    @property
    def index_path(self) -> Path:
        return self.root / INDEX_FILE

    def _new_index(self, read_only: bool) -> CacheIndex:
        return CacheIndex(self.root, read_only=read_only, timeout=self.timeout, quick_check=self.quick_check)

    def _corrupt_handler(self) -> Callable[[IndexCorruptError], bool]:
        """The index's ``on_corrupt``, holding this CacheDir weakly: an index that held its dir would make a
        reference cycle, and a dropped CacheDir's connection would then close at the next garbage collection
        rather than at once."""
        method = weakref.WeakMethod(self._on_corrupt)

        def on_corrupt(error: IndexCorruptError) -> bool:
            handler = method()
            return handler(error) if handler is not None else False
        return on_corrupt

    def _open_index(self) -> CacheIndex | None:
        try:
            return self._new_index(self.read_only)
        except IndexCorruptError as exc:
            problem = str(exc)
        # rebuild.py is loaded for an unreadable index only
        from .index.rebuild import NOT_WRITABLE, Rebuild, memory_index, rebuild_index

        if not self.heal:
            self._unhealed(Rebuild(problem, NOT_WRITABLE))
            return memory_index(self.root, self.store)
        self.rebuilt = rebuild_index(self.root, self.store, problem, wait=self.timeout)
        self._warn(self.rebuilt)
        if self.rebuilt.usable:
            try:
                index = self._new_index(self.read_only)
            except IndexCorruptError as exc:  # damaged again at once: give up for this process
                self.problem = str(exc)
            else:
                self._record_own_version(index)
                return index
        else:
            self._unhealed(self.rebuilt)
        return memory_index(self.root, self.store) if self.read_only else None

    def _unhealed(self, result: Rebuild) -> None:
        self.problem = result.problem
        self._warn(result)

    def _warn(self, result: Rebuild) -> None:
        if self.warn:
            warn_once("index_corrupt", result.warning(self.index_path))

    def _record_own_version(self, index: CacheIndex) -> None:
        """Best effort: the version a rebuilt manifest should name as current (the next open records it too)."""
        if self.own_version is not None and not self.read_only:
            with contextlib.suppress(*INDEX_ERRORS):
                index.record_version(*self.own_version)

    def _on_corrupt(self, error: IndexCorruptError) -> bool:
        """CacheIndex found itself unreadable mid-operation: rebuild it (unless this process just failed to)
        and reconnect; True when the operation can run again on a sound index."""
        index = self.index
        if index is None or not self.heal or time.monotonic() < self._retry_heal_at:
            self.problem = self.problem or str(error)
            return False
        seen = index.built
        index.disconnect()  # before the files change under it (see core/index/rebuild.py)
        result = self.rebuild_index(str(error), seen_built=seen)
        return result.usable

    def rebuild_index(self, problem: str, *, force: bool = False, seen_built: float | None = None) -> Rebuild:
        """Rebuild the index from the entry files now (``force``: even when another process just did) and
        reconnect to it; warns once about what happened."""
        from .index.rebuild import FAILED, rebuild_index

        result = rebuild_index(self.root, self.store, problem, wait=self.timeout, seen_built=seen_built,
                               force=force)
        self._warn(result)
        if not result.usable:
            self.problem = problem
            self._retry_heal_at = time.monotonic() + HEAL_RETRY
            return result
        index = self.index
        try:
            if index is None or index.memory:
                index = self._new_index(read_only=False)
                index.on_corrupt = self._corrupt_handler()
                self.index = index
            else:
                index.reopen()
            self._record_own_version(index)
        except IndexCorruptError as exc:
            self.problem = str(exc)
            self._retry_heal_at = time.monotonic() + HEAL_RETRY
            return Rebuild(problem, FAILED, error=str(exc))
        self.problem = ""
        return result

    def current_version(self) -> str:
        """The version most recently opened here ('' when none ever was)."""
        if self.index is None:
            return ""
        versions = self.index.versions()
        return max(versions, key=lambda v: versions[v][1]) if versions else ""

    def reconcile(self) -> tuple[int, int]:
        """Bring the index in line with the entry files: (rows added, rows dropped); sizes are refreshed.
        Reads the headers of files without a row only (core/index/audit.py)."""
        if self.index is None or self.index.memory:
            return (0, 0)
        from .index.audit import find_drift, repair_drift

        drift, rows, files = find_drift(self.index, self.store)
        return repair_drift(self.index, drift, rows, files)

    def converge(self, *, every: float = CHECK_EVERY, now: float | None = None) -> tuple[int, int] | None:
        """The periodic open-time check (README: "What is checked when"): at most once per ``every`` seconds
        per cache dir, the first open after that runs the index's full check (SQLite's integrity check, rows,
        totals, counters) and reconciles the rows with the entry files. Repairs what it finds: a rebuild
        for an index that fails the integrity check, recounted totals, dropped bad counters, rows of vanished
        files dropped and files without rows indexed. Returns (added, dropped), or None when not due."""
        index = self.index
        if index is None or index.memory or self.read_only or not index.claim(META_CHECKED, every, now):
            return None
        # Temp files of writers and rebuilds that died: a scan of every shard, so with this check, not every open.
        from .index.rebuild import remove_stale_builds

        self.store.remove_stray_temp_files()
        remove_stale_builds(self.root)
        if index.created_now:  # made by this open from the entry files (index_files): in step with them
            return None
        problems = index.check(full=True)
        if any(problem.needs_rebuild for problem in problems):
            self._on_corrupt(IndexCorruptError(problems[0].text))
            return None
        if problems:
            kinds = {problem.kind for problem in problems}
            if "counters" in kinds:
                index.drop_bad_counters()
            if "totals" in kinds:
                index.recount()
            warn_once("index_repaired", f"graphcache: the cache index {self.index_path} was inconsistent "
                                        f"({'; '.join(p.text for p in problems)}); repaired it in place")
        added, dropped = self.reconcile()
        if added or dropped:
            log.info("graphcache: the index of %s was out of step with the entry files: %d indexed, %d rows of "
                     "vanished files dropped", self.root, added, dropped)
        return added, dropped

    def audit(self, *, fix: bool = False, signing_key: bytes | None = None,
              advance: Callable[[int], None] | None = None) -> VerifyReport:
        """Check the entries, the index and the two against each other (core/index/audit.py); ``fix`` repairs."""
        from .index.audit import audit

        return audit(self, fix=fix, signing_key=signing_key, advance=advance)

    def stats(self, current_version: str | None = None, max_size: int | None = None) -> Stats:
        from .stats import Stats

        version = current_version if current_version is not None else self.current_version()
        if self.index is None:
            return Stats.from_counters(0, 0, {}, version, max_size)
        entries, size = self.index.totals()
        return Stats.from_counters(entries, size, self.index.counters(), version, max_size,
                                   self.index.totals_by_kind())

    def entries(self) -> list[IndexRow]:
        return [] if self.index is None else self.index.rows(order="last_used DESC")

    def resolve_key(self, prefix: str) -> str:
        """The one entry key starting with ``prefix`` (indexed entries and entry files alike)."""
        text = prefix.strip().lower()
        candidates: set[str] = set()
        if self.index is not None and text:
            candidates.update(row.key for row in self.index.rows("key >= ? AND key < ?", (text, text + "g")))
        if len(text) == 32:
            if self.store.path_for(text).exists():
                candidates.add(text)
        else:
            candidates.update(f.key for f in self.store.scan() if f.key.startswith(text))
        from .selection import resolve_prefix

        return resolve_prefix(prefix, candidates, self.root)

    def select(self, selection: Selection, *, current_version: str | None = None,
               now: float | None = None) -> list[IndexRow]:
        """The indexed entries ``selection`` picks (core/selection.py), most recently used first."""
        if self.index is None:
            return []
        from .selection import select

        version = current_version if current_version is not None else self.current_version()
        return select(self.index.rows(order="last_used DESC, key DESC"), selection, current_version=version,
                      where=self.root, now=now)

    def select_to_share(self, keys: Iterable[str] | None, filters: Iterable[str | Filter] | None = None, *,
                        current_version: str | None = None) -> list[IndexRow]:
        """The entries an export or a push takes: ``keys`` (each must exist), narrowed by ``filters``; neither
        given: every entry of the current version. Sorted by key unless keys were given."""
        from .selection import Selection, SelectionError

        if self.index is None:
            raise SelectionError(f"cannot read the cache index in {self.root}")
        keys = list(dict.fromkeys(keys)) if keys is not None else None
        missing = [key for key in keys or () if self.index.get(key) is None]
        if missing:
            raise SelectionError(f"no entry {missing[0]} in {self.root}")
        rows = self.select(Selection(keys=keys, filters=list(filters or []), when_empty="current"),
                           current_version=current_version)
        return sorted(rows, key=lambda row: row.key) if keys is None else rows

    def plan_purge(self, keys: Iterable[str] | None = None, *, all: bool = False, stale: bool = False,
                   older_than: float | str | None = None, max_size: int | str | None = None,
                   filters: Iterable[str | Filter] = (), current_version: str | None = None,
                   now: float | None = None) -> list[IndexRow]:
        """The entries a purge with these selections would remove (the CLI's ``purge`` selections).

        ``keys``: exact keys; ``all``; ``stale``: every version but the current; ``older_than``: last used
        longer ago than this (seconds or ``7d``); ``max_size``: trim by LRU until at most this many bytes
        remain (``5GB``); ``filters``: ``FIELD OP VALUE`` expressions. Selections given together must all
        match (``older_than`` and ``filters`` narrow the others).
        """
        from .selection import Selection

        conditions = list(filters)
        if older_than is not None:
            conditions.append(f"accessed>{older_than}s" if isinstance(older_than, int | float)
                              else f"accessed>{older_than}")
        limit = max_size if max_size is None or isinstance(max_size, int) else parse_size(max_size)
        selection = Selection(keys=list(keys) if keys is not None else None, everything=all, stale=stale,
                              max_size=limit, filters=conditions)
        return self.select(selection, current_version=current_version, now=now)

    def purge(self, keys: Iterable[str] | None = None, *, all: bool = False, stale: bool = False,
              older_than: float | str | None = None, max_size: int | str | None = None,
              filters: Iterable[str | Filter] = (), current_version: str | None = None,
              dry_run: bool = False) -> PurgeResult:
        """Remove the entries ``plan_purge`` selects; returns what was (or, with ``dry_run``, would be) freed."""
        if self.index is None:
            return PurgeResult(0, 0, ())
        filters = list(filters)
        if stale and not filters and older_than is None and not dry_run:
            version = current_version if current_version is not None else self.current_version()
            return purge_stale_versions(self.index, self.store, version, 0.0, now=time.time() + 1)
        rows = self.plan_purge(keys, all=all, stale=stale, older_than=older_than, max_size=max_size,
                               filters=filters, current_version=current_version)
        if dry_run:
            return PurgeResult(len(rows), sum(row.size for row in rows), (), tuple(row.key for row in rows))
        return self.remove(rows)

    def remove(self, rows: Iterable[IndexRow], *, counters: dict[str, float] | None = None) -> PurgeResult:
        """Delete these entries' files and rows; ``bytes_evicted`` (and ``counters``) are counted."""
        rows = list(rows)
        if self.index is None or not rows:
            return PurgeResult(0, 0, ())
        freed = sum(self.store.delete(row.key) for row in rows)
        self.index.remove(row.key for row in rows)
        self.index.add_counters({"bytes_evicted": freed, **(counters or {})})
        return PurgeResult(len(rows), freed, (), tuple(row.key for row in rows))

    def evict(self, *, max_size: int | None = None, max_age: float | None = None, keep: str = "",
              now: float | None = None) -> PurgeResult:
        """Remove entries unused for ``max_age`` seconds, then the least recently used until the total
        is at most ``max_size`` bytes. ``keep`` (the entry just written) is never chosen.

        Incremental: it reads the index's totals and walks the LRU order only as far as it must; the
        store itself is never scanned.
        """
        if self.index is None:
            return PurgeResult(0, 0, ())
        now = time.time() if now is None else now
        chosen: dict[str, IndexRow] = {}
        if max_age is not None and max_age > 0:
            for row in self.index.rows("last_used < ?", (now - max_age,)):
                if row.key != keep:
                    chosen[row.key] = row
        if max_size is not None:
            _, total = self.index.totals()
            total -= sum(row.size for row in chosen.values())
            offset, batch = 0, 64
            while total > max_size:
                rows = self.index.least_recently_used(batch, offset)
                if not rows:
                    break
                offset += len(rows)
                for row in rows:
                    if total <= max_size:
                        break
                    if row.key == keep or row.key in chosen:
                        continue
                    chosen[row.key] = row
                    total -= row.size
        result = self.remove(chosen.values(), counters={"evictions": len(chosen)})
        return PurgeResult(result.entries, result.bytes, ())

    def verify(self, fix: bool = False, *, signing_key: bytes | None = None) -> list[tuple[str, str]]:
        """Check every entry's format and checksum: a list of (key, problem). ``fix`` removes bad ones and
        repairs the index too (``audit`` has the whole report)."""
        return self.audit(fix=fix, signing_key=signing_key).bad
