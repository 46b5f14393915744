"""What explains a miss, kept in the index: each graph entry's key parts, and the newest misses.

- ``entry_parts``: the six named parts of every graph entry's key (``PARTS``), beside its row. The entries
  nearest a miss are those with the same name (a model that changed), else the same graph (a new
  compiler, signature or options), else the most parts shared: the first two are indexed lookups, so a
  miss finds its nearest entry in well under a millisecond; only when neither exists are the newest
  ``SCAN_NEWEST`` rows scored (``explain`` scores them all). Rows the table lacks (after a rebuild, or
  entries indexed from their files) are refilled from the entry headers a lookup meets.
- ``misses``: time, name, key, the nearest entry and the parts that differ from it, the newest ``KEEP``
  only. A rebuilt index starts it empty: past misses are not in the entry files.

Everything here is best effort for the caller (core/service.py wraps it fail-open). An index opened
read-only is never migrated, so one from before schema 3 has neither table: it reads as empty.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...entry import codec, kinds
from .database import CacheIndex, IndexRow
from .schema import UPSERT, row_values

# The named parts of a graph key, in keys.PART_ORDER's order (keys.py needs TensorFlow; a test checks that
# the two agree).
PARTS = ("graph", "feeds", "fetches", "targets", "options", "identity")
KEEP = 1000  # misses kept, newest first
SCAN_NEWEST = 500  # parts rows a miss scores (in SQL) when no entry shares its name or graph
_PART_COLUMNS = ", ".join(f"p.{part}" for part in PARTS)
_SELECT = f"SELECT e.key, e.name, e.version, e.identity, e.created, {_PART_COLUMNS} FROM entries e"
_SCORED = (f"SELECT e.key, e.name, e.version, e.identity, e.created, {_PART_COLUMNS}, "
           f"({' + '.join(f'(p.{part} = ?)' for part in PARTS)}) AS shared "
           "FROM entry_parts p JOIN entries e ON e.key = p.key")
_INSERT_PARTS = f"INSERT OR REPLACE INTO entry_parts (key, {', '.join(PARTS)}) VALUES (?{', ?' * len(PARTS)})"
# A refill never overwrites what a writer just stored, nor outlives an entry removed meanwhile.
_REFILL_PARTS = (f"INSERT OR IGNORE INTO entry_parts (key, {', '.join(PARTS)}) SELECT ?{', ?' * len(PARTS)} "
                 "WHERE EXISTS (SELECT 1 FROM entries WHERE key = ?)")


@dataclass(frozen=True)
class Candidate:
    """A cached graph entry a miss is compared with."""

    key: str
    name: str
    version: str  # compiler version id
    identity: str  # identity id (core/keyparts.identity_id)
    created: float
    parts: dict[str, str]

    def differs(self, parts: Mapping[str, str]) -> list[str]:
        """The parts (in PARTS order) in which ``parts`` differ from this entry's."""
        return [part for part in PARTS if self.parts.get(part) != parts.get(part)]


@dataclass(frozen=True)
class Miss:
    """One recorded miss: ``nearest`` is the nearest entry's key (None: none to compare with)."""

    time: float
    name: str
    key: str
    nearest: str | None = None
    differs: tuple[str, ...] = ()
    detail: str = ""  # what changed, in words, where a part's hash cannot say (the identity)


@dataclass
class _Found:
    rows: list[Candidate] = field(default_factory=list)
    others: int = 0  # rows of other names that were not fetched (``everything``: counted, not scored)
    unfilled: list[tuple[str, str, str, str, float]] = field(default_factory=list)  # rows without parts


def graph_parts(header: codec.EntryHeader) -> dict[str, str] | None:
    """A graph entry's six key parts, or None (another kind of entry, or parts missing)."""
    parts = header.key_parts
    if header.kind != kinds.GRAPH or not all(isinstance(parts.get(part), str) for part in PARTS):
        return None
    return {part: parts[part] for part in PARTS}


def _no_table(exc: sqlite3.OperationalError) -> bool:
    return "no such table" in str(exc)


def upsert_entry(index: CacheIndex, row: IndexRow, parts: Mapping[str, str] | None) -> None:
    """Index an entry and (for a graph entry) its key parts, in one transaction."""
    if parts is None:
        index.upsert(row)
        return
    values = (row.key, *(parts[part] for part in PARTS))

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(UPSERT, row_values(row))
        conn.execute(_INSERT_PARTS, values)
    index.run(write, write=True)


def _candidate(values: tuple) -> Candidate | None:
    key, name, version, identity, created = values[:5]
    parts = values[5:]
    if not all(isinstance(v, str) for v in (key, name, version, identity, *parts)) or not isinstance(
            created, int | float):
        return None  # a damaged row: not worth a rebuild for an explanation
    return Candidate(key, name, version, identity, float(created), dict(zip(PARTS, parts, strict=True)))


def _query(index: CacheIndex, name: str, parts: Mapping[str, str], exclude: str, everything: bool,
           limit: int) -> _Found:
    graph = kinds.GRAPH
    scored = f"{_SCORED} WHERE e.kind = ? AND e.key != ? AND e.name != ? AND "
    ranked = " ORDER BY shared DESC, e.created DESC LIMIT ?"
    scores = [parts.get(part, "") for part in PARTS]

    def read(conn: sqlite3.Connection) -> _Found:
        found = _Found()
        for values in conn.execute(f"{_SELECT} LEFT JOIN entry_parts p ON p.key = e.key "
                                   "WHERE e.name = ? AND e.kind = ? AND e.key != ?", (name, graph, exclude)):
            if values[5] is None:
                found.unfilled.append(values[:5])
            elif (candidate := _candidate(values)) is not None:
                found.rows.append(candidate)
        if found.rows and not everything:
            return found  # same name comes first: nothing else can rank above these
        fixed = (*scores, graph, exclude, name)
        if everything:  # scored in SQL: only the best ``limit`` rows come to Python
            others = conn.execute(scored + "1" + ranked, (*fixed, limit)).fetchall()
            found.others = conn.execute("SELECT COUNT(*) FROM entry_parts p JOIN entries e ON e.key = p.key "
                                        "WHERE e.kind = ? AND e.key != ? AND e.name != ?",
                                        (graph, exclude, name)).fetchone()[0]
            found.unfilled.extend(conn.execute(
                "SELECT e.key, e.name, e.version, e.identity, e.created FROM entries e LEFT JOIN entry_parts p "
                "ON p.key = e.key WHERE e.kind = ? AND p.key IS NULL AND e.name != ? AND e.key != ?",
                (graph, name, exclude)))
        else:
            others = conn.execute(scored + "p.graph = ?" + ranked, (*fixed, parts.get("graph", ""), limit)).fetchall()
            if not others:  # the newest rows only: a miss never scans a big index
                others = conn.execute(scored + "p.rowid > (SELECT COALESCE(MAX(rowid), 0) FROM entry_parts) - ?"
                                      + ranked, (*fixed, SCAN_NEWEST, limit)).fetchall()
        found.rows.extend(c for c in map(_candidate, (values[:-1] for values in others)) if c is not None)
        return found

    try:
        return index.run(read, write=False, default=_Found())
    except sqlite3.OperationalError as exc:
        if _no_table(exc):  # an index from before schema 3, opened read-only
            return _Found()
        raise


def _fill(index: CacheIndex, unfilled: Iterable[tuple], header_of: Callable[[str], codec.EntryHeader | None]
          ) -> list[Candidate]:
    """Candidates for rows without parts, from their entries' headers; the parts are stored when the index
    can be written."""
    filled: list[Candidate] = []
    for values in unfilled:
        if not all(isinstance(v, str) for v in values[:4]) or not isinstance(values[4], int | float):
            continue
        header = header_of(values[0])
        parts = graph_parts(header) if header is not None and header.key == values[0] else None
        if parts is not None:
            filled.append(Candidate(*values[:4], float(values[4]), parts))
    if filled and not index.read_only:
        rows = [(c.key, *(c.parts[part] for part in PARTS), c.key) for c in filled]
        index.run(lambda conn: conn.executemany(_REFILL_PARTS, rows), write=True)
    return filled


def rank(candidates: Iterable[Candidate], name: str, parts: Mapping[str, str]) -> list[Candidate]:
    """Same name first, then most parts shared, then the newest."""
    return sorted(candidates, key=lambda c: (c.name != name, len(c.differs(parts)), -c.created, c.key))


def nearest(index: CacheIndex, name: str, parts: Mapping[str, str], *, exclude: str = "", limit: int = 1,
            everything: bool = False, header_of: Callable[[str], codec.EntryHeader | None] | None = None
            ) -> tuple[list[Candidate], int]:
    """The ``limit`` graph entries nearest a graph named ``name`` with key ``parts`` (``exclude``: its own
    key), and how many others were considered. ``everything``: score every graph entry (``explain``), not
    only those a miss finds by index. ``header_of(key)`` reads an entry's header, to refill missing parts."""
    found = _query(index, name, parts, exclude, everything, limit)
    rows = found.rows
    if found.unfilled and header_of is not None:
        rows = rows + _fill(index, found.unfilled, header_of)
    ranked = rank(rows, name, parts)
    fetched_others = sum(1 for row in found.rows if row.name != name)
    return ranked[:limit], max(0, len(ranked) + max(0, found.others - fetched_others) - limit)


def record(index: CacheIndex, miss: Miss, keep: int = KEEP) -> None:
    """Add ``miss``; only the newest ``keep`` are kept."""
    def write(conn: sqlite3.Connection) -> None:
        cursor = conn.execute("INSERT INTO misses (time, name, key, nearest, differs, detail) VALUES (?,?,?,?,?,?)",
                              (miss.time, miss.name, miss.key, miss.nearest, ",".join(miss.differs), miss.detail))
        if cursor.lastrowid is not None and cursor.lastrowid > keep:
            conn.execute("DELETE FROM misses WHERE id <= ?", (cursor.lastrowid - keep,))
    index.run(write, write=True)


def recent(index: CacheIndex, limit: int | None = None) -> list[Miss]:
    """The recorded misses, newest first (rows a bit flip made unreadable are skipped)."""
    sql = "SELECT time, name, key, nearest, differs, detail FROM misses ORDER BY id DESC"
    params: tuple[Any, ...] = ()
    if limit is not None:
        sql += " LIMIT ?"
        params = (max(0, int(limit)),)
    try:
        rows = index.run(lambda conn: conn.execute(sql, params).fetchall(), write=False, default=[])
    except sqlite3.OperationalError as exc:
        if _no_table(exc):
            return []
        raise
    found = []
    for when, name, key, near, differs, detail in rows:
        if isinstance(when, int | float) and all(isinstance(v, str) for v in (name, key, differs, detail)) and (
                near is None or isinstance(near, str)):
            found.append(Miss(float(when), name, key, near, tuple(p for p in differs.split(",") if p), detail))
    return found


def clear(index: CacheIndex) -> None:
    """Forget the recorded misses."""
    index.run(lambda conn: conn.execute("DELETE FROM misses"), write=True)


# -- the identity, in words ----------------------------------------------------------------------------------
_LABELS = {"tensorflow": "tensorflow", "tf_git": "tensorflow git version", "format": "entry format",
           "keys": "key scheme", "salt": "salt", "backend": "backend", "device": "device kind",
           "onednn": "oneDNN rewrites"}


def _flatten(identity: Mapping[str, Any]) -> dict[str, Any]:
    """A compiler identity (or a compiler version, as the manifest holds it) as label -> value."""
    flat: dict[str, Any] = {}
    source = dict(identity)
    version = source.pop("version_info", None)
    source.pop("version", None)  # the id of version_info
    for name, value in [*(dict(version).items() if isinstance(version, Mapping) else ()), *source.items()]:
        if isinstance(value, Mapping):
            prefix = "backend option " if name == "backend_options" else ""
            for inner, item in value.items():
                flat[f"{prefix}{inner}"] = item
        else:
            flat[_LABELS.get(name, name)] = value
    return flat


def _shown(label: str, value: Any) -> str:
    if isinstance(value, str) and label == "salt":
        return repr(value)
    if isinstance(value, str):
        return value if value and " " not in value else repr(value)
    return "(none)" if value is None else repr(value)


def identity_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What differs between two compiler identities (or versions), in words:
    ``tensorflow 2.20.0 -> 2.21.0, salt '' -> 'b'``; '' when nothing readable differs."""
    before, after = _flatten(old), _flatten(new)
    if before.get("recovered") or after.get("recovered"):  # a manifest row rebuilt from headers: no detail
        return ""
    changes = [f"{label} {_shown(label, before.get(label))} -> {_shown(label, after.get(label))}"
               for label in [*before, *(label for label in after if label not in before)]
               if before.get(label) != after.get(label)]
    return ", ".join(changes)


__all__ = ["KEEP", "PARTS", "SCAN_NEWEST", "Candidate", "Miss", "clear", "graph_parts", "identity_changes",
           "nearest", "rank", "recent", "record", "upsert_entry"]
