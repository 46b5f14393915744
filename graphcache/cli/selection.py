"""Which entries a command means: key prefixes resolved, filters applied, purges planned.

One resolver, :func:`resolve_prefix`, serves every command that takes KEYS (``show``, ``purge``,
``export``, ``push`` and ``purge --remote``); one function words the "no current version" refusal.
Nothing here prints: a refusal is a :class:`CliError` for the runner.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..filters import Filter, SortOrder, apply_filters, sort_rows
from .errors import PROG, CliError
from .options import cache_root, current_version

if TYPE_CHECKING:
    from ..cachedir import CacheDir
    from ..index import IndexRow

KEY_DIGITS = 32
KEY_PREFIX = re.compile(rf"[0-9a-f]{{1,{KEY_DIGITS}}}")
OPEN_ONCE = "open the cache with GraphCache once"
NOTHING_TO_COMPARE = ": 'identity=current' has nothing to compare with"


def no_current_version(root: Path | str, consequence: str, remedy: str | None = OPEN_ONCE) -> str:
    """The refusal when a selection needs the current version and the cache dir has none recorded.

    ``consequence`` follows the path (": ..." or ", so ..."); ``remedy`` goes in parentheses.
    """
    return f"no current version is recorded in {root}{consequence}" + (f" ({remedy})" if remedy else "")


def key_prefix(prefix: str) -> str:
    """``prefix`` normalised (stripped, lower case); CliError unless it is 1 to 32 hex digits."""
    text = prefix.strip().lower()
    if not KEY_PREFIX.fullmatch(text):
        raise CliError(f"{prefix!r} is not a cache key ({KEY_DIGITS} hex digits, or a unique prefix of one)")
    return text


def resolve_prefix(prefix: str, candidate_keys: Iterable[str], where: str, *, noun: str = "entry",
                   nouns: str = "entries") -> str:
    """The one key of ``candidate_keys`` that starts with ``prefix``; CliError when none or several do.

    ``where`` names the place searched (a cache dir, a remote URL) and ``noun``/``nouns`` what is in it,
    for the messages.
    """
    text = key_prefix(prefix)
    matches = sorted({key for key in candidate_keys if key.startswith(text)})
    if not matches:
        raise CliError(f"no {noun} matches key {prefix!r} in {where}")
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise CliError(f"key prefix {prefix!r} is ambiguous: it matches {len(matches)} {nouns} ({shown}); "
                       "give more digits")
    return matches[0]


def local_keys(cache: CacheDir | None, text: str) -> set[str]:
    """The keys of ``cache`` that may start with the normalised prefix ``text``: indexed or only on disk."""
    keys: set[str] = set()
    if cache is None:
        return keys
    if cache.index is not None:
        keys.update(row.key for row in cache.index.rows("key >= ? AND key < ?", (text, text + "g")))
    if len(text) == KEY_DIGITS:  # a whole key: look for its file, not at every file
        if cache.store.path_for(text).exists():
            keys.add(text)
    else:
        keys.update(f.key for f in cache.store.scan() if f.key.startswith(text))
    return keys


def resolve_key(cache: CacheDir | None, prefix: str) -> str:
    """The one local entry whose key starts with ``prefix``; CliError when none or several do."""
    return resolve_prefix(prefix, local_keys(cache, key_prefix(prefix)), str(cache_root()))


def select_rows(cache: CacheDir | None, filters: Sequence[Filter], now: float,
                order: SortOrder | None = None) -> list[IndexRow]:
    """The entries matching every filter, in ``order`` (default: most recently used first)."""
    rows = cache.entries() if cache is not None else []
    current = current_version(cache)
    if rows and not current and any(f.uses_current for f in filters):
        raise CliError(no_current_version(cache_root(), NOTHING_TO_COMPARE))
    rows = apply_filters(rows, filters, now=now, current_version=current)
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
