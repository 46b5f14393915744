"""Which entries a command means: the CLI's side of core/selection.py.

Key prefixes are resolved and selections made by the core (``CacheDir.resolve_key``, ``CacheDir.select``,
``core.selection``), shared with the Python API, bundles and pushes; this module only adapts them to the
CLI's state (the cache dir may not exist yet) and its refusals.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.filters import Filter, SortOrder, sort_rows
from ..core.selection import Selection, SelectionError
from .errors import PROG, CliError
from .options import cache_root, current_version

if TYPE_CHECKING:
    from ..core.cachedir import CacheDir
    from ..core.index.database import IndexRow


def resolve_key(cache: CacheDir | None, prefix: str) -> str:
    """The one local entry whose key starts with ``prefix``; SelectionError when none or several do."""
    if cache is None:
        raise SelectionError(f"no entry matches key {prefix!r} in {cache_root()}")
    return cache.resolve_key(prefix)


def select_rows(cache: CacheDir | None, filters: Sequence[Filter], now: float,
                order: SortOrder | None = None) -> list[IndexRow]:
    """The entries matching every filter, in ``order`` (default: most recently used first)."""
    if cache is None:
        return []
    rows = cache.select(Selection(filters=list(filters), when_empty="all"), current_version=current_version(cache),
                        now=now)
    return sort_rows(rows, order) if order is not None else rows


def purge_plan(cache: CacheDir | None, *, everything: bool, stale: bool, keys: Sequence[str],
               filters: Sequence[Filter], max_size: int | None, now: float) -> list[IndexRow]:
    """The entries a purge would remove (the selection itself is CacheDir.plan_purge, shared with the API)."""
    if cache is None or cache.index is None:
        return []
    if keys:
        rows = []
        for key in dict.fromkeys(resolve_key(cache, k) for k in keys):
            row = cache.index.get(key)
            if row is None:
                raise CliError(f"entry {key} is unreadable and cannot be purged by key (run '{PROG} verify --fix')")
            rows.append(row)
        return rows
    return cache.plan_purge(all=everything, stale=stale, max_size=max_size, filters=filters, now=now)
