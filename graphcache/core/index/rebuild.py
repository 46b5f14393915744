"""Rebuilding the index from the entry files: the index is derived data, the entry files are the truth.

Every entry file's header holds its key, kind, name, version, identity, creation time and compile time;
its size and modification time come from the file system. So an index SQLite cannot read is set aside
and built again from the files, and the cache carries on with only its counters lost (they are reset, and
the rebuild itself is counted: ``errors`` and ``index_rebuilds``).

How, so that concurrent processes and a rebuilder killed at any point are safe:

- One rebuilder at a time: ``locks/index.lock`` (a file lock, like the import lock). A process that waited
  for it first checks whether the index it now finds was rebuilt meanwhile (``meta.built`` changed and it
  passes the quick check): then it uses that one, so two processes finding a corrupt index rebuild it once.
- The new index is written whole under a temp name (``index.db.rebuild-<pid>-<random>``), then put in place.
  In place when SQLite can still write the old file as a database (bit flips in pages): its content is
  replaced through SQLite's backup API, under SQLite's locks, so connected processes simply read the new
  content. Otherwise (not a database, truncated, a -wal/-shm that cannot be opened) the old -wal/-shm are
  moved aside and the new file is renamed over ``index.db`` in one step; processes still connected to the
  old file notice the new inode at their next operation and reconnect (index.py).
- What was there is kept for inspection as ``index.db.corrupt-<UTC time>`` (with its -wal/-shm), the
  newest ``KEEP_ASIDE`` sets only.
- Killed before the index is in place: the old index is still there (the next open finds it unreadable
  and rebuilds again) and the temp file is removed by the next rebuild, or after an hour on open. Killed
  after: the new index is complete. Either way the next open uses an index or rebuilds one.

Recovered versions get recent last-open times (their order kept), so the stale-version purge never
removes another version's entries just because the manifest that said it was in use was lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import NamedTuple

from ...entry import codec
from ...errors import CorruptEntryError
from ...store.local import LOCKS_DIR, TMP_GRACE_SECONDS, LocalStore
from ..failures import STORAGE_ERRORS
from .database import (
    INDEX_ERRORS,
    INDEX_FILE,
    CacheIndex,
    IndexBusyError,
    IndexRow,
    classify,
    copy_index,
    probe_built,
)
from .schema import row_from_header, write_index

log = logging.getLogger("graphcache")

LOCK_FILE = "index.lock"
ASIDE_INFIX = ".corrupt-"
BUILD_INFIX = ".rebuild-"
KEEP_ASIDE = 3
REBUILD_COUNTERS = {"errors": 1, "index_rebuilds": 1}

# What a rebuild attempt came to (Rebuild.outcome)
REBUILT = "rebuilt"  # this process rebuilt it
BY_OTHER = "by_other"  # another process had rebuilt it by the time the lock was ours
BUSY = "busy"  # another process is rebuilding it, or writing it, for longer than the wait
FAILED = "failed"  # rebuilding failed (I/O): the cache serves entry files without an index
NOT_WRITABLE = "not_writable"  # the cache dir cannot be written: the entry files are read instead


class Rebuild(NamedTuple):
    """What happened to an unreadable index: ``problem`` (what SQLite said), ``outcome`` (REBUILT, ...),
    ``entries`` re-indexed, the name it was set aside under, and the error when rebuilding failed."""

    problem: str
    outcome: str
    entries: int = 0
    aside: str = ""
    error: str = ""

    @property
    def usable(self) -> bool:
        """A sound index is in place (rebuilt here or by another process)."""
        return self.outcome in (REBUILT, BY_OTHER)

    def warning(self, path: Path) -> str:
        """The one warning a process gives about it: what was wrong and what happens now, truthfully."""
        head = f"graphcache: the cache index {path} was unreadable ({self.problem})"
        if self.outcome == REBUILT:
            aside = f"set it aside as {self.aside} and " if self.aside else ""
            return (f"{head}; {aside}rebuilt it from the entry files: {self.entries} entries re-indexed, "
                    "counters reset (no cached entry was lost)")
        if self.outcome == BY_OTHER:
            return f"{head}; another process rebuilt it from the entry files (counters were reset)"
        if self.outcome == BUSY and self.error:
            return (f"{head}; serving hits from the entry files; another process is writing to it ({self.error}), "
                    "so it is rebuilt at a later open (LRU order, the size cap and counters are skipped until then)")
        if self.outcome == BUSY:
            return (f"{head}; serving hits from the entry files; the index is being rebuilt by another "
                    "process (LRU order, the size cap and counters are skipped until it is done)")
        if self.outcome == NOT_WRITABLE:
            return (f"{head} and this process may not write the cache dir, so it is not rebuilt: reading the "
                    "entry files instead (hits are served; nothing is recorded)")
        return (f"{head} and rebuilding it failed ({self.error}): serving hits from the entry files without "
                "an index (no LRU order, size cap or counters)")


def rows_from_files(store: LocalStore) -> tuple[list[IndexRow], dict[str, float]]:
    """A row for every entry file whose header reads and names its own key, and each version's newest
    file time. Files that fail are left out: ``verify`` reports and removes them."""
    rows: list[IndexRow] = []
    newest: dict[str, float] = {}
    for stored in store.scan():
        try:
            header = codec.read_header(stored.path)
        except (CorruptEntryError, OSError):
            continue
        if header.key != stored.key:
            continue
        rows.append(row_from_header(header, stored.size, stored.mtime))
        newest[header.version] = max(newest.get(header.version, 0.0), stored.mtime)
    return rows, newest


def recovered_versions(newest: dict[str, float], now: float) -> dict[str, tuple[dict, float]]:
    """Manifest rows for versions found only in entry headers: last opened "just now", one second apart in
    the order of their newest entry, so the most recent stays current and none looks stale."""
    ordered = sorted(newest, key=lambda version: newest[version], reverse=True)
    return {version: ({"recovered": True}, now - rank) for rank, version in enumerate(ordered)}


def memory_index(root: Path, store: LocalStore) -> CacheIndex:
    """An index in memory built from the entry files (for a cache dir whose index cannot be rebuilt)."""
    index = CacheIndex(root, memory=True)
    rows, newest = rows_from_files(store)
    index.upsert_many(rows)
    for version, (description, when) in recovered_versions(newest, time.time()).items():
        index.record_version(version, description, when)
    return index


def rebuild_index(root: Path, store: LocalStore, problem: str, *, wait: float, seen_built: float | None = None,
                  force: bool = False) -> Rebuild:
    """Rebuild ``root``'s index from its entry files (see the module docstring). ``seen_built``: the build
    time of the index the caller found unreadable (None when it could not read it), so a rebuild another
    process finished meanwhile is used instead of repeated; ``force`` rebuilds even so (``verify --fix``).
    Waits at most ``wait`` seconds for another rebuilder."""
    import filelock  # only a rebuild takes this lock

    try:
        (root / LOCKS_DIR).mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(root / LOCKS_DIR / LOCK_FILE), timeout=max(wait, 0.0), thread_local=False)
        lock.acquire()
    except filelock.Timeout:
        return Rebuild(problem, BUSY)
    except OSError as exc:
        return Rebuild(problem, FAILED, error=f"{type(exc).__name__}: {exc}")
    try:
        if not force:
            built = probe_built(root / INDEX_FILE)
            if built is not None and built != seen_built:
                return Rebuild(problem, BY_OTHER)
        remove_builds(root)
        now = time.time()
        rows, newest = rows_from_files(store)
        temp = root / f"{INDEX_FILE}{BUILD_INFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            write_index(temp, rows, recovered_versions(newest, now), REBUILD_COUNTERS)
            aside = _install(root, temp, wait)
        finally:
            _unlink(temp)
        _prune_aside(root)
        log.info("graphcache: rebuilt the index of %s from %d entry files (%s)", root, len(rows), problem)
        return Rebuild(problem, REBUILT, len(rows), aside)
    except IndexBusyError as exc:
        return Rebuild(problem, BUSY, error=str(exc))
    except (*STORAGE_ERRORS, UnicodeDecodeError) as exc:
        return Rebuild(problem, FAILED, error=f"{type(exc).__name__}: {exc}")
    finally:
        lock.release()


def _install(root: Path, temp: Path, wait: float) -> str:
    """Put the index built at ``temp`` in place of ``root/index.db``; returns the name the old one was set
    aside under ('' when there was none)."""
    path = root / INDEX_FILE
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 1_000_000:06d}Z"
    aside = root / f"{INDEX_FILE}{ASIDE_INFIX}{stamp}"
    kept = ""
    if path.is_file():
        shutil.copyfile(path, aside)
        if Path(f"{path}-wal").is_file():
            shutil.copyfile(f"{path}-wal", f"{aside}-wal")
        kept = aside.name
        try:
            copy_index(temp, path, wait)  # in place: connected processes read the new content
            return kept
        except INDEX_ERRORS as exc:
            if isinstance(classify(exc), IndexBusyError):
                raise classify(exc) from exc  # a process is writing it: never replace a file in such use (rebuild_index: BUSY)
            log.debug("graphcache: cannot rewrite %s in place (%s); replacing it", path, exc)
    for suffix in ("-wal", "-shm"):  # never pair the new file with the old one's WAL
        old = Path(f"{path}{suffix}")
        if old.exists() or old.is_symlink():
            _unlink_tree(Path(f"{aside}{suffix}"))
            os.replace(old, f"{aside}{suffix}")
            kept = aside.name
    if (path.exists() or path.is_symlink()) and not path.is_file():  # a directory or such in the way
        os.replace(path, aside)
        kept = aside.name
    os.replace(temp, path)
    _sync_dir(root)
    return kept


def _prune_aside(root: Path) -> None:
    """Keep the newest KEEP_ASIDE set-aside indexes (names sort by time), each with its -wal/-shm."""
    prefix = INDEX_FILE + ASIDE_INFIX
    sets = sorted({name.removesuffix("-wal").removesuffix("-shm") for name in os.listdir(root)
                   if name.startswith(prefix)})
    for name in sets[:-KEEP_ASIDE]:
        for suffix in ("", "-wal", "-shm"):
            _unlink_tree(root / f"{name}{suffix}")


def remove_builds(root: Path, older_than: float = 0.0) -> int:
    """Remove temp files of rebuilds (``index.db.rebuild-*``) older than ``older_than`` seconds: all of them
    while holding the rebuild lock (their writers are dead), only old ones without it."""
    cutoff = time.time() - older_than
    removed = 0
    prefix = INDEX_FILE + BUILD_INFIX
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if entry.name.startswith(prefix):
                with contextlib.suppress(OSError):
                    if older_than <= 0 or entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
    return removed


def remove_stale_builds(root: Path) -> int:
    """Temp files of rebuilds killed over TMP_GRACE_SECONDS ago (called on open, without the lock)."""
    return remove_builds(root, TMP_GRACE_SECONDS)


def _unlink(path: Path) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _unlink_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _sync_dir(root: Path) -> None:
    """Make the rename durable (best effort: not every file system lets a directory be fsynced)."""
    with contextlib.suppress(OSError):
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
