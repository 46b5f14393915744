"""The entry commands: ``ls``, ``show``, ``purge`` and ``verify`` (TensorFlow-free, like the whole CLI).

``purge`` plans first (:func:`graphcache.cli.selection.purge_plan`), shows the plan, asks, then acts,
so ``--dry-run`` is the plan alone. The cache-wide commands (``dir``, ``stats``, ``zero-stats``) are in
:mod:`graphcache.cli.info`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Column, Table

from ..core.cachedir import CacheDir
from ..core.index.audit import Drift, VerifyReport
from ..core.index.database import INDEX_FILE
from ..core.index.rebuild import REBUILT
from ..entry import codec
from ..entry.keyparts import identity_id
from ..errors import CorruptEntryError
from .errors import PROG, CliError
from .options import (
    cache_dir_option,
    cache_root,
    current_version,
    filter_option,
    json_option,
    max_size_option,
    older_than_option,
    open_cache,
    output_mode,
    remote_option,
    sort_option,
    usage_error,
)
from .output import (
    Mode,
    ago,
    confirm,
    duration,
    emit,
    format_size,
    grid,
    iso,
    message,
    plural,
    plural_entries,
    progress,
    spinner,
    table,
    version_cell,
)
from .remote import ls_remote, purge_remote
from .selection import purge_plan, resolve_key, select_rows

if TYPE_CHECKING:
    from ..core.filters import Filter, SortOrder
    from ..core.index.database import IndexRow
    from ..store import LocalStore, StoredFile

PURGE_CHUNK = 256  # keys per CacheDir.purge call (one progress step)


# -- ls ---------------------------------------------------------------------------------------------------------
def row_json(row: IndexRow) -> dict[str, Any]:
    return {
        "key": row.key, "name": row.name, "kind": row.kind, "size": row.size,
        "created": iso(row.created), "last_used": iso(row.last_used),
        "version": row.version, "identity_id": row.identity, "compile_seconds": row.compile_seconds,
        "identity": row.version,  # graphcache 0.1's name for the version, kept for existing scripts
    }


def entries_table(rows: Sequence[IndexRow], *, now: float, current: str) -> Table:
    view = table(Column("KEY", no_wrap=True, min_width=32), "NAME", Column("SIZE", justify="right", no_wrap=True),
                 Column("CREATED", no_wrap=True), Column("LAST USED", no_wrap=True),
                 Column("IDENTITY", no_wrap=True), Column("COMPILE TIME", justify="right", no_wrap=True))
    for row in rows:
        view.add_row(row.key, row.name or "-", format_size(row.size), ago(row.created, now),
                     ago(row.last_used, now), version_cell(row.version, current), duration(row.compile_seconds))
    return view


@click.command("ls")
@json_option
@click.option("-q", "--quiet", is_flag=True, help="Print keys only, one per line.")
@sort_option
@click.option("--limit", type=click.IntRange(min=0), metavar="N", help="Show at most N entries.")
@filter_option
@remote_option("List the remote cache's entries ({env}), every version, newest first.")
@cache_dir_option
def ls_command(as_json: bool, quiet: bool, order: SortOrder | None, limit: int | None,
               filters: list[Filter], remote: bool) -> None:
    """List entries."""
    mode = output_mode(as_json, quiet)
    now = time.time()
    if remote:
        if order is not None or filters:
            raise usage_error("--sort and --filter apply to local entries only, not with --remote")
        ls_remote(mode, limit, now)
        return
    cache = open_cache()
    rows = select_rows(cache, filters, now, order)
    if limit is not None:
        rows = rows[:limit]
    current = current_version(cache)
    if mode is Mode.TABLE and not rows:
        message("No entries." if cache is not None else f"No entries ({cache_root()} does not exist).")
        return
    emit(mode, data=[row_json(row) for row in rows], lines=lambda: (row.key for row in rows),
         human=lambda: entries_table(rows, now=now, current=current))


# -- show -------------------------------------------------------------------------------------------------------
def entry_json(key: str, stored: StoredFile, header: codec.EntryHeader, row: IndexRow | None, current: str
               ) -> dict[str, Any]:
    return {
        "key": key, "path": stored.path, "name": header.name, "kind": header.kind, "size": stored.size,
        "payload_size": header.payload_size, "created": iso(header.created),
        "last_used": iso(row.last_used) if row is not None else None, "version": header.version,
        "current": header.version == current, "identity": header.identity,
        "identity_id": identity_id(header.identity) if header.identity else "",
        "compile_seconds": header.compile_seconds, "key_parts": header.key_parts, "extra": header.extra,
    }


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "-"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def entry_view(entry: dict[str, Any], now: float) -> Table:
    view = grid()
    view.add_row("Key", entry["key"])
    view.add_row("Path", entry["path"])
    view.add_row("Name", entry["name"] or "-")
    view.add_row("Kind", entry["kind"])
    view.add_row("Size", f"{format_size(entry['size'])} on disk, {format_size(entry['payload_size'])} payload")
    for label, field in (("Created", "created"), ("Last used", "last_used")):
        when = entry[field]
        view.add_row(label, f"{when} ({ago(datetime.fromisoformat(when).timestamp(), now)})" if when else "-")
    view.add_row("Version", entry["version"] + ("  (current)" if entry["current"] else "  (not current)"))
    view.add_row("Compile time", duration(entry["compile_seconds"]))
    view.add_row("Identity", "\n".join(f"{k}: {_text(v)}" for k, v in sorted(entry["identity"].items())) or "-")
    view.add_row("Identity id", entry["identity_id"] or "-")
    view.add_row("Key parts", "\n".join(f"{k}: {v}" for k, v in sorted(entry["key_parts"].items())) or "-")
    for name, value in sorted(entry["extra"].items()):
        if name == "node_table" and isinstance(value, dict):  # the source graph's nodes, for explain
            value = f"{value.get('nodes', '?')} nodes ({format_size(len(str(value.get('data', ''))))})"
        view.add_row(name.replace("_", " ").capitalize(), _text(value))
    return view


@click.command("show")
@click.argument("key")
@json_option
@cache_dir_option
def show_command(key: str, as_json: bool) -> None:
    """Show one entry's header. KEY may be a unique prefix."""
    cache = open_cache()
    full = resolve_key(cache, key)
    assert cache is not None  # resolve_key found the key in it
    stored = cache.store.stat(full)
    try:
        head = cache.store.read_head(full)
        if stored is None or head is None:
            raise FileNotFoundError(full)
        header = codec.peek_header(head)
    except FileNotFoundError:
        raise CliError(f"entry {full} is indexed but its file is gone (run '{PROG} purge {full} --yes')") from None
    except CorruptEntryError as exc:
        raise CliError(f"entry {full} is corrupt: {exc} (run '{PROG} verify --fix')") from None
    row = cache.index.get(full) if cache.index is not None else None
    entry = entry_json(full, stored, header, row, current_version(cache))
    now = time.time()
    emit(output_mode(as_json), data=entry, human=lambda: entry_view(entry, now))


# -- purge ------------------------------------------------------------------------------------------------------
def remove(cache: CacheDir, rows: Sequence[IndexRow], *, stale: bool) -> tuple[list[str], int, int]:
    """Delete the planned entries: (keys removed, count, bytes freed)."""
    if stale:
        with spinner("Purging stale versions..."):
            result = cache.purge(stale=True)
        removed = [row.key for row in rows if cache.store.stat(row.key) is None]
        return removed, result.entries, result.bytes
    keys = [row.key for row in rows]
    count = freed = 0
    with progress("Purging", len(keys)) as bar:
        for start in range(0, len(keys), PURGE_CHUNK):
            chunk = keys[start:start + PURGE_CHUNK]
            result = cache.purge(keys=chunk)
            count, freed = count + result.entries, freed + result.bytes
            bar.advance(len(chunk))
    return keys, count, freed


@click.command("purge", short_help="Remove entries: --all, --stale, --older-than, --filter or KEYS.")
@click.argument("keys", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Remove every entry.")
@click.option("--stale", is_flag=True, help="Remove the entries of every version other than the current one.")
@older_than_option
@max_size_option
@filter_option
@click.option("--dry-run", is_flag=True, help="Show what would be removed, remove nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@remote_option("Purge the remote cache ({env}) instead: --all, --stale (every version prefix but the current "
               "one), --max-size (the fleet's least recently used beyond it) or KEYS.")
@json_option
@cache_dir_option
def purge_command(keys: tuple[str, ...], everything: bool, stale: bool, older_than: Filter | None,
                  max_size: int | None, filters: list[Filter], dry_run: bool, yes: bool, remote: bool,
                  as_json: bool) -> None:
    """Remove entries: --all, --stale, --older-than/--filter (combined: all must match), or KEYS.

    KEYS may be unique prefixes. Asks for confirmation on a terminal; pass --yes otherwise.
    """
    filters = [*filters, *([older_than] if older_than else [])]
    selectors = [name for name, given in (("--all", everything), ("--stale", stale), ("KEYS", keys),
                                          ("--max-size", max_size is not None),
                                          ("--older-than/--filter", filters)) if given]
    if not selectors:
        raise usage_error("nothing selected: give --all, --stale, --older-than, --max-size, --filter or KEYS")
    if len(selectors) > 1:
        raise usage_error(f"{' and '.join(selectors)} cannot be combined")
    mode = output_mode(as_json)
    now = time.time()
    if remote:
        if filters:
            raise usage_error("--remote takes --all, --stale, --max-size or KEYS")
        purge_remote(everything=everything, stale=stale, keys=keys, dry_run=dry_run, yes=yes, mode=mode, now=now,
                     max_size=max_size)
        return
    cache = open_cache(write=not dry_run, reconcile=True)
    rows = purge_plan(cache, everything=everything, stale=stale, keys=keys, filters=filters, max_size=max_size,
                      now=now)
    planned = sum(row.size for row in rows)
    if not rows:
        message("Nothing to purge.")
        emit(mode, data={"removed": [], "count": 0, "bytes": 0, "dry_run": dry_run}, human=lambda: None)
        return
    if dry_run:
        message(f"Would remove {plural_entries(len(rows))}, freeing {format_size(planned)} (dry run: nothing removed).")
        emit(mode, data={"removed": [r.key for r in rows], "count": len(rows), "bytes": planned, "dry_run": True},
             human=lambda: entries_table(rows, now=now, current=current_version(cache)))
        return
    assert cache is not None  # rows came from it
    message(f"About to remove {plural_entries(len(rows))} ({format_size(planned)}) from {cache.root}.")
    confirm(len(rows), yes)
    removed, count, freed = remove(cache, rows, stale=stale)
    message(f"Removed {plural_entries(count)}, freed {format_size(freed)}.")
    emit(mode, data={"removed": removed, "count": count, "bytes": freed, "dry_run": False}, human=lambda: None)


# -- verify -----------------------------------------------------------------------------------------------------
class ScanProgress:
    """A store proxy advancing a progress bar as its first ``scan()`` is consumed (verify has no hook)."""

    def __init__(self, store: LocalStore, advance: Callable[[int], None]) -> None:
        self._store = store
        self._advance: Callable[[int], None] | None = advance

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def scan(self) -> Iterator[Any]:
        advance, self._advance = self._advance, None
        for stored in self._store.scan():
            yield stored
            if advance is not None:
                advance(1)


def verify_view(report: VerifyReport) -> Table | None:
    if report.clean and not report.strays:
        return None
    view = table(Column("KEY / FILE", no_wrap=True), "PROBLEM")
    for problem in report.index:
        view.add_row(INDEX_FILE, problem.text.removeprefix(f"{INDEX_FILE}: "))
    for key, problem in report.bad:
        view.add_row(key, problem)
    for kind, keys in report.drift.as_dict().items():
        for key in keys:
            view.add_row(key, DRIFT_PROBLEMS[kind])
    for path in report.strays:
        view.add_row(str(path), "stray temp file (a writer died mid-write)")
    return view


# What the table says per drifted key, and the summary per kind (singular, plural); kinds: core/index/audit.py.
DRIFT_SUMMARY = {
    "missing_files": ("indexed entry whose file is gone", "indexed entries whose file is gone"),
    "unindexed": ("entry file the index lacks", "entry files the index lacks"),
    "wrong_size": ("row whose size is not its file's", "rows whose size is not their file's"),
    "wrong_header": ("row that disagrees with its entry's header", "rows that disagree with their entry's header"),
}
DRIFT_PROBLEMS = {
    "missing_files": "indexed, but its entry file is gone",
    "unindexed": "entry file the index has no row for",
    "wrong_size": "its row's size is not the file's",
    "wrong_header": "its row's version, kind or name differ from the entry's header",
}


def verify_json(report: VerifyReport, root: Path) -> dict[str, Any]:
    rebuild = report.rebuild
    return {
        "checked": report.checked, "clean": report.clean,
        "bad": [{"key": k, "problem": p} for k, p in report.bad],
        "stray_temp_files": [str(p) for p in report.strays], "fixed": report.fixed,
        "index": {"path": str((root / INDEX_FILE).absolute()), "ok": not report.index,
                  "problems": [{"kind": p.kind, "problem": p.text} for p in report.index],
                  "rebuilt": bool(rebuild and rebuild.outcome == REBUILT),
                  "entries_reindexed": rebuild.entries if rebuild else 0,
                  "set_aside_as": rebuild.aside if rebuild else ""},
        "drift": {**report.drift.as_dict(), "counts": report.drift.counts()},
    }


def verify_summary(report: VerifyReport) -> str:
    """One line: what was checked and what was wrong (or removed and repaired, after --fix)."""
    parts = []
    if report.index:
        parts.append(f"the index {INDEX_FILE} " + ("was" if report.fixed else "is") + " damaged ("
                     + "; ".join(p.text.removeprefix(f"{INDEX_FILE}: ") for p in report.index) + ")")
    if report.bad:
        parts.append(plural(len(report.bad), "bad entry", "bad entries"))
    for kind, count in report.drift.counts().items():
        if count:
            parts.append(plural(count, *DRIFT_SUMMARY[kind]))
    if report.strays:
        parts.append(plural(len(report.strays), "stray temp file"))
    summary = f"Checked {plural_entries(report.checked)}: "
    if not parts:
        return summary + "all good."
    if not report.fixed:
        return summary + ", ".join(parts) + "."
    done = []
    if report.index:
        rebuild = report.rebuild
        done.append(f"rebuilt the index ({plural_entries(rebuild.entries)} re-indexed, counters reset)"
                    if rebuild is not None and rebuild.outcome == REBUILT else "repaired the index")
    if report.bad:
        done.append(f"removed {plural(len(report.bad), 'bad entry', 'bad entries')}")
    if report.drift:
        done.append("brought the index in step with the entry files")
    if report.strays:
        done.append(f"removed {plural(len(report.strays), 'stray temp file')}")
    return summary + ", ".join(parts) + "; " + ", ".join(done) + "."


def open_for_verify(root: Path, fix: bool) -> CacheDir | None:
    """The cache dir as verify sees it: never healed on open (verify reports an unreadable index; --fix
    rebuilds it), never created."""
    if not root.exists():
        return None
    if not root.is_dir():
        raise CliError(f"cache dir {str(root)!r} is not a directory")
    if fix and not os.access(root, os.W_OK):
        raise CliError(f"cannot fix {root}: it is not writable (run '{PROG} verify' to see what is wrong)")
    return CacheDir(root, read_only=not fix, heal=False, warn=False)


@click.command("verify")
@click.option("--fix", is_flag=True, help="Remove bad entries and stray temp files; rebuild or repair the index.")
@json_option
@cache_dir_option
def verify_command(fix: bool, as_json: bool) -> None:
    """Check every entry's format and checksums, the index (SQLite's integrity check, its totals and
    counters) and the index against the entry files. Exits 1 when problems remain."""
    mode = output_mode(as_json)
    root = cache_root()
    cache = open_for_verify(root, fix)
    report = VerifyReport(0, [], [], Drift(), [])
    if cache is not None:
        total = sum(1 for _ in cache.store.scan())
        with progress("Verifying", total) as bar:
            if bar.shown:
                cache.store = ScanProgress(cache.store, bar.advance)  # type: ignore[assignment]
            report = cache.audit(fix=fix)
    emit(mode, data=verify_json(report, root), human=lambda: verify_view(report))
    message(verify_summary(report))
    if fix and report.index and not (report.rebuild is None or report.rebuild.usable):
        raise CliError(f"could not rebuild the index: {report.rebuild.warning(root / INDEX_FILE)}")
    if not report.clean and not fix:
        raise CliError(f"problems found; run '{PROG} verify --fix' to repair them")


COMMANDS = (ls_command, show_command, purge_command, verify_command)
