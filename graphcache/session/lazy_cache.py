"""The GraphCache a graphcache.Session uses, opened when the session first needs it.

A session used to open its cache dir at construction: the index, and on a fresh dir its creation (schema,
version record, dir tag). For a graph too small to cache (``GRAPHCACHE_MIN_NODES``, session.py) that was
the whole of graphcache's cost on the first run, for a cache the session never used. Now the dir is only
checked at construction (a bad one still fails there, as ``GraphCache()`` would), the cache is opened at the
session's first compile, and a small graph's ``small_graph`` count is written when the session closes, to
the dir's index alone (a session that never compiles never loads the compile path).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..core.failures import warn_once
from ..core.settings import resolve_cache_dir
from ..errors import CacheDirError

if TYPE_CHECKING:
    from ..cache import GraphCache


class SessionCache:
    """``cache`` when one is given, else ``GraphCache(cache_dir)`` at the first ``get()``."""

    def __init__(self, cache: GraphCache | None, cache_dir: Any) -> None:
        self._cache = cache
        self._cache_dir = resolve_cache_dir(cache_dir) if cache is None else None  # a bad dir fails now
        self._uncounted: list[str] = []
        self._lock = threading.Lock()

    def get(self) -> GraphCache:
        with self._lock:
            if self._cache is None:
                from ..cache import GraphCache  # the compile path: a session that runs plain never loads it

                self._cache = GraphCache(self._cache_dir)
            return self._cache

    def count_uncacheable(self, reason: str) -> None:
        """Count it now when the cache is open, else when the session closes (``close``)."""
        with self._lock:
            if self._cache is None:
                self._uncounted.append(reason)
                return
        self._cache.count_uncacheable(reason)

    def close(self) -> None:
        """Write the counts kept back; a cache dir gone meanwhile costs one warning (closing must not fail)."""
        with self._lock:
            uncounted, self._uncounted = self._uncounted, []
        if not uncounted:
            return
        with self._lock:
            cache = self._cache
        if cache is not None:  # opened since (or given): its own counters
            for reason in uncounted:
                cache.count_uncacheable(reason)
            return
        self._count_in_index(uncounted)

    def _count_in_index(self, reasons: list[str]) -> None:
        """The counts of a session that never compiled, added to the dir's index alone: opening a GraphCache
        for them would load the whole compile path into a process that never needed it."""
        from ..core import settings
        from ..core.cachedir import CacheDir
        from ..core.counters import UNCACHEABLE_PREFIX
        from ..core.failures import STORAGE_ERRORS

        root = self._cache_dir
        try:
            if settings.resolve_flag(None, settings.ENV_READ_ONLY) or not root.is_dir() or \
                    not os.access(root, os.W_OK):
                return  # a read-only cache keeps no counters, as GraphCache(read_only=True) keeps none
            index = CacheDir(root).index
            if index is not None:
                index.add_counters({UNCACHEABLE_PREFIX + reason: reasons.count(reason) for reason in set(reasons)})
        except (*STORAGE_ERRORS, CacheDirError, ValueError) as exc:
            warn_once("stats", f"graphcache: could not record {', '.join(reasons)} in the stats of {root}: {exc}")
