"""Where entry bytes live: one written contract (base.py) and its implementations, each knowing its
service and no policy.

``LocalStore`` (one file per entry in the cache dir, striped lock files) and ``RemoteStore`` (shared
entries on any fsspec URL: S3, MinIO, Ceph, a shared path; fsspec and its backend are imported on first use
only). What to do with the bytes (verify, count, warn, keep a remote hit locally, upload a new entry) is the
entry service's (core/service.py), and the remote's time limits and circuit breaker are core/tier.py's.
Names are loaded when first used: a process without a remote never imports remote.py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {"Store": "base", "StoredFile": "base", "LocalStore": "local", "RemoteError": "remote",
         "RemoteFile": "remote", "RemoteStore": "remote"}

if TYPE_CHECKING:
    from .base import Store, StoredFile
    from .local import LocalStore
    from .remote import RemoteError, RemoteFile, RemoteStore


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphcache.store' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["LocalStore", "RemoteError", "RemoteFile", "RemoteStore", "Store", "StoredFile"]
