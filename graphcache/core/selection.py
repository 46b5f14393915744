"""Which entries an operation works on: one selection for purge, export, push, ls and remote purge.

A :class:`Selection` says what was asked for (exact keys, everything, stale versions, an LRU trim to a
size, filters); :func:`select` applies it to rows (index rows, or remote files: anything with ``key``,
``version`` and, for filters and trims, the index row's fields). Key prefixes typed by people are
resolved by :func:`resolve_prefix` (entry/keyshape.py says what a key looks like).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..entry.keyshape import is_key_prefix
from ..errors import GraphCacheError
from .filters import Filter, apply_filters, parse_filter

Row = TypeVar("Row")


class SelectionError(GraphCacheError):
    """A selection cannot be made: a key that matches nothing or several entries, or a selection that
    needs the current compiler version where none is recorded. The message says what to do."""


def no_current_version(where: object, what: str) -> SelectionError:
    """The error for selections that need the current version (``what``: what cannot be told without it)."""
    return SelectionError(f"no current version is recorded in {where}: {what} (open the cache with "
                          "GraphCache once, or name the keys)")


@dataclass(frozen=True)
class Selection:
    """What an operation selects. Given together, ``filters`` narrow the others (all must match).

    ``when_empty`` says what selecting nothing explicit means: ``"nothing"`` (purge), ``"all"`` (ls) or
    ``"current"`` (export, push: every entry of the current version).
    """

    keys: Sequence[str] | None = None  # exact keys (resolve prefixes first)
    everything: bool = False
    stale: bool = False  # the entries of every version but the current one
    max_size: int | None = None  # trim by LRU: the least recently used beyond this many bytes
    filters: Sequence[Filter | str] = ()
    when_empty: Literal["nothing", "all", "current"] = "nothing"

    @property
    def explicit(self) -> bool:
        return bool(self.keys is not None or self.everything or self.stale or self.max_size is not None
                    or self.filters)


def select(rows: Iterable[Row], selection: Selection, *, current_version: str, where: object,
           now: float | None = None) -> list[Row]:
    """The rows ``selection`` picks, in the order of ``rows`` (keys: in the order given, each once).

    Raises SelectionError when the selection needs the current version and none is recorded.
    """
    rows = list(rows)
    conditions = [f if isinstance(f, Filter) else parse_filter(f) for f in selection.filters]
    if not rows:
        return []
    if selection.keys is not None:
        by_key = {_attr(row, "key"): row for row in rows}
        chosen = [by_key[key] for key in dict.fromkeys(selection.keys) if key in by_key]
    elif selection.stale:
        if not current_version:
            raise no_current_version(where, "--stale cannot tell which version to keep")
        chosen = [row for row in rows if _attr(row, "version") != current_version]
    elif selection.max_size is not None:
        chosen = _beyond_size(rows, selection.max_size)
    elif selection.everything or conditions or selection.when_empty == "all":
        chosen = rows
    elif selection.when_empty == "current":
        if not current_version:
            raise no_current_version(where, "there is no current version to select by default")
        chosen = [row for row in rows if _attr(row, "version") == current_version]
    else:
        return []
    if not conditions:
        return chosen
    if not current_version and any(c.uses_current for c in conditions):
        raise no_current_version(where, "'version=current' has nothing to compare with")
    return apply_filters(chosen, conditions, now=time.time() if now is None else now,
                         current_version=current_version)


def _beyond_size(rows: list[Any], limit: int) -> list[Any]:
    """The least recently used rows beyond the ``limit`` bytes the most recently used ones fill."""
    kept = 0
    beyond = []
    for row in sorted(rows, key=lambda r: (r.last_used, r.key), reverse=True):
        kept += row.size
        if kept > limit:
            beyond.append(row)
    order = {id(row): i for i, row in enumerate(rows)}
    return sorted(beyond, key=lambda r: order[id(r)])


def _attr(row: Any, name: str) -> str:
    return getattr(row, name)


def resolve_prefix(prefix: str, candidates: Iterable[str], where: object, what: str = "entry") -> str:
    """The one key among ``candidates`` that starts with ``prefix`` (a full key or a unique prefix).

    ``where`` and ``what`` ("entry", "remote entry") name the place and the thing in errors.
    """
    text = prefix.strip().lower()
    if not is_key_prefix(text):
        raise SelectionError(f"{prefix!r} is not a cache key (32 hex digits, or a unique prefix of one)")
    matches = sorted({key for key in candidates if key.startswith(text)})
    if not matches:
        raise SelectionError(f"no {what} matches key {prefix!r} in {where}")
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise SelectionError(f"key prefix {prefix!r} is ambiguous: it matches {len(matches)} {what.replace('entry', 'entries')} "
                             f"({shown}); give more digits")
    return matches[0]
