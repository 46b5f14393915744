"""What a bundle is exported from or imported into: a cache dir path, a CacheDir or a GraphCache."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ...core import settings
from ...core.cachedir import CacheDir
from ...core.service import EntryService
from .format import BundleError


# -- opening caches ------------------------------------------------------------------------------------------
def signing_key_for(target: Any) -> bytes | None:
    """The signing key entries are checked with: the cache's own, else ``GRAPHCACHE_SIGNING_KEY``."""
    if isinstance(target, EntryService):
        return target.signing_key
    return settings.resolve_str(None, settings.ENV_SIGNING_KEY).encode() or None


def open_target(target: Any, *, create: bool) -> tuple[CacheDir, str | None, dict[str, Any]]:
    """(CacheDir, the GraphCache's version or None, eviction settings) for a path, CacheDir or GraphCache."""
    if isinstance(target, CacheDir):
        return target, None, {}
    if isinstance(target, EntryService):
        return target.management(), target.version, {"max_size": target.max_size, "max_age": target.max_age}
    root = Path(target).expanduser()
    if create and not root.exists():
        root.mkdir(parents=True, mode=0o700)
    if not root.is_dir():
        raise BundleError(f"cache dir {str(root)!r} does not exist or is not a directory")
    try:
        cache = CacheDir(root)
    except (OSError, sqlite3.Error):
        if create:
            raise
        return CacheDir(root, read_only=True), None, {}
    if cache.index is not None and cache.index.created_now:
        cache.reconcile()
    return cache, None, {}


