"""Stale-version purge: the cache clears itself after an upgrade.

The index's ``versions`` table is the manifest: every compiler version (see identity.py) that opened this
cache dir, with its last-open time. On open, entries of *other* versions that have not been opened for
``stale_after`` seconds are purged. Two versions used side by side (two virtualenvs, CI and a trainer)
keep refreshing their last-open times and never purge each other; identities of the same version
(another device kind, other options) are never purged by this at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .index import CacheIndex
from .store import LocalStore

log = logging.getLogger("graphcache")


@dataclass(frozen=True)
class PurgeResult:
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
        _remove_xla_dir(store, version)
    if freed:
        index.add_counters({"bytes_evicted": freed})
    if stale:
        log.info("graphcache: purged %d entries (%d bytes) of stale compiler versions %s", count, freed,
                 ", ".join(stale))
    return PurgeResult(count, freed, tuple(stale), tuple(removed))


def _remove_xla_dir(store: LocalStore, version: str) -> None:
    """A stale version's XLA executables (``<cache_dir>/xla/<version>/``, see xla.py) go with its entries."""
    root = getattr(store, "root", None)
    if root is None:
        return
    from .xla.files import remove_version_dir

    try:
        remove_version_dir(root, version)
    except OSError as exc:
        log.warning("graphcache: could not remove the XLA executables of %s: %s", version, exc)
