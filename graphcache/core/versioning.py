"""Stale-version purge: the cache clears itself after an upgrade.

The index's ``versions`` table is the manifest: every compiler version (see identity.py) that opened this
cache dir, with its last-open time. On open, entries of *other* versions that have not been opened for
``stale_after`` seconds are purged. Two versions used side by side (two virtualenvs, CI and a trainer)
keep refreshing their last-open times and never purge each other; identities of the same version
(another device kind, other options) are never purged by this at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..entry.kinds import VERSION_DIRS

if TYPE_CHECKING:
    from ..store.local import LocalStore
    from .index.database import CacheIndex

log = logging.getLogger("graphcache")


class PurgeResult(NamedTuple):
    """What a purge freed: entry count, bytes, the versions dropped (stale purges) and the keys removed."""

    entries: int
    bytes: int
    versions: tuple[str, ...]
    keys: tuple[str, ...] = ()


def purge_stale_versions(index: CacheIndex, store: LocalStore, current: str, stale_after: float,
                         now: float | None = None) -> PurgeResult:
    now = time.time() if now is None else now
    stale = [v for v, (_, last_open) in index.versions().items() if v != current and now - last_open >= stale_after]
    count = freed = 0
    removed: list[str] = []
    for version in stale:
        rows = index.rows("version = ?", (version,))
        for row in rows:
            freed += store.delete(row.key)
        index.remove(row.key for row in rows)
        removed.extend(row.key for row in rows)
        count += len(rows)
        index.forget_version(version)
        remove_version_dirs(store.root, version)
    if freed:
        index.add_counters({"bytes_evicted": freed})
    if stale:
        log.info("graphcache: purged %d entries (%d bytes) of stale compiler versions %s", count, freed,
                 ", ".join(stale))
    return PurgeResult(count, freed, tuple(stale), tuple(removed))


def remove_version_dirs(root: str | os.PathLike[str], version: str) -> int:
    """Remove ``<root>/<dir>/<version>/`` for every kind that keeps a per-version directory
    (kinds.VERSION_DIRS: XLA executables, ...); returns the bytes freed. Failures are logged, not raised:
    a directory left behind is removed by the next purge."""
    if not version or version in (".", "..") or "/" in version or "\\" in version:
        return 0
    freed = 0
    for folder in sorted(set(VERSION_DIRS.values())):
        path = Path(root) / folder / version
        if not path.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(path):
            for name in files:
                with contextlib.suppress(OSError):
                    freed += os.stat(os.path.join(dirpath, name)).st_size
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("graphcache: could not remove %s of stale version %s: %s", path, version, exc)
    return freed
