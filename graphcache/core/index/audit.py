"""Checking a cache dir completely (``verify``) and bringing the index back in step with the entry files.

Three kinds of trouble, each reported with counts and fixed by ``verify --fix``:

- entries: files that fail their checks (entry/checked.py): removed, with their rows;
- the index itself (CacheIndex.check): unreadable or failing SQLite's integrity check, or holding rows
  that are not entry rows: rebuilt from the entry files (core/index/rebuild.py); totals that disagree with the
  rows: recounted; counters that are negative or not numbers: dropped;
- drift between rows and files (:class:`Drift`): rows whose file is gone are dropped, files with no row
  are indexed, rows whose size or header fields (version, kind, name) disagree with the file are
  rewritten from the file, keeping their last-use time.

``CacheDir.reconcile`` (on open of a new index, periodically, and before a CLI purge) is the drift part
alone, comparing sizes but reading no payloads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...entry import codec
from ...entry.checked import read_checked
from ...errors import CorruptEntryError
from ...store.base import StoredFile
from ...store.local import LocalStore
from .database import CacheIndex, IndexProblem, IndexRow
from .rebuild import Rebuild, recovered_versions
from .schema import row_from_header


class Audited(Protocol):
    """What ``audit`` needs of a cache dir (core/cachedir.py's CacheDir answers it)."""

    store: LocalStore
    index: CacheIndex | None
    problem: str  # why the index on disk is unusable, while it is not rebuilt
    rebuilt: Rebuild | None  # what opening did about an unreadable index

    @property
    def index_path(self) -> Path: ...

    def rebuild_index(self, problem: str, *, force: bool = False) -> Rebuild: ...

DRIFT_KINDS = {
    "missing_files": "indexed entries whose file is gone",
    "unindexed": "entry files the index has no row for",
    "wrong_size": "rows whose size is not their file's",
    "wrong_header": "rows whose version, kind or name disagree with their entry's header",
}


@dataclass
class Drift:
    """Where the index's rows and the entry files disagree (keys, sorted, per kind; see DRIFT_KINDS)."""

    missing_files: list[str] = field(default_factory=list)
    unindexed: list[str] = field(default_factory=list)
    wrong_size: list[str] = field(default_factory=list)
    wrong_header: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(self.counts().values())

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in DRIFT_KINDS}

    def as_dict(self) -> dict[str, list[str]]:
        return {kind: list(getattr(self, kind)) for kind in DRIFT_KINDS}


@dataclass
class VerifyReport:
    """What ``verify`` found (and, with ``fixed``, repaired): bad entries as (key, problem), the index's
    own problems, drift, stray temp files, and what a rebuild of the index did."""

    checked: int
    bad: list[tuple[str, str]]
    index: list[IndexProblem]
    drift: Drift
    strays: list[Path]
    fixed: bool = False
    rebuild: Rebuild | None = None

    @property
    def clean(self) -> bool:
        """Nothing wrong was found (stray temp files of live writers are not a fault)."""
        return not self.bad and not self.index and not self.drift


def find_drift(index: CacheIndex, store: LocalStore, headers: dict[str, codec.EntryHeader] | None = None,
               skip: set[str] | frozenset[str] = frozenset()
               ) -> tuple[Drift, dict[str, IndexRow], dict[str, StoredFile]]:
    """Compare the rows with the entry files (and with ``headers``, when given); ``skip``: keys to leave
    out (bad entries, reported apart). Returns the drift and the rows and files it compared. The rows are
    read first, so an entry written meanwhile is at worst a file without a row, never a row dropped."""
    rows = {row.key: row for row in index.rows()}
    files = {stored.key: stored for stored in store.scan() if stored.key not in skip}
    drift = Drift()
    for key in sorted(rows.keys() - files.keys() - skip):
        if store.stat(key) is None:  # not just renamed into place after the scan
            drift.missing_files.append(key)
    drift.unindexed = sorted(files.keys() - rows.keys())
    for key in sorted(rows.keys() & files.keys()):
        row = rows[key]
        if row.size != files[key].size:
            drift.wrong_size.append(key)
        header = headers.get(key) if headers else None
        if header is not None and (header.version, header.kind, header.name) != (row.version, row.kind, row.name):
            drift.wrong_header.append(key)
    return drift, rows, files


def repair_drift(index: CacheIndex, drift: Drift, rows: dict[str, IndexRow], files: dict[str, StoredFile],
                 headers: dict[str, codec.EntryHeader] | None = None) -> tuple[int, int]:
    """Fix the rows ``find_drift`` found apart from the files: (rows added, rows dropped)."""
    headers = headers or {}
    index.remove(drift.missing_files)
    fresh: list[IndexRow] = []
    newest: dict[str, float] = {}
    for key in drift.unindexed:
        header = headers.get(key) or _read_header(files[key])
        if header is not None:
            fresh.append(row_from_header(header, files[key].size, files[key].mtime))
            newest[header.version] = max(newest.get(header.version, 0.0), files[key].mtime)
    for key in sorted(set(drift.wrong_size) | set(drift.wrong_header)):
        header = headers.get(key) or _read_header(files[key])
        row = rows[key]
        fresh.append(row_from_header(header, files[key].size, row.last_used) if header is not None
                     else row._replace(size=files[key].size))
    index.upsert_many(fresh)
    known = index.versions()
    for version, (description, when) in recovered_versions(newest, time.time()).items():
        if version not in known:
            index.record_version(version, description, when)
    return len(drift.unindexed), len(drift.missing_files)


def _read_header(stored: StoredFile) -> codec.EntryHeader | None:
    try:
        header = codec.read_header(stored.path)
    except (CorruptEntryError, OSError):
        return None  # verify reports and removes it
    return header if header.key == stored.key else None


def audit(cache: Audited, *, fix: bool = False, signing_key: bytes | None = None,
          advance: Callable[[int], None] | None = None) -> VerifyReport:
    """Check everything (see the module docstring); ``fix`` repairs it. ``advance(1)`` per entry checked."""
    index_problems = _index_problems(cache)
    bad: list[tuple[str, str]] = []
    headers: dict[str, codec.EntryHeader] = {}
    checked = 0
    for stored in cache.store.scan():
        checked += 1
        try:
            entry = read_checked(cache.store, stored.key, signing_key=signing_key)
        except CorruptEntryError as exc:
            bad.append((stored.key, str(exc)))
        else:
            if entry is not None:
                headers[stored.key] = entry.header
        if advance is not None:
            advance(1)
    strays = cache.store.stray_temp_files()
    bad_keys = {key for key, _ in bad}
    unreadable = any(problem.needs_rebuild for problem in index_problems)
    drift = Drift()
    if cache.index is None:  # no index file at all: every good entry is unindexed
        drift.unindexed = sorted(headers)
    elif not unreadable:
        drift, rows, files = find_drift(cache.index, cache.store, headers, bad_keys)
    report = VerifyReport(checked, bad, index_problems, drift, strays, fixed=fix, rebuild=cache.rebuilt)
    if not fix:
        return report
    for key in bad_keys:
        cache.store.delete(key)
    if unreadable:
        report.rebuild = cache.rebuild_index(index_problems[0].text, force=True)
    if cache.index is not None and not cache.index.memory:
        cache.index.remove(bad_keys)
        if not unreadable:
            drift, rows, files = find_drift(cache.index, cache.store, headers, bad_keys)
            repair_drift(cache.index, drift, rows, files, headers)
            kinds = {problem.kind for problem in index_problems}
            if "counters" in kinds:
                cache.index.drop_bad_counters()
            if "totals" in kinds:
                cache.index.recount()
    cache.store.remove_stray_temp_files()
    return report


def _index_problems(cache: Audited) -> list[IndexProblem]:
    if cache.problem:  # found unreadable at open and not rebuilt
        return [IndexProblem("unreadable", f"{cache.index_path.name}: {cache.problem}")]
    if cache.rebuilt is not None:  # found unreadable at open and rebuilt then
        return [IndexProblem("unreadable", f"{cache.index_path.name}: {cache.rebuilt.problem}")]
    if cache.index is None:
        return []
    return [problem._replace(text=f"{cache.index_path.name}: {problem.text}")
            for problem in cache.index.check(full=True)]
