"""Failing open: one place says what a storage failure is and how it is reported.

A cache failure must never break the user's run: it is warned about once per process and kind of
failure, counted, and the run goes on without the cache (``strict`` caches raise instead). Graph entries,
XLA files, SavedModel aliases and the remote tier all report through here.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import warnings

from ..errors import GraphCacheWarning

log = logging.getLogger("graphcache")

# Errors that mean "the cache's storage failed" (the disk, the file system, the index database), as
# opposed to a bug or a bad graph: only these are failed open.
STORAGE_ERRORS: tuple[type[BaseException], ...] = (OSError, sqlite3.Error)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(kind: str, message: str) -> None:
    """Emit a GraphCacheWarning the first time a kind of failure happens in this process (later ones go
    to the DEBUG log): a failing disk must not flood the user's output."""
    with _warned_lock:
        if kind in _warned:
            log.debug("graphcache: %s", message)
            return
        _warned.add(kind)
    warnings.warn(message, GraphCacheWarning, stacklevel=3)


def reset_warnings() -> None:
    """Forget which kinds were warned about (tests start each case from a clean process state)."""
    with _warned_lock:
        _warned.clear()
