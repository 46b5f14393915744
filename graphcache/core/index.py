"""The cache index: one SQLite database (``index.db``) beside the entry files, shared by all processes.

It holds what must be cheap to query or exact under concurrency:

- ``entries``: one row per entry file (size, created, last used, version, name): LRU order, listings and
  per-version purges without opening every file. The entry files stay the source of truth: a missing
  or stale row is repaired from the file's own header (``reconcile``).
- ``totals``: entry count and bytes, kept by triggers, so the size-cap check on every put is O(1).
- ``counters``: the persistent stats (hits, misses, compiles, ...), incremented in transactions so
  concurrent processes never lose a count.
- ``versions``: the manifest of compiler versions seen, each with its last-open time and description;
  the CLI reads the current identity from here instead of importing TensorFlow.

WAL mode with ``synchronous=NORMAL``: a commit costs no fsync (the database stays consistent after a
crash; at worst the last counter increments before a power loss are lost, never an entry).
The standard library's sqlite3 is the right tool here: transactional, multi-process, no dependency.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INDEX_FILE = "index.db"
SCHEMA_VERSION = 1

_SCHEMA = """
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


@dataclass(frozen=True)
class IndexRow:
    key: str
    name: str
    kind: str
    size: int
    created: float
    last_used: float
    version: str
    identity: str
    compile_seconds: float


_ROW_COLUMNS = "key, name, kind, size, created, last_used, version, identity, compile_seconds"


class CacheIndex:
    """Thread-safe wrapper around one SQLite connection per process."""

    def __init__(self, root: str | Path, *, read_only: bool = False, timeout: float = 60.0) -> None:
        self.path = Path(root) / INDEX_FILE
        self.read_only = read_only
        self._lock = threading.RLock()
        self.created_now = not self.path.exists()
        if read_only:
            if self.created_now:
                self._conn = None
                return
            uri = f"file:{self.path}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False,
                                         isolation_level=None)
        else:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._lock:
                # executescript commits on its own; the schema is idempotent (IF NOT EXISTS everywhere)
                self._conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")

    @property
    def available(self) -> bool:
        return self._conn is not None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An IMMEDIATE transaction: the write lock is taken up front, so concurrent writers queue."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise sqlite3.OperationalError("index not available")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                return []
            return self._conn.execute(sql, tuple(params)).fetchall()

    # -- entries -------------------------------------------------------------------------------------------
    def upsert(self, row: IndexRow) -> None:
        with self.transaction() as conn:
            conn.execute(
                f"INSERT INTO entries ({_ROW_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                "name=excluded.name, kind=excluded.kind, size=excluded.size, created=excluded.created, "
                "last_used=excluded.last_used, version=excluded.version, identity=excluded.identity, "
                "compile_seconds=excluded.compile_seconds",
                (row.key, row.name, row.kind, row.size, row.created, row.last_used, row.version,
                 row.identity, row.compile_seconds),
            )

    def touch(self, key: str, when: float | None = None) -> bool:
        """Record a use; returns False when the entry has no row (the caller then re-adds it)."""
        with self.transaction() as conn:
            cur = conn.execute("UPDATE entries SET last_used=? WHERE key=?", (when or time.time(), key))
            return cur.rowcount > 0

    def remove(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if not keys:
            return
        with self.transaction() as conn:
            conn.executemany("DELETE FROM entries WHERE key=?", [(k,) for k in keys])

    def rows(self, where: str = "", params: Iterable[Any] = (), order: str = "") -> list[IndexRow]:
        sql = f"SELECT {_ROW_COLUMNS} FROM entries"
        if where:
            sql += f" WHERE {where}"
        if order:
            sql += f" ORDER BY {order}"
        return [IndexRow(*r) for r in self._query(sql, params)]

    def least_recently_used(self, limit: int, offset: int = 0) -> list[IndexRow]:
        """The ``limit`` entries used longest ago (an index range scan, not a scan of the store)."""
        return [IndexRow(*r) for r in self._query(
            f"SELECT {_ROW_COLUMNS} FROM entries ORDER BY last_used ASC, key ASC LIMIT ? OFFSET ?", (limit, offset))]

    def get(self, key: str) -> IndexRow | None:
        found = self.rows("key=?", (key,))
        return found[0] if found else None

    def totals(self) -> tuple[int, int]:
        """(entry count, total bytes)."""
        rows = self._query("SELECT entries, bytes FROM totals WHERE id = 0")
        return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)

    # -- counters ------------------------------------------------------------------------------------------
    def add_counters(self, deltas: dict[str, float]) -> None:
        deltas = {k: v for k, v in deltas.items() if v}
        if not deltas:
            return
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                list(deltas.items()),
            )

    def counters(self) -> dict[str, float]:
        return {name: value for name, value in self._query("SELECT name, value FROM counters")}

    def reset_counters(self) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM counters")

    # -- versions manifest ---------------------------------------------------------------------------------
    def record_version(self, version: str, description: dict[str, Any], when: float | None = None) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO versions (version, description, last_open) VALUES (?, ?, ?) "
                "ON CONFLICT(version) DO UPDATE SET description=excluded.description, "
                "last_open=MAX(last_open, excluded.last_open)",
                (version, json.dumps(description, sort_keys=True), when or time.time()),
            )

    def versions(self) -> dict[str, tuple[dict[str, Any], float]]:
        return {v: (json.loads(d), t) for v, d, t in self._query("SELECT version, description, last_open FROM versions")}

    def forget_version(self, version: str) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM versions WHERE version=?", (version,))
