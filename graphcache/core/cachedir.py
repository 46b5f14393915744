"""CacheDir: one cache directory's files, index and counters, managed without TensorFlow.

The CLI's ``ls``, ``stats``, ``show``, ``purge`` and ``verify`` work through this class only, so they
never import TensorFlow (which alone takes over 2 s to import). The current compiler version comes
from the index's manifest (the version most recently opened by a GraphCache).
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import CacheDirError, CorruptEntryError
from ..store.local import LocalStore
from . import codec, settings
from .checked import read_checked
from .failures import warn_once
from .filters import Filter
from .index import CacheIndex, IndexRow
from .keyparts import identity_id
from .selection import Selection, SelectionError, resolve_prefix, select
from .stats import Stats
from .units import parse_size
from .versioning import PurgeResult, purge_stale_versions

CACHEDIR_TAG = "CACHEDIR.TAG"
_CACHEDIR_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by graphcache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


def row_from_header(header: codec.EntryHeader, size: int, last_used: float) -> IndexRow:
    return IndexRow(
        key=header.key, name=header.name, kind=header.kind, size=size, created=header.created,
        last_used=last_used, version=header.version,
        identity=identity_id(header.identity) if header.identity else "",
        compile_seconds=header.compile_seconds)


# -- finding and checking a cache dir ---------------------------------------------------------------------------
def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """An explicit cache dir (it must exist: a typo must not silently create a new cache), else the default
    one ($GRAPHCACHE_DIR or the user cache dir), created with mode 0700."""
    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
        if not path.is_dir():
            raise CacheDirError(
                f"cache dir {str(path)!r} does not exist or is not a directory: create it, or pass "
                f"cache_dir=None to use ${settings.ENV_DIR} or the user cache dir", str(path))
        return path
    path = settings.default_cache_dir()
    try:
        settings.make_private_dir(path)
    except OSError as exc:
        raise CacheDirError(f"cannot create cache dir {str(path)!r}: {exc.strerror or exc}", str(path)) from None
    return path


def warn_if_shared_writable(path: Path) -> None:
    """Anyone who can write the cache dir can plant entries other users will run: say so."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & 0o022:
        who = "other users" if mode & 0o002 else "its group"
        warn_once("shared_writable", f"graphcache: cache dir {path} is writable by {who} (mode "
                                     f"{stat.S_IMODE(mode):o}): anyone who can write it can plant entries this "
                                     "process will run; use chmod 700, or set GRAPHCACHE_SIGNING_KEY")


def is_read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def tag_cache_dir(path: Path) -> None:
    """Write CACHEDIR.TAG once, so backup tools skip the folder."""
    tag = path / CACHEDIR_TAG
    if not tag.exists():
        tag.write_text(_CACHEDIR_TAG_TEXT)


class CacheDir:
    """The files of a cache dir. ``index`` is None when the index cannot be opened (the cache fails open)."""

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False,
                 index: CacheIndex | None = None) -> None:
        self.root = Path(root)
        self.read_only = read_only
        self.store = LocalStore(self.root, read_only=read_only)
        self.index = index if index is not None else CacheIndex(self.root, read_only=read_only)
        if not self.index.available:
            self.index = None

    def current_version(self) -> str:
        """The version most recently opened here ('' when none ever was)."""
        if self.index is None:
            return ""
        versions = self.index.versions()
        return max(versions, key=lambda v: versions[v][1]) if versions else ""

    def reconcile(self) -> tuple[int, int]:
        """Bring the index in line with the entry files: (rows added, rows dropped); sizes are refreshed."""
        if self.index is None:
            return (0, 0)
        on_disk = {f.key: f for f in self.store.scan()}
        rows = {row.key: row for row in self.index.rows()}
        indexed = set(rows)
        for key in on_disk.keys() & indexed:  # a writer killed between its rename and its index update
            if rows[key].size != on_disk[key].size:
                self.index.upsert(dataclasses.replace(rows[key], size=on_disk[key].size))
        added = 0
        latest: dict[str, float] = {}
        for key in on_disk.keys() - indexed:
            try:
                header = codec.read_header(on_disk[key].path)
            except (CorruptEntryError, OSError):
                continue  # verify() reports and removes it
            if header.key != key:
                continue
            self.index.upsert(row_from_header(header, on_disk[key].size, on_disk[key].mtime))
            latest[header.version] = max(latest.get(header.version, 0.0), on_disk[key].mtime)
            added += 1
        known = self.index.versions()
        for version, when in latest.items():
            if version not in known:
                self.index.record_version(version, {"recovered": True}, when)
        missing = indexed - on_disk.keys()
        self.index.remove(missing)
        return added, len(missing)

    def stats(self, current_version: str | None = None, max_size: int | None = None) -> Stats:
        version = current_version if current_version is not None else self.current_version()
        if self.index is None:
            return Stats.from_counters(0, 0, {}, version, max_size)
        entries, size = self.index.totals()
        return Stats.from_counters(entries, size, self.index.counters(), version, max_size)

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
        return resolve_prefix(prefix, candidates, self.root)

    def select(self, selection: Selection, *, current_version: str | None = None,
               now: float | None = None) -> list[IndexRow]:
        """The indexed entries ``selection`` picks (core/selection.py), most recently used first."""
        if self.index is None:
            return []
        version = current_version if current_version is not None else self.current_version()
        return select(self.index.rows(order="last_used DESC, key DESC"), selection, current_version=version,
                      where=self.root, now=now)

    def select_to_share(self, keys: Iterable[str] | None, filters: Iterable[str | Filter] | None = None, *,
                        current_version: str | None = None) -> list[IndexRow]:
        """The entries an export or a push takes: ``keys`` (each must exist), narrowed by ``filters``; neither
        given: every entry of the current version. Sorted by key unless keys were given."""
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
        """Check every entry's format and checksum: a list of (key, problem). ``fix`` removes bad ones."""
        bad: list[tuple[str, str]] = []
        for stored in self.store.scan():
            try:
                read_checked(self.store, stored.key, signing_key=signing_key)
            except CorruptEntryError as exc:
                bad.append((stored.key, str(exc)))
        if fix:
            for key, _ in bad:
                self.store.delete(key)
            if self.index is not None:
                self.index.remove(key for key, _ in bad)
                self.reconcile()
            self.store.remove_stray_temp_files()
        return bad
