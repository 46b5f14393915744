"""Failing open: one place says what a storage failure is and how it is reported.

A cache failure must never break the user's run: it is warned about once per process and kind of
failure, counted, and the run goes on without the cache (``strict`` caches raise instead). Graph entries,
XLA files, SavedModel aliases and the remote tier all report through here.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

from .. import runtime
from ..errors import CacheIOError, GraphCacheWarning

log = logging.getLogger("graphcache")

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


# Errors that mean "the cache's storage failed" (the disk, the file system, the index database), as
# opposed to a bug or a bad graph: only these are failed open. ``STORAGE_ERRORS`` is (OSError, sqlite3.Error),
# made at its first use.
def __getattr__(name: str) -> Any:
    """``STORAGE_ERRORS``, made when first asked for: it names sqlite3's Error, and importing sqlite3
    is for processes that open the index, not for every ``GraphCache(dir)``. Code on that path refers to it
    as ``failures.STORAGE_ERRORS`` inside ``except`` clauses, which Python evaluates only once something
    was raised (and then loading sqlite3 costs nothing that matters)."""
    if name == "STORAGE_ERRORS":
        import sqlite3

        errors: tuple[type[BaseException], ...] = (OSError, sqlite3.Error)
        globals()[name] = errors  # later lookups find the module attribute without this hook
        return errors
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def warn_once(kind: str, message: str) -> None:
    """Emit a GraphCacheWarning the first time a kind of failure happens in this process (later ones go
    to the DEBUG log): a failing disk must not flood the user's output. The memory is runtime.state's."""
    state = runtime.state
    with state.warned_lock:
        if kind in state.warned:
            log.debug("graphcache: %s", message)
            return
        state.warned.add(kind)
    warnings.warn(message, GraphCacheWarning, stacklevel=_caller_stacklevel())


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning name the first line outside graphcache that led to it (the
    user's call), never graphcache's own source (Python 3.12's ``skip_file_prefixes``, on 3.11 too)."""
    frame, level = sys._getframe(2), 2  # warn_once's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


def fail_open(kind: str, what: str, exc: BaseException, *, where: str | os.PathLike[str], strict: bool,
              consequence: str) -> None:
    """The fail-open decision, made once for everyone: a strict cache raises CacheIOError; any other warns
    once per ``kind`` that ``what`` failed in ``where`` (a cache dir) and what happens instead. The caller
    counts it (EntryService.failure does) and carries on."""
    if strict:
        raise CacheIOError(f"graphcache: {what} failed: {type(exc).__name__}: {exc}") from exc
    warn_once(kind, f"graphcache: {what} failed in {where} ({type(exc).__name__}: {exc}); {consequence}")


def reset_warnings() -> None:
    """Forget which kinds were warned about (runtime.reset does this and more)."""
    with runtime.state.warned_lock:
        runtime.state.warned.clear()
