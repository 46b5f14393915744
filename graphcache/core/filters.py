"""Entry filters, sort orders and sizes: the small languages of ``graphcache ls`` and ``graphcache purge``.

Pure functions over :class:`~graphcache.core.index.database.IndexRow`, shared by the CLI and the Python API.

A filter is ``FIELD OP VALUE`` with ``OP`` one of ``> < >= <= = !=``:

==============  ====================================================================================
``size``        entry file size: plain bytes or with a unit, decimal (``kB MB GB TB``, ``k M G T``)
                or binary (``KiB MiB GiB TiB``): ``size>10MB``, ``size<=1GiB``, ``size=4096``
``created``     an age (``90s 30m 12h 7d 2w``; ``created>7d`` = created more than 7 days ago) or a
                UTC ISO-8601 date/time (``created<2024-05-01`` = created before that day)
``accessed``    last use, like ``created``: ``accessed>7d`` = not used for more than 7 days
``version``     the compiler version id (``=``/``!=`` only); ``current`` means the cache dir's current
                version: ``version!=current`` selects the entries of older versions
``kind``        ``=``/``!=``, glob patterns allowed (``*``, ``?``, ``[...]``)
``name``        ``=``/``!=``, glob patterns allowed: ``name=resnet*``
==============  ====================================================================================

``last_used`` is an alias of ``accessed``; ``identity`` is an alias of ``version`` (its name in graphcache
0.1, kept so existing scripts work; an entry's *identity* is the full compiler identity, see ``show``).
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from .index.database import IndexRow
from .units import UnitError, parse_duration, parse_size

__all__ = [
    "Filter",
    "FilterError",
    "SortOrder",
    "apply_filters",
    "parse_filter",
    "parse_sort",
    "sort_rows",
]


class FilterError(UnitError):
    """A filter or sort order that does not parse; the message names the offending text."""


# -- filters --------------------------------------------------------------------------------------------------
_OPS: dict[str, Callable[[object, object], bool]] = {
    ">=": operator.ge, "<=": operator.le, "!=": operator.ne, "==": operator.eq,
    ">": operator.gt, "<": operator.lt, "=": operator.eq,
}
_ORDERING = frozenset({">", "<", ">=", "<="})
_FIELDS = {
    "size": "size", "created": "created", "accessed": "accessed", "last_used": "accessed",
    "identity": "version", "version": "version", "kind": "kind", "name": "name",
}
_FILTER_RE = re.compile(r"^\s*([A-Za-z_]+)\s*(>=|<=|!=|==|=|>|<)\s*(.*?)\s*$", re.DOTALL)
CURRENT = "current"

Mode = Literal["bytes", "age", "time", "text"]


def _parse_time(text: str) -> float:
    """A Unix time from an ISO-8601 date or date-time; naive values are UTC."""
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@dataclass(frozen=True)
class Filter:
    """One parsed ``FIELD OP VALUE`` expression."""

    expr: str
    field: str  # size, created, accessed, version, kind or name
    op: str  # > < >= <= = !=
    value: float | str  # bytes, seconds of age, a Unix time, or text
    mode: Mode

    @property
    def uses_current(self) -> bool:
        """Whether the filter compares against the cache dir's current version (``version=current``)."""
        return self.field == "version" and self.value == CURRENT

    def matches(self, row: IndexRow, *, now: float, current_version: str = "") -> bool:
        compare = _OPS[self.op]
        if self.mode == "bytes":
            return compare(row.size, self.value)
        if self.mode in ("age", "time"):
            when = row.created if self.field == "created" else row.last_used
            return compare(now - when, self.value) if self.mode == "age" else compare(when, self.value)
        actual = {"version": row.version, "kind": row.kind, "name": row.name}[self.field]
        pattern = str(self.value)
        if self.field == "version" and pattern == CURRENT:
            pattern = current_version
            equal = actual == pattern
        else:
            equal = fnmatch.fnmatchcase(actual, pattern)
        return equal if self.op == "=" else not equal


def parse_filter(expr: str) -> Filter:
    """Parse ``FIELD OP VALUE`` (see the module docstring). Raises FilterError naming ``expr``."""
    match = _FILTER_RE.match(expr)
    if not match:
        raise FilterError(f"invalid filter {expr!r}: expected FIELD OP VALUE, e.g. 'size>10MB' or 'accessed>7d'")
    name, op, raw = match.group(1).lower(), match.group(2), match.group(3)
    op = "=" if op == "==" else op
    field = _FIELDS.get(name)
    if field is None:
        fields = ", ".join(sorted({"size", "created", "accessed", "version", "kind", "name"}))
        raise FilterError(f"invalid filter {expr!r}: unknown field {name!r} (fields: {fields})")
    if not raw:
        raise FilterError(f"invalid filter {expr!r}: missing value after {op!r}")
    try:
        if field == "size":
            return Filter(expr, field, op, parse_size(raw), "bytes")
        if field in ("created", "accessed"):
            if op not in _ORDERING:
                raise FilterError(f"use <, <=, > or >= with {field}")
            try:
                return Filter(expr, field, op, parse_duration(raw), "age")
            except ValueError:
                try:
                    return Filter(expr, field, op, _parse_time(raw), "time")
                except ValueError:
                    raise FilterError(f"{raw!r} is neither an age (7d, 12h, 30m) nor an ISO date") from None
        if op in _ORDERING:
            raise FilterError(f"use = or != with {field}")
        return Filter(expr, field, op, raw, "text")
    except UnitError as exc:
        if str(exc).startswith("invalid filter"):
            raise
        raise FilterError(f"invalid filter {expr!r}: {exc}") from None


def apply_filters(rows: Iterable[IndexRow], filters: Iterable[Filter], *, now: float,
                  current_version: str = "") -> list[IndexRow]:
    """The rows that match every filter."""
    filters = list(filters)
    return [row for row in rows if all(f.matches(row, now=now, current_version=current_version) for f in filters)]


# -- sort orders ----------------------------------------------------------------------------------------------
_SORT_FIELDS = {
    "key": "key", "name": "name", "kind": "kind", "size": "size", "created": "created",
    "accessed": "last_used", "last_used": "last_used", "identity": "version", "version": "version",
    "compile": "compile_seconds", "compile_seconds": "compile_seconds", "compile_time": "compile_seconds",
}


@dataclass(frozen=True)
class SortOrder:
    attribute: str  # an IndexRow field
    descending: bool = False


def parse_sort(spec: str) -> SortOrder:
    """``FIELD[:asc|desc]``: ``size:desc``, ``accessed`` (oldest use first), ``name:asc``."""
    name, _, direction = spec.strip().partition(":")
    attribute = _SORT_FIELDS.get(name.strip().lower())
    direction = direction.strip().lower() or "asc"
    if attribute is None:
        choices = "key, name, kind, size, created, accessed, identity, compile_seconds"
        raise FilterError(f"invalid sort order {spec!r}: unknown field {name!r} (fields: {choices})")
    if direction not in ("asc", "desc"):
        raise FilterError(f"invalid sort order {spec!r}: direction must be 'asc' or 'desc'")
    return SortOrder(attribute, direction == "desc")


def sort_rows(rows: Iterable[IndexRow], order: SortOrder) -> list[IndexRow]:
    """Rows sorted by one field; ties are broken by key so the order is stable across runs."""
    by_key = sorted(rows, key=lambda row: row.key)
    return sorted(by_key, key=lambda row: getattr(row, order.attribute), reverse=order.descending)
