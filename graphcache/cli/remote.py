"""The remote cache from the CLI: ``ls --remote``, ``purge --remote``, and the calls ``push`` shares.

The remote is the one the environment configures for GraphCache (``GRAPHCACHE_REMOTE``: an fsspec URL
or a Redis one, whose password may also come from ``GRAPHCACHE_REDIS_PASSWORD``). Its backend errors
(botocore's, aiohttp's, redis-py's, ...) are many types; :func:`remote_call` reports any of them as one line
naming the remote (redacted: store/urls.py) and what was being done.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Column, Table

from ..core import settings
from ..core.selection import Selection, resolve_prefix, select
from ..errors import GraphCacheError
from ..store import RemoteFile, RemoteStore
from ..store import open_remote as open_store
from ..store.urls import redact
from .errors import CliError
from .options import cache_root, current_version, debug_enabled, no_remote_error, open_cache, remote_settings
from .output import (
    Mode,
    ago,
    confirm,
    emit,
    format_size,
    iso,
    message,
    plural,
    spinner,
    table,
    version_cell,
)


def remote_url() -> str:
    """The configured remote's URL, its password hidden ("" when none is)."""
    return redact(remote_settings().url)


def open_remote() -> RemoteStore:
    """The remote configured by the environment (the same settings GraphCache reads): a RemoteStore, or a
    RedisStore, which answers the same calls."""
    config = remote_settings()
    if not config.url:
        raise no_remote_error()
    password = settings.resolve_str(None, settings.ENV_REDIS_PASSWORD) or None
    options = settings.CacheSettings(remote=config.url, redis_password=password).store_options(config.url)
    return open_store(config.url, read_only=config.read_only, timeout=config.timeout, options=options)


def remote_call(remote: RemoteStore, what: str, func: Callable[[], Any]) -> Any:
    """``func()``, its backend errors (botocore's, aiohttp's, ...) reported as one line about the remote."""
    try:
        return func()
    except (CliError, GraphCacheError):
        raise
    except Exception as exc:
        if debug_enabled():
            traceback.print_exception(exc, file=sys.stderr)
        raise CliError(f"{what} on the remote cache {remote.url} failed: {type(exc).__name__}: {exc}") from None


def remote_files(remote: RemoteStore) -> list[RemoteFile]:
    """Every remote entry, newest first."""
    with spinner(f"Listing {remote.url}..."):
        files = remote_call(remote, "listing", lambda: list(remote.scan()))
    return sorted(files, key=lambda f: (-f.mtime, f.key))


def remote_entries(count: int) -> str:
    return plural(count, "remote entry", "remote entries")


def remote_json(f: RemoteFile, current: str) -> dict[str, Any]:
    return {"key": f.key, "version": f.version, "current": f.version == current, "size": f.size,
            "last_modified": iso(f.mtime), "path": f.path}


def remote_table(files: Sequence[RemoteFile], *, now: float, current: str) -> Table:
    view = table(Column("KEY", no_wrap=True, min_width=32), Column("VERSION", no_wrap=True),
                 Column("SIZE", justify="right", no_wrap=True), Column("LAST MODIFIED", no_wrap=True))
    for f in files:
        view.add_row(f.key, version_cell(f.version, current), format_size(f.size), ago(f.mtime, now))
    return view


def ls_remote(mode: Mode, limit: int | None, now: float) -> None:
    """``ls --remote``: every version's remote entries, newest first."""
    remote = open_remote()
    current = current_version(open_cache())
    files = remote_files(remote)
    if limit is not None:
        files = files[:limit]
    if mode is Mode.TABLE and not files:
        message(f"No remote entries in {remote.url}.")
        return
    emit(mode, data=[remote_json(f, current) for f in files], lines=lambda: (f.key for f in files),
         human=lambda: remote_table(files, now=now, current=current))


def remote_purge_plan(remote: RemoteStore, *, everything: bool, stale: bool, keys: Sequence[str],
                      current: str, max_size: int | None = None) -> list[RemoteFile]:
    """The remote entries ``purge --remote`` would remove (``max_size``: the least recently used beyond it, in
    the fleet's order where Redis keeps one, else by last-modified time: core/budget.py)."""
    files = remote_files(remote)
    if max_size is not None:
        from ..core.budget import plan

        last_uses = getattr(remote, "last_uses", None)
        uses = remote_call(remote, "reading last uses", last_uses) if last_uses is not None else None
        return plan(files, max_size, last_use=uses)
    chosen = [resolve_prefix(prefix, [f.key for f in files], remote.url, what="remote entry") for prefix in keys]
    return select(files, Selection(keys=chosen if keys else None, everything=everything, stale=stale),
                  current_version=current, where=cache_root())


def purge_remote(*, everything: bool, stale: bool, keys: Sequence[str], dry_run: bool, yes: bool,
                 mode: Mode, now: float, max_size: int | None = None) -> None:
    """``purge --remote``: remove remote entries (every version's, the stale versions' whole prefixes, or the
    least recently used beyond ``max_size``)."""
    remote = open_remote()
    current = current_version(open_cache())
    files = remote_purge_plan(remote, everything=everything, stale=stale, keys=keys, current=current,
                              max_size=max_size)
    planned = sum(f.size for f in files)
    data: dict[str, Any] = {"remote": remote.url, "removed": [f.key for f in files], "count": len(files),
                            "bytes": planned, "dry_run": dry_run}
    if not files:
        message("Nothing to purge.")
        emit(mode, data={**data, "removed": [], "count": 0, "bytes": 0}, human=lambda: None)
        return
    if dry_run:
        message(f"Would remove {remote_entries(len(files))}, freeing {format_size(planned)} "
                "(dry run: nothing removed).")
        emit(mode, data=data, human=lambda: remote_table(files, now=now, current=current))
        return
    message(f"About to remove {remote_entries(len(files))} ({format_size(planned)}) from {remote.url}.")
    confirm(len(files), yes)
    with spinner("Purging remote entries..."):
        if stale:
            count, freed = remote_call(remote, "purging", lambda: remote.remove_versions({f.version for f in files}))
        else:
            count, freed = remote_call(remote, "purging", lambda: remote.remove(files))
    message(f"Removed {remote_entries(count)}, freed {format_size(freed)}.")
    emit(mode, data={**data, "count": count, "bytes": freed}, human=lambda: None)
