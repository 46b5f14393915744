"""The cache index: one SQLite database (``index.db``) beside the entry files, shared by all processes.

It holds what must be cheap to query or exact under concurrency:

- ``entries``: one row per entry file (size, created, last used, version, name): LRU order, listings and
  per-version purges without opening every file;
- ``totals``: entry count and bytes, kept by triggers, so the size-cap check on every put is O(1);
- ``counters``: the persistent stats (hits, misses, compiles, ...), incremented in transactions so
  concurrent processes never lose a count;
- ``versions``: the manifest of compiler versions seen, each with its last-open time and description;
  the CLI reads the current identity from here instead of importing TensorFlow;
- ``meta``: when the index was built (a rebuild changes it) and when it was last checked against the files;
- ``entry_parts`` and ``misses``: what explains misses, kept by core/index/misses.py through :meth:`CacheIndex.run`.

**Derived data.** Every entry file describes itself (codec.py's header), so the index can always be
rebuilt from the entry files (core/index/rebuild.py). This module only says when it must be: a database SQLite
cannot read as sound (not a database, malformed, truncated, text that does not decode, a row that is not
an entry row, -wal/-shm files that cannot be opened) raises :class:`IndexCorruptError`; an owner that set
``on_corrupt`` (CacheDir) rebuilds the index, and the operation that failed runs once more on the new one.
Opening compares the stored schema with graphcache's (a flipped byte in a trigger's text passes SQLite's
checks and fails, or miscounts, only when a write fires it) and, with ``quick_check``, runs SQLite's quick
check, which reads every page (its time grows with the rows): the CLI's views do, a GraphCache does not
(every process would pay it). Its damage is found by the operation that reads it
(``classify``: rebuilt through ``on_corrupt``) or by :meth:`CacheIndex.check` (SQLite's integrity check,
rows, totals, counters), which the periodic check (CacheDir.converge) and ``verify`` run.

**Busy.** A write waits ``timeout`` seconds for the write lock, then raises :class:`IndexBusyError`; from
then on writes wait only ``BUSY_RETRY`` until one succeeds, so a process that holds the lock for ever (hung,
stopped) costs each other process one bounded wait, not one per operation. Readers never wait (WAL).

**Schema** (core/index/schema.py): ``PRAGMA user_version`` is the schema version; the missing migration steps
are applied in one transaction at open.

WAL mode with ``synchronous=NORMAL``: a commit costs no fsync (the database stays consistent after a
crash; at worst the last counter increments before a power loss are lost, never an entry).
The standard library's sqlite3 is the right tool here: transactional, multi-process, no dependency.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from .schema import (
    META_BUILT,
    MIGRATIONS,
    ROW_COLUMNS,
    SCHEMA_VERSION,
    UPSERT,
    IndexRow,
    row_values,
    schema_problems,
    statements,
)

INDEX_FILE = "index.db"
BUSY_RETRY = 0.05  # seconds a write waits for the lock after a full wait expired, until a write succeeds

class IndexCorruptError(sqlite3.DatabaseError):
    """The index cannot be read as a sound database: it must be rebuilt from the entry files."""


class IndexBusyError(sqlite3.OperationalError):
    """Another connection held the index's write lock for the whole wait."""


class IndexProblem(NamedTuple):
    """Something wrong with the index itself (not with the entry files): ``kind`` is ``unreadable``,
    ``integrity`` or ``rows`` (only a rebuild fixes those), ``totals`` or ``counters`` (fixed in place)."""

    kind: str
    text: str

    @property
    def needs_rebuild(self) -> bool:
        return self.kind in ("unreadable", "integrity", "rows")


_HEX = frozenset("0123456789abcdef")
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# At open, these mean that index.db, its -wal or its -shm cannot be used at all (a directory in the way,
# a file that cannot be written or read): the files are set aside and the index rebuilt, like a corrupt one.
_UNUSABLE_AT_OPEN = frozenset({sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR})
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_CORRUPT_TEXT = ("malformed", "not a database", "Could not decode")

# What an index operation can raise when the database is damaged: SQLite's errors, and text that is not UTF-8.
INDEX_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, UnicodeDecodeError)

T = TypeVar("T")


def classify(exc: sqlite3.Error | UnicodeDecodeError, *, opening: bool = False) -> sqlite3.Error:
    """``exc`` as IndexCorruptError or IndexBusyError when it is one of those, else ``exc`` itself. Text
    SQLite returns that is not UTF-8 (a message quoting damaged schema text, say) is corruption too."""
    if isinstance(exc, IndexCorruptError | IndexBusyError):
        return exc
    if isinstance(exc, UnicodeDecodeError):
        return IndexCorruptError(f"the index holds text that is not UTF-8 ({exc})")
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    text = str(exc)
    if code in _BUSY_CODES or "database is locked" in text:
        return IndexBusyError(text)
    if code in _CORRUPT_CODES or any(word in text for word in _CORRUPT_TEXT) or (
            opening and code in _UNUSABLE_AT_OPEN):
        return IndexCorruptError(text)
    return exc


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _row(values: tuple) -> IndexRow:
    """An IndexRow from a database row, checked: a bit flip can change a value's type or a key's text, and
    such a row must never reach arithmetic or a file path."""
    key, name, kind, size, created, last_used, version, identity, compile_seconds = values
    if not (isinstance(key, str) and len(key) == 32 and _HEX.issuperset(key) and isinstance(size, int)
            and size >= 0 and _number(created) and _number(last_used) and _number(compile_seconds)
            and all(isinstance(text, str) for text in (name, kind, version, identity))):
        raise IndexCorruptError(f"the index holds a row that is not an entry row ({values[0]!r})")
    return IndexRow(key, name, kind, size, float(created), float(last_used), version, identity,
                    float(compile_seconds))


def _check_lines(conn: sqlite3.Connection, pragma: str) -> list[str]:
    """The lines of SQLite's ``integrity_check`` or ``quick_check``: they quote damaged text, so they are
    decoded leniently (data is decoded strictly everywhere else: undecodable text is corruption)."""
    strict = conn.text_factory
    conn.text_factory = lambda raw: raw.decode(errors="replace")
    try:
        return [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}").fetchall()]
    finally:
        conn.text_factory = strict


def _quick_check(conn: sqlite3.Connection, pages: bool = True) -> None:
    """SQLite's quick check (every page well-formed; ``pages=False`` skips it) and the stored schema against
    graphcache's (sqlite_master alone: cheap whatever the index's size)."""
    if pages:
        lines = _check_lines(conn, "quick_check")
        if lines != ["ok"]:
            raise IndexCorruptError(f"SQLite's quick check failed: {'; '.join(map(str, lines[:3]))}")
    for problem in schema_problems(conn):
        raise IndexCorruptError(problem)


def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


class CacheIndex:
    """One SQLite connection per process, shared by its threads (an RLock serialises them).

    ``memory=True``: an index in memory only (a listing of a cache dir whose index cannot be rebuilt).
    ``quick_check``: run SQLite's quick check at each connect (see above).
    """

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False, timeout: float = 60.0,
                 memory: bool = False, quick_check: bool = True) -> None:
        self.path = Path(root) / INDEX_FILE
        self.read_only = read_only
        self.timeout = timeout
        self.memory = memory
        self.quick_check = quick_check
        self.on_corrupt: Callable[[IndexCorruptError], bool] | None = None
        self.created_now = False  # this open created the index's tables (a new cache dir, or a lost index)
        self.was_empty = False  # ... in a file that was already there (emptied, truncated to nothing)
        self.built: float | None = None  # META_BUILT when opened (None: an index from before meta existed)
        self._lock = threading.RLock()
        self._busy = False
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the connection opened
        self._closed = False  # closed for good (close()), as opposed to disconnected to be healed
        if read_only and not memory and not self.path.exists():
            self.created_now = True
            self._closed = True
            return
        self._connect()

    # -- the connection ------------------------------------------------------------------------------------
    def _connect(self) -> None:
        try:
            self._connect_as("?mode=ro" if self.read_only else "")
        except INDEX_ERRORS as exc:
            code = (getattr(exc.__cause__ or exc, "sqlite_errorcode", None) or 0) & 0xFF
            if not (self.read_only and code in _UNUSABLE_AT_OPEN and not os.access(self.path.parent, os.W_OK)):
                raise
            # A read-only mount: SQLite cannot create the -shm a WAL index needs to be read; nothing can write
            # the file through this mount, so it is read as immutable (no locks, no -shm).
            self._connect_as("?mode=ro&immutable=1")

    def _connect_as(self, query: str) -> None:
        existed = not self.memory and self.path.exists()
        if self.memory:
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        elif query:
            conn = sqlite3.connect(self.path.absolute().as_uri() + query, uri=True, timeout=self.timeout,
                                   check_same_thread=False, isolation_level=None)
        else:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout, check_same_thread=False,
                                   isolation_level=None)
        try:
            if not self.memory:
                identity = os.stat(self.path)
                self._file = (identity.st_dev, identity.st_ino)
            if not self.read_only and not self.memory:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate(conn, existed)
            if not self.memory:
                _quick_check(conn, pages=self.quick_check)
            self.built = self._read_meta(conn, META_BUILT)
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            if isinstance(exc, INDEX_ERRORS):
                error = classify(exc, opening=True)
                if error is not exc:
                    raise error from exc
            raise
        self._conn = conn
        self._busy = False

    def _migrate(self, conn: sqlite3.Connection, existed: bool) -> None:
        """Bring the schema to SCHEMA_VERSION (one transaction; a read-only index is read as it is)."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION or self.read_only:
            if "entries" not in _table_names(conn):
                raise IndexCorruptError("it holds no index tables (emptied or truncated)")
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated
            had_entries = "entries" in _table_names(conn)
            for step in MIGRATIONS[version:]:
                for statement in statements(step):
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            if not had_entries:
                conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (META_BUILT, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        self.created_now = not had_entries
        self.was_empty = existed and not had_entries

    @staticmethod
    def _read_meta(conn: sqlite3.Connection, name: str) -> float | None:
        try:
            row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # an index from before schema 2, opened read-only
                return None
            raise
        return float(row[0]) if row is not None and _number(row[0]) else None

    @property
    def available(self) -> bool:
        return self._conn is not None

    @property
    def busy(self) -> bool:
        """The last write found the write lock held for the whole wait (and no write succeeded since)."""
        return self._busy

    def close(self) -> None:
        """Close for good: reads find nothing and writes fail until ``reopen``."""
        with self._lock:
            self.disconnect()
            self._closed = True

    def disconnect(self) -> None:
        """Drop the connection; the next operation connects again (a healer does this before it rebuilds)."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
                self._conn = None

    def reopen(self) -> None:
        """Connect again (after a rebuild put a new index in place); raises like opening does."""
        with self._lock:
            self.disconnect()
            self._closed = False
            self._connect()

    def _connection(self) -> sqlite3.Connection | None:
        """The connection, reopened first when another process replaced index.db (a rebuild) since it was
        opened: a connection to the old file would read and write a database nobody else sees."""
        if self._conn is None and not self._closed:
            self._connect()
        if self._conn is not None and self._file is not None:
            try:
                identity = os.stat(self.path)
            except OSError:
                return self._conn
            if (identity.st_dev, identity.st_ino) != self._file:
                self.reopen()
        return self._conn

    def _run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool, heal: bool = True,
             default: Any = None) -> T:
        """``fn(connection)``, in an IMMEDIATE transaction when ``write`` (the write lock is taken up front,
        so concurrent writers queue). A corrupt index is rebuilt through ``on_corrupt`` (unless ``heal`` is
        False) and ``fn`` runs once more; a closed index returns ``default`` for reads."""
        with self._lock:
            healed = False
            while True:
                try:
                    conn = self._connection()
                    if conn is None:
                        if write:
                            raise sqlite3.OperationalError("index not available")
                        return default
                    result = self._execute(conn, fn, write)
                except INDEX_ERRORS as exc:
                    error = classify(exc)
                    if isinstance(error, IndexBusyError):
                        self._enter_busy(error)
                    elif (isinstance(error, IndexCorruptError) and heal and not healed
                          and self.on_corrupt is not None):
                        healed = True
                        if self.on_corrupt(error):
                            continue
                    if error is exc:
                        raise
                    raise error from exc
                if write and self._busy:
                    self._leave_busy()
                return result

    @staticmethod
    def _execute(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        if not write:
            return fn(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return result

    def _enter_busy(self, error: IndexBusyError) -> None:
        if not self._busy and self._conn is not None:
            self._busy = True
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_RETRY * 1000)}")
        error.args = (f"the index's write lock has been held by another process for over {self.timeout:g}s "
                      f"({error})",)

    def _leave_busy(self) -> None:
        self._busy = False
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")

    def run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool, default: Any = None) -> T:
        """``fn(connection)`` with this index's transaction, busy and healing rules (see ``_run``): for the
        modules that keep their own tables here (core/index/misses.py)."""
        return self._run(fn, write=write, default=default)

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        return self._run(lambda conn: conn.execute(sql, tuple(params)).fetchall(), write=False, default=[])

    # -- entries -------------------------------------------------------------------------------------------
    def upsert(self, row: IndexRow) -> None:
        self.upsert_many([row])

    def upsert_many(self, rows: Iterable[IndexRow]) -> None:
        values = [row_values(row) for row in rows]
        if values:
            self._run(lambda conn: conn.executemany(UPSERT, values), write=True)

    def touch(self, key: str, when: float | None = None) -> bool:
        """Record a use; returns False when the entry has no row (the caller then re-adds it)."""
        stamp = when or time.time()
        return self._run(lambda conn: conn.execute("UPDATE entries SET last_used=? WHERE key=?",
                                                   (stamp, key)).rowcount > 0, write=True)

    def touch_many(self, uses: dict[str, float]) -> list[str]:
        """Record uses (key -> when) in one transaction; returns the keys that have no row."""
        items = list(uses.items())
        if not items:
            return []
        return self._run(lambda conn: [key for key, when in items if conn.execute(
            "UPDATE entries SET last_used=MAX(last_used, ?) WHERE key=?", (when, key)).rowcount == 0], write=True)

    def remove(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            self._run(lambda conn: conn.executemany("DELETE FROM entries WHERE key=?", [(k,) for k in keys]),
                      write=True)

    def rows(self, where: str = "", params: Iterable[Any] = (), order: str = "") -> list[IndexRow]:
        sql = f"SELECT {ROW_COLUMNS} FROM entries"
        if where:
            sql += f" WHERE {where}"
        if order:
            sql += f" ORDER BY {order}"
        params = tuple(params)
        return self._run(lambda conn: [_row(r) for r in conn.execute(sql, params).fetchall()], write=False,
                         default=[])

    def least_recently_used(self, limit: int, offset: int = 0) -> list[IndexRow]:
        """The ``limit`` entries used longest ago (an index range scan, not a scan of the store)."""
        return self.rows(order=f"last_used ASC, key ASC LIMIT {int(limit)} OFFSET {int(offset)}")

    def get(self, key: str) -> IndexRow | None:
        found = self.rows("key=?", (key,))
        return found[0] if found else None

    def totals(self) -> tuple[int, int]:
        """(entry count, total bytes)."""
        rows = self._query("SELECT entries, bytes FROM totals WHERE id = 0")
        if not rows:
            return (0, 0)
        entries, size = rows[0]
        if not (isinstance(entries, int) and isinstance(size, int)):
            raise IndexCorruptError(f"the totals row holds {rows[0]!r}")
        return entries, size

    def totals_by_kind(self) -> dict[str, tuple[int, int]]:
        """kind -> (entry count, total bytes), from a scan of the rows (stats asks, rarely)."""
        rows = self._query("SELECT kind, COUNT(*), COALESCE(SUM(size), 0) FROM entries GROUP BY kind")
        return {kind: (count, size) for kind, count, size in rows if isinstance(kind, str)}

    # -- counters ------------------------------------------------------------------------------------------
    def add_counters(self, deltas: dict[str, float]) -> None:
        items = [(k, v) for k, v in deltas.items() if v]
        if items:
            self._run(lambda conn: conn.executemany(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", items), write=True)

    def counters(self) -> dict[str, float]:
        return {name: value for name, value in self._query("SELECT name, value FROM counters")
                if isinstance(name, str) and _number(value)}

    def reset_counters(self) -> None:
        self._run(lambda conn: conn.execute("DELETE FROM counters"), write=True)

    # -- versions manifest ---------------------------------------------------------------------------------
    def record_version(self, version: str, description: dict[str, Any], when: float | None = None, *,
                       unless_within: float = 0.0) -> None:
        """Record ``version`` as opened at ``when`` (now). ``unless_within``: leave a row with the same description
        opened less than that many seconds ago as it is (a read, no write lock: every process's open calls this)."""
        stamp = when or time.time()
        text = json.dumps(description, sort_keys=True)
        if unless_within > 0:
            row = self._run(lambda conn: conn.execute("SELECT description, last_open FROM versions WHERE version=?",
                                                      (version,)).fetchone(), write=False)
            if row is not None and row[0] == text and _number(row[1]) and 0 <= stamp - float(row[1]) < unless_within:
                return
        self._run(lambda conn: conn.execute(
            "INSERT INTO versions (version, description, last_open) VALUES (?, ?, ?) "
            "ON CONFLICT(version) DO UPDATE SET description=excluded.description, "
            "last_open=MAX(last_open, excluded.last_open)", (version, text, stamp)), write=True)

    def versions(self) -> dict[str, tuple[dict[str, Any], float]]:
        found: dict[str, tuple[dict[str, Any], float]] = {}
        for version, description, last_open in self._query("SELECT version, description, last_open FROM versions"):
            try:
                info = json.loads(description)
            except (TypeError, ValueError):
                raise IndexCorruptError(f"the versions manifest holds {description!r} for {version!r}") from None
            if not (isinstance(version, str) and isinstance(info, dict) and _number(last_open)):
                raise IndexCorruptError(f"the versions manifest holds a bad row for {version!r}")
            found[version] = (info, float(last_open))
        return found

    def forget_version(self, version: str) -> None:
        self._run(lambda conn: conn.execute("DELETE FROM versions WHERE version=?", (version,)), write=True)

    # -- meta and checks -----------------------------------------------------------------------------------
    def meta(self, name: str) -> float | None:
        return self._run(lambda conn: self._read_meta(conn, name), write=False)

    def claim(self, name: str, every: float, now: float | None = None) -> bool:
        """Set meta ``name`` to ``now`` when it is unset or older than ``every`` seconds: True when this call
        did, so one process per interval runs a periodic check."""
        stamp = time.time() if now is None else now
        last = self.meta(name)  # not due: answered by a read, without the write lock every open would queue on
        if last is not None and 0 <= stamp - last < every:
            return False

        def claim(conn: sqlite3.Connection) -> bool:
            last = self._read_meta(conn, name)
            if last is not None and 0 <= stamp - last < every:
                return False
            conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, stamp))
            return True
        return self._run(claim, write=True)

    def check(self, *, full: bool = True) -> list[IndexProblem]:
        """The index's own problems, without repairing anything: SQLite's integrity check (``full``) or quick
        check, the stored schema against graphcache's, rows that are not entry rows, the trigger-kept totals against the rows, counters that are
        negative or not numbers. An index that cannot be read at all is one ``unreadable`` problem."""
        def inspect(conn: sqlite3.Connection) -> list[IndexProblem]:
            found: list[IndexProblem] = []
            lines = _check_lines(conn, "integrity_check" if full else "quick_check")
            if lines != ["ok"]:
                more = f" (and {len(lines) - 3} more)" if len(lines) > 3 else ""
                found.append(IndexProblem("integrity", f"SQLite's integrity check failed: "
                                                       f"{'; '.join(lines[:3])}{more}"))
            found.extend(IndexProblem("integrity", problem) for problem in schema_problems(conn))
            bad_rows = 0
            for values in conn.execute(f"SELECT {ROW_COLUMNS} FROM entries"):
                try:
                    _row(values)
                except IndexCorruptError:
                    bad_rows += 1
            if bad_rows:
                found.append(IndexProblem("rows", f"{bad_rows} rows are not entry rows (bad keys or values)"))
            kept = conn.execute("SELECT entries, bytes FROM totals WHERE id = 0").fetchone()
            actual = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries").fetchone()
            if kept is None or tuple(kept) != tuple(actual):
                said = "is missing" if kept is None else f"says {kept[0]} entries and {kept[1]} bytes"
                found.append(IndexProblem("totals", f"the totals row {said}; the rows hold {actual[0]} entries "
                                                    f"and {actual[1]} bytes"))
            bad = [f"{name}={value!r}" for name, value in conn.execute("SELECT name, value FROM counters")
                   if not (_number(value) and value >= 0)]
            if bad:
                found.append(IndexProblem("counters", f"counters that are negative or not numbers: "
                                                      f"{', '.join(bad[:5])}"))
            return found
        try:
            return self._run(inspect, write=False, heal=False, default=[])
        except sqlite3.Error as exc:
            return [IndexProblem("unreadable", str(exc))]

    def recount(self) -> None:
        """Set the totals row from the rows (after a check found them apart)."""
        self._run(lambda conn: conn.execute(
            "INSERT OR REPLACE INTO totals (id, entries, bytes) SELECT 0, COUNT(*), COALESCE(SUM(size), 0) "
            "FROM entries"), write=True)

    def drop_bad_counters(self) -> None:
        """Remove counters that are negative or not numbers (a bit flip); the others are kept."""
        self._run(lambda conn: conn.execute(
            "DELETE FROM counters WHERE typeof(value) NOT IN ('integer', 'real') OR value < 0 "
            "OR value > 1e300"), write=True)


def copy_index(source: str | os.PathLike[str], target: str | os.PathLike[str], timeout: float) -> None:
    """Copy the index at ``source`` over the database at ``target`` through SQLite's backup API: in place and
    under SQLite's own locks, so processes connected to ``target`` read the new content at their next
    transaction. Raises sqlite3.Error when ``target`` cannot be written as a database (it must be replaced)."""
    src = sqlite3.connect(str(source))
    try:
        dest = sqlite3.connect(str(target), timeout=timeout, isolation_level=None)
        try:
            src.backup(dest)
            _quick_check(dest)
        finally:
            dest.close()
    finally:
        src.close()


def probe_built(path: str | os.PathLike[str]) -> float | None:
    """META_BUILT of the index at ``path`` when it opens read-only and passes the quick check, else None."""
    if not Path(path).is_file():
        return None
    try:
        conn = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True, timeout=5.0)
    except INDEX_ERRORS:
        return None
    try:
        _quick_check(conn)
        return CacheIndex._read_meta(conn, META_BUILT)
    except INDEX_ERRORS:
        return None
    finally:
        conn.close()
