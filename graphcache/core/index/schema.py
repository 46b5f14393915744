"""The index's schema and its migrations, and writing a whole new index (a rebuild).

``PRAGMA user_version`` is the schema version. ``MIGRATIONS[i]`` takes an index from version i to i + 1;
CacheIndex applies the missing steps in one transaction when it opens an index. To change the schema,
append a step (never edit one that shipped), make CacheIndex read the new table defensively where an older
index may be opened read-only (no migration runs then), and fill it in ``write_index`` if a rebuild can.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from ...entry.keyparts import identity_id

if TYPE_CHECKING:
    from ...entry import codec

SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT 'graph',
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    last_used REAL NOT NULL,
    version TEXT NOT NULL,
    identity TEXT NOT NULL DEFAULT '',
    compile_seconds REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_by_last_used ON entries(last_used);
CREATE INDEX IF NOT EXISTS entries_by_version ON entries(version);
CREATE TABLE IF NOT EXISTS totals (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    entries INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
INSERT OR IGNORE INTO totals (id, entries, bytes)
    SELECT 0, COUNT(*), COALESCE(SUM(size), 0) FROM entries;
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    UPDATE totals SET entries = entries + 1, bytes = bytes + NEW.size WHERE id = 0;
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE totals SET entries = entries - 1, bytes = bytes - OLD.size WHERE id = 0;
END;
CREATE TRIGGER IF NOT EXISTS entries_resized AFTER UPDATE OF size ON entries BEGIN
    UPDATE totals SET bytes = bytes - OLD.size + NEW.size WHERE id = 0;
END;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS versions (
    version TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    last_open REAL NOT NULL
);
"""
SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value REAL NOT NULL);
"""
# Schema 3: what explains misses (core/index/misses.py). ``entry_parts``: each graph entry's named key parts, so
# the entries nearest a miss are found by indexed queries (same name, same graph) without reading headers;
# a row goes with its entry (trigger). A rebuild leaves it empty and lookups refill it from the headers
# they meet. ``misses``: the newest misses (bounded); they cannot be rebuilt from the entry files.
SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS entry_parts (
    key TEXT PRIMARY KEY,
    graph TEXT NOT NULL,
    feeds TEXT NOT NULL,
    fetches TEXT NOT NULL,
    targets TEXT NOT NULL,
    options TEXT NOT NULL,
    identity TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entry_parts_by_graph ON entry_parts(graph);
CREATE INDEX IF NOT EXISTS entries_by_name ON entries(name);
CREATE TRIGGER IF NOT EXISTS entry_parts_removed AFTER DELETE ON entries BEGIN
    DELETE FROM entry_parts WHERE key = OLD.key;
END;
CREATE TABLE IF NOT EXISTS misses (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    nearest TEXT,
    differs TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
);
"""
# Index schema 0 is graphcache 0.1's (the v1 tables, user_version never set): step 1 is idempotent on it.
MIGRATIONS: tuple[str, ...] = (SCHEMA_V1, SCHEMA_V2, SCHEMA_V3)
SCHEMA_VERSION = len(MIGRATIONS)

META_BUILT = "built"  # when this index was created or rebuilt: tells a waiting process that a rebuild happened
META_CHECKED = "checked"  # when the open-time check against the entry files last ran (CacheDir.converge)


ROW_COLUMNS = "key, name, kind, size, created, last_used, version, identity, compile_seconds"
UPSERT = (f"INSERT INTO entries ({ROW_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
           "name=excluded.name, kind=excluded.kind, size=excluded.size, created=excluded.created, "
           "last_used=excluded.last_used, version=excluded.version, identity=excluded.identity, "
           "compile_seconds=excluded.compile_seconds")


class IndexRow(NamedTuple):
    """One entry's row: what ``ls``, the LRU order and the size cap read without opening the entry."""

    key: str
    name: str
    kind: str
    size: int
    created: float
    last_used: float
    version: str
    identity: str
    compile_seconds: float


def row_from_header(header: codec.EntryHeader, size: int, last_used: float) -> IndexRow:
    """The row an entry's header gives (entry writes, touches that re-add a row, rebuilds, audits)."""
    return IndexRow(
        key=header.key, name=header.name, kind=header.kind, size=size, created=header.created,
        last_used=last_used, version=header.version,
        identity=identity_id(header.identity) if header.identity else "",
        compile_seconds=header.compile_seconds)


def row_values(row: IndexRow) -> tuple:
    """``row``'s values in ROW_COLUMNS order."""
    return (row.key, row.name, row.kind, row.size, row.created, row.last_used, row.version, row.identity,
            row.compile_seconds)


def statements(script: str) -> Iterator[str]:
    """The SQL statements of ``script`` one by one (triggers hold ';' inside BEGIN ... END)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""


def write_index(path: str | os.PathLike[str], rows: Iterable[IndexRow],
                versions: dict[str, tuple[dict[str, Any], float]], counters: dict[str, float]) -> None:
    """Write a complete new index at ``path`` (which must not exist): the schema, ``rows``, ``versions``
    and ``counters``, in one transaction with a full fsync. ``entry_parts`` and ``misses`` start empty (the
    parts are refilled from the headers lookups meet; past misses are not in the entry files). The file is left in WAL mode and whole (no -wal
    beside it), so it can be renamed into place or copied over a damaged index."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        for step in MIGRATIONS:
            for statement in statements(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.executemany(UPSERT, [row_values(row) for row in rows])
        conn.executemany("INSERT INTO versions (version, description, last_open) VALUES (?, ?, ?)",
                         [(v, json.dumps(d, sort_keys=True), t) for v, (d, t) in versions.items()])
        conn.executemany("INSERT INTO counters (name, value) VALUES (?, ?)", list(counters.items()))
        now = time.time()
        conn.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", [(META_BUILT, now), (META_CHECKED, now)])
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


@functools.cache
def _expected_schema(version: int = SCHEMA_VERSION) -> dict[tuple[bytes, bytes], tuple[bytes, bytes | None]]:
    """(type, name) -> (table, SQL) of every schema object, as SQLite stores them for schema ``version``."""
    conn = sqlite3.connect(":memory:")
    try:
        for step in MIGRATIONS[:max(1, version)]:  # schema 0 (graphcache 0.1) holds the v1 tables
            for statement in statements(step):
                conn.execute(statement)
        return _stored_schema(conn)
    finally:
        conn.close()


def _stored_schema(conn: sqlite3.Connection) -> dict[tuple[bytes, bytes], tuple[bytes, bytes | None]]:
    rows = conn.execute("SELECT CAST(type AS BLOB), CAST(name AS BLOB), CAST(tbl_name AS BLOB), CAST(sql AS BLOB) "
                        "FROM sqlite_master").fetchall()
    return {(kind, name): (table, sql) for kind, name, table, sql in rows}


def schema_problems(conn: sqlite3.Connection) -> list[str]:
    """How the stored schema differs from what its own schema version holds: a flipped byte in a trigger's
    text passes SQLite's integrity check and fails only when the trigger fires. An older index (opened
    read-only, so not migrated) is compared with its own version's schema, not flagged for lacking newer
    tables; an index of a newer schema is not compared (it may have changed what this version knows)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return []
    stored = _stored_schema(conn)
    wrong = [name.decode(errors="replace") for (kind, name), definition in _expected_schema(version).items()
             if stored.get((kind, name)) != definition]
    return [f"its schema differs from graphcache's in {', '.join(sorted(wrong))}"] if wrong else []
