"""The GraphCache a graphcache.Session uses, opened when the session first needs it.

A session used to open its cache dir at construction: the index, and on a fresh dir its creation (schema,
version record, dir tag). For a graph too small to cache (``GRAPHCACHE_MIN_NODES``, session.py) that was
the whole of graphcache's cost on the first run, for a cache the session never used. Now the dir is only
checked at construction (a bad one still fails there, as ``GraphCache()`` would), the cache is opened at the
session's first compile, and a small graph's ``small_graph`` count is written when the session closes.
"""

from __future__ import annotations

import threading
from typing import Any

from ..cache import GraphCache
from ..core.cachedir import resolve_cache_dir
from ..core.failures import warn_once
from ..errors import CacheDirError


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
        try:
            cache = self.get()
        except CacheDirError as exc:
            warn_once("stats", f"graphcache: could not record {', '.join(uncounted)} in the stats: {exc}")
            return
        for reason in uncounted:
            cache.count_uncacheable(reason)
