"""Where entry bytes live: one written contract (base.py) and its implementations, each knowing its
service and no policy.

``LocalStore`` (one file per entry in the cache dir, striped lock files), ``RemoteStore`` (shared
entries on any fsspec URL: S3, MinIO, Ceph, a shared path; fsspec and its backend are imported on first use
only) and ``RedisStore`` (shared entries and compile leases in Redis; redis-py imported on first use).
``open_remote(url, ...)`` picks the remote store a URL names (urls.py). What to do with the bytes (verify, count, warn, keep a remote hit locally, upload a new entry) is the
entry service's (core/service.py), and the remote's time limits and circuit breaker are core/tier.py's.
Names are loaded when first used: a process without a remote never imports remote.py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {"Store": "base", "StoredFile": "base", "LocalStore": "local", "RemoteError": "remote",
         "RemoteFile": "remote", "RemoteStore": "remote", "RedisStore": "redis"}

if TYPE_CHECKING:
    from .base import Store, StoredFile
    from .local import LocalStore
    from .redis import RedisStore
    from .remote import RemoteError, RemoteFile, RemoteStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphcache.store' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def open_remote(url: str, *, version: str = "", options: dict[str, Any] | None = None, timeout: float = 5.0,
                read_only: bool = False) -> Any:
    """The store ``url`` names: a RedisStore for ``redis://``/``rediss://``, else a RemoteStore (fsspec).
    ``options``: the store's options (fsspec storage options, or RedisStore's: password, username, ...)."""
    from .urls import is_redis

    module = importlib.import_module(f"{__name__}.{'redis' if is_redis(url) else 'remote'}")
    store = module.RedisStore if is_redis(url) else module.RemoteStore
    return store(url, version=version, options=options, timeout=timeout, read_only=read_only)


__all__ = ["LocalStore", "RedisStore", "RemoteError", "RemoteFile", "RemoteStore", "Store", "StoredFile",
           "open_remote"]
