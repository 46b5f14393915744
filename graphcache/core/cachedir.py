"""CacheDir: one cache directory's files, index and counters, managed without TensorFlow.

The CLI's ``ls``, ``stats``, ``show``, ``purge`` and ``verify`` work through this class only, so they
never import TensorFlow (which alone takes over 2 s to import). The current compiler version comes
from the index's manifest (the version most recently opened by a GraphCache).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import CorruptEntryError
from ..store import LocalStore
from . import codec
from .filters import Filter, apply_filters, parse_filter, parse_size
from .index import CacheIndex, IndexRow
from .stats import Stats
from .versioning import PurgeResult, purge_stale_versions


def row_from_header(header: codec.EntryHeader, size: int, last_used: float) -> IndexRow:
    from ..identity import identity_id

    return IndexRow(
        key=header.key, name=header.name, kind=header.kind, size=size, created=header.created,
        last_used=last_used, version=header.version,
        identity=identity_id(header.identity) if header.identity else "",
        compile_seconds=header.compile_seconds)


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
        if self.index is None:
            return []
        now = time.time() if now is None else now
        version = current_version if current_version is not None else self.current_version()
        if keys is not None:
            rows = [row for key in dict.fromkeys(keys) if (row := self.index.get(key)) is not None]
        elif stale:
            rows = self.index.rows("version != ?", (version,))
        elif max_size is not None:
            limit = max_size if isinstance(max_size, int) else parse_size(max_size)
            rows, kept = [], 0
            for row in self.index.rows(order="last_used DESC, key DESC"):
                kept += row.size
                if kept > limit:
                    rows.append(row)
        else:
            rows = self.index.rows()
            if not (all or older_than is not None or filters):
                return []
        conditions = [f if isinstance(f, Filter) else parse_filter(f) for f in filters]
        if older_than is not None:
            conditions.append(parse_filter(f"accessed>{older_than}s" if isinstance(older_than, int | float)
                                           else f"accessed>{older_than}"))
        return apply_filters(rows, conditions, now=now, current_version=version) if conditions else rows

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
        freed = sum(self.store.delete(row.key) for row in rows)
        self.index.remove(row.key for row in rows)
        self.index.add_counters({"bytes_evicted": freed})
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
        if not chosen:
            return PurgeResult(0, 0, ())
        freed = sum(self.store.delete(key) for key in chosen)
        self.index.remove(chosen)
        self.index.add_counters({"bytes_evicted": freed, "evictions": len(chosen)})
        return PurgeResult(len(chosen), freed, ())

    def verify(self, fix: bool = False) -> list[tuple[str, str]]:
        """Check every entry's format and checksum: a list of (key, problem). ``fix`` removes bad ones."""
        bad: list[tuple[str, str]] = []
        for stored in self.store.scan():
            try:
                with open(stored.path, "rb") as fh:
                    codec.decode(fh.read(), stored.key)
            except CorruptEntryError as exc:
                bad.append((stored.key, str(exc)))
            except FileNotFoundError:
                continue
        if fix:
            for key, _ in bad:
                with contextlib.suppress(FileNotFoundError):
                    self.store.quarantine(key)
            if self.index is not None:
                self.index.remove(key for key, _ in bad)
                self.reconcile()
            self.store.remove_stray_temp_files()
        return bad
