"""The ``graphcache`` command line: inspect and manage a cache dir without importing TensorFlow.

    graphcache [--cache-dir DIR] COMMAND [ARGS]

    dir          print the cache dir's path
    stats        entries, size, hit rate, counters, uncacheable lookups, current identity
    zero-stats   reset the counters
    ls           list entries (filter, sort, limit; --json, -q); --remote: the remote cache's entries
    show KEY     one entry's header (a unique key prefix is enough)
    purge        remove entries: --all, --stale, --older-than, --filter, or KEYS; --remote (--all, --stale
                 or KEYS) removes remote entries
    verify       check every entry's format and checksums; --fix removes bad ones

Data (tables, JSON, keys) goes to stdout, messages, prompts and progress bars to stderr. Handlers raise;
the one runner, :func:`run`, maps exceptions to exit codes: 0 success (an empty or missing cache
included), 1 runtime failure, 2 usage error. ``GRAPHCACHE_DEBUG=1`` adds tracebacks.

Only TensorFlow-free modules are imported here (``import tensorflow`` alone takes over 2 s).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from . import __version__
from .core import codec, settings
from .core.cachedir import CacheDir
from .core.filters import Filter, FilterError, SortOrder, apply_filters, parse_filter, parse_sort, sort_rows
from .core.index import INDEX_FILE, IndexRow
from .core.keyparts import identity_id
from .core.stats import Stats
from .core.units import UnitError, format_size, parse_duration, parse_size
from .errors import CorruptEntryError, GraphCacheError
from .store import LocalStore, RemoteFile, RemoteStore

PROG = "graphcache"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
PURGE_CHUNK = 256  # keys per CacheDir.purge call (one progress step)
PROGRESS_MIN = 50  # show a progress bar from this many entries on (and only on a terminal)


class CliError(Exception):
    """A runtime failure to report as one ``graphcache: error: ...`` line (exit 1)."""


# -- consoles and output ----------------------------------------------------------------------------------------
def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def stdin_is_terminal() -> bool:
    return _is_terminal(sys.stdin)


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout/stderr; unbounded width when it is not a terminal (no wrapping)."""
    terminal = _is_terminal(sys.stderr if stderr else sys.stdout)
    return Console(stderr=stderr, markup=False, highlight=False, soft_wrap=not terminal,
                   width=None if terminal else 1 << 12)


def message(text: str, style: str | None = None) -> None:
    """A message for the user, on stderr."""
    console(stderr=True).print(text, style=style)


class Mode(enum.Enum):
    TABLE = "table"
    JSON = "json"
    QUIET = "quiet"


def output_mode(as_json: bool, quiet: bool = False) -> Mode:
    if as_json and quiet:
        raise usage_error("--json and --quiet cannot be combined")
    return Mode.JSON if as_json else Mode.QUIET if quiet else Mode.TABLE


def emit(mode: Mode, *, data: Any, human: Callable[[], RenderableType | None],
         lines: Callable[[], Iterable[str]] | None = None) -> None:
    """Write a command's result to stdout: JSON, one line per item (quiet), or a rich renderable."""
    if mode is Mode.JSON:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    elif mode is Mode.QUIET and lines is not None:
        for line in lines():
            click.echo(line)
    else:
        renderable = human()
        if renderable is None:
            return
        out = console()
        if _is_terminal(sys.stdout):
            out.print(renderable)
            return
        with out.capture() as captured:  # no terminal: drop the padding rich puts after the last column
            out.print(renderable)
        click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


@contextlib.contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` for a transient progress bar on stderr, shown only when stderr is a terminal."""
    if total < PROGRESS_MIN or not _is_terminal(sys.stderr):
        yield lambda n: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


@contextlib.contextmanager
def spinner(text: str) -> Iterator[None]:
    """A transient spinner on stderr while an operation without progress steps runs (terminal only)."""
    if not _is_terminal(sys.stderr):
        yield
        return
    with console(stderr=True).status(text):
        yield


# -- formatting -------------------------------------------------------------------------------------------------
def iso(when: float) -> str | None:
    """A Unix time as UTC ISO-8601 (None for 0, an unknown time)."""
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds") if when else None


def ago(when: float, now: float) -> str:
    if not when:
        return "-"
    seconds = max(0.0, now - when)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now" if seconds < 1 else f"{int(seconds)}s ago"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m {secs:02d}s" if minutes < 60 else f"{minutes // 60}h {minutes % 60:02d}m"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def plural_entries(count: int) -> str:
    return plural(count, "entry", "entries")


def grid() -> Table:
    """A two-column label/value table without borders."""
    table = Table.grid(padding=(0, 3))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    return table


def row_json(row: IndexRow) -> dict[str, Any]:
    return {
        "key": row.key, "name": row.name, "kind": row.kind, "size": row.size,
        "created": iso(row.created), "last_used": iso(row.last_used),
        "identity": row.version, "identity_id": row.identity, "compile_seconds": row.compile_seconds,
    }


def entries_table(rows: Sequence[IndexRow], *, now: float, current: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("KEY", no_wrap=True, min_width=32)
    table.add_column("NAME")
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("CREATED", no_wrap=True)
    table.add_column("LAST USED", no_wrap=True)
    table.add_column("IDENTITY", no_wrap=True)
    table.add_column("COMPILE TIME", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(row.key, row.name or "-", format_size(row.size), ago(row.created, now),
                      ago(row.last_used, now), Text(row.version or "-", style="" if row.version == current else "dim"),
                      duration(row.compile_seconds))
    return table


# -- the cache dir ----------------------------------------------------------------------------------------------
@dataclass
class State:
    """What the group and the commands share: the explicit ``--cache-dir`` (the last one given wins)."""

    cache_dir: Path | None = None

    @property
    def root(self) -> Path:
        return self.cache_dir if self.cache_dir is not None else settings.default_cache_dir()


def cache_root() -> Path:
    return click.get_current_context().ensure_object(State).root


def open_cache(*, write: bool = False, reconcile: bool = False) -> CacheDir | None:
    """The cache dir, or None when it does not exist (read as empty; never created here).

    Read-only commands open the index read-only; an index missing beside entry files is rebuilt from them
    when the dir is writable. ``reconcile`` first brings the index in line with the entry files.
    """
    root = cache_root()
    if not root.exists():
        return None
    if not root.is_dir():
        raise CliError(f"cache dir {str(root)!r} is not a directory")
    if write:
        cache = CacheDir(root)
        if cache.index is not None and (reconcile or cache.index.created_now):
            cache.reconcile()
        return cache
    if (root / INDEX_FILE).exists() or not any(LocalStore(root).scan()):
        return CacheDir(root, read_only=True)
    try:
        cache = CacheDir(root)
        cache.reconcile()
        return cache
    except (OSError, sqlite3.Error):
        return CacheDir(root, read_only=True)


def all_rows(cache: CacheDir | None) -> list[IndexRow]:
    return cache.entries() if cache is not None else []


def current_version(cache: CacheDir | None) -> str:
    return cache.current_version() if cache is not None else ""


def select_rows(cache: CacheDir | None, filters: Sequence[Filter], now: float) -> list[IndexRow]:
    """The entries matching every filter, most recently used first."""
    rows = all_rows(cache)
    current = current_version(cache)
    if rows and not current and any(f.uses_current for f in filters):
        raise CliError(f"no current version is recorded in {cache_root()}: 'identity=current' has nothing to "
                       "compare with (open the cache with GraphCache once)")
    return apply_filters(rows, filters, now=now, current_version=current)


_KEY_PREFIX = re.compile(r"[0-9a-f]{1,32}")


def resolve_key(cache: CacheDir | None, prefix: str) -> str:
    """The one key starting with ``prefix``; CliError when none or several do."""
    text = prefix.strip().lower()
    if not _KEY_PREFIX.fullmatch(text):
        raise CliError(f"{prefix!r} is not a cache key (32 hex digits, or a unique prefix of one)")
    matches: set[str] = set()
    if cache is not None:
        if cache.index is not None:
            matches.update(row.key for row in cache.index.rows("key >= ? AND key < ?", (text, text + "g")))
        if len(text) == 32:
            if cache.store.path_for(text).exists():
                matches.add(text)
        else:
            matches.update(f.key for f in cache.store.scan() if f.key.startswith(text))
    if not matches:
        raise CliError(f"no entry matches key {prefix!r} in {cache_root()}")
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:3]) + (", ..." if len(matches) > 3 else "")
        raise CliError(f"key prefix {prefix!r} is ambiguous: it matches {len(matches)} entries ({shown}); "
                       "give more digits")
    return matches.pop()


# -- option parsing ---------------------------------------------------------------------------------------------
def usage_error(text: str) -> click.UsageError:
    return click.UsageError(text, ctx=click.get_current_context(silent=True))


def _set_cache_dir(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.ensure_object(State).cache_dir = value.expanduser()


cache_dir_option = click.option(
    "--cache-dir", type=click.Path(file_okay=False, path_type=Path), expose_value=False,
    callback=_set_cache_dir, metavar="DIR",
    help=f"The cache dir [default: ${settings.ENV_DIR}, else the user cache dir].")


def _parse_filters(_ctx: click.Context, _param: click.Parameter, values: Sequence[str]) -> list[Filter]:
    try:
        return [parse_filter(value) for value in values]
    except FilterError as exc:
        raise click.BadParameter(str(exc)) from None


def _parse_sort(_ctx: click.Context, _param: click.Parameter, value: str | None) -> SortOrder | None:
    try:
        return parse_sort(value) if value is not None else None
    except FilterError as exc:
        raise click.BadParameter(str(exc)) from None


def _parse_size_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except UnitError as exc:
        raise click.BadParameter(str(exc)) from None


def _parse_age(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Filter | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except UnitError as exc:
        raise click.BadParameter(str(exc)) from None
    return Filter(f"accessed>{value}", "accessed", ">", seconds, "age")


filter_option = click.option(
    "--filter", "filters", multiple=True, callback=_parse_filters, metavar="EXPR",
    help="FIELD OP VALUE, repeatable (all must match). Fields: size (10MB, 1GiB), created and accessed "
         "(an age: 'accessed>7d' = unused for over 7 days, or an ISO date), identity ('identity!=current'), "
         "kind, name (globs allowed). OP: > < >= <= = !=. Quote it: --filter 'size>10MB'.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


# -- the runner -------------------------------------------------------------------------------------------------
def _debug() -> bool:
    try:
        return bool(settings.env_flag(settings.ENV_DEBUG))
    except ValueError:
        return True


def _error(text: str) -> None:
    click.echo(f"{PROG}: error: {text}", err=True)


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, CliError | GraphCacheError):
        return str(exc)
    if isinstance(exc, sqlite3.Error):
        return f"the cache index failed: {exc}"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return f"unexpected {type(exc).__name__}: {exc} (set {settings.ENV_DEBUG}=1 to see the traceback)"


def run(invoke: Callable[[], object]) -> int:
    """Call ``invoke`` (click in non-standalone mode) and map what it raises to an exit code."""
    no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", ())
    try:
        result = invoke()
    except no_args_help as exc:
        exc.show()
        return EXIT_USAGE
    except click.UsageError as exc:
        if exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
            click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)
        _error(exc.format_message())
        return exc.exit_code
    except click.Abort:
        _error("aborted")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        click.echo(err=True)
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `graphcache ls -q | head`: stop quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except click.ClickException as exc:
        _error(exc.format_message())
        return exc.exit_code
    except Exception as exc:
        if _debug():
            traceback.print_exception(exc, file=sys.stderr)
        _error(_failure_text(exc))
        return EXIT_FAILURE
    return result if isinstance(result, int) else EXIT_OK


class GraphCacheGroup(click.Group):
    """A group whose ``main`` runs through :func:`run`: one place maps exceptions to exit codes."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> int:
        code = run(lambda: super(GraphCacheGroup, self).main(
            args, prog_name or PROG, complete_var, standalone_mode=False, **extra))
        if standalone_mode:
            sys.exit(code)
        return code


def main(args: Sequence[str] | None = None, *, standalone_mode: bool = True) -> int:
    """The console script: run ``graphcache`` with ``args`` (default: ``sys.argv[1:]``).

    Exits with the command's exit code, or returns it when ``standalone_mode`` is False.
    """
    return cli.main(list(args) if args is not None else None, standalone_mode=standalone_mode)


# -- commands ---------------------------------------------------------------------------------------------------
@click.group(cls=GraphCacheGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=f"Environment: {settings.ENV_DIR} (the default cache dir), {settings.ENV_DEBUG}=1 (tracebacks).")
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
@cache_dir_option
def cli() -> None:
    """Inspect and manage a graphcache cache dir (compiled TensorFlow graphs).

    Exit codes: 0 success, 1 failure, 2 usage error.
    """


@cli.command("dir")
@cache_dir_option
def dir_command() -> None:
    """Print the cache dir's path."""
    root = cache_root()
    click.echo(str(root.absolute()))
    if not root.exists():
        message(f"note: {root} does not exist yet", style="dim")


def configured_max_size() -> int:
    """The size cap processes get by default here: GRAPHCACHE_MAX_SIZE, else 10 GiB (a GraphCache may set its own)."""
    return settings.resolve_size(None, settings.ENV_MAX_SIZE, settings.DEFAULT_MAX_SIZE)


def stats_json(stats: Stats, root: Path, versions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cache_dir": str(root.absolute()), "entries": stats.entries, "bytes": stats.bytes,
        "max_size": configured_max_size(),
        "hit_rate": stats.hit_rate, "hits": stats.hits, "misses": stats.misses, "compiles": stats.compiles,
        "compile_seconds": stats.compile_seconds, "saved_seconds": stats.saved_seconds,
        "bytes_written": stats.bytes_written, "bytes_evicted": stats.bytes_evicted, "evictions": stats.evictions,
        "errors": stats.errors,
        "uncacheable": dict(stats.uncacheable), "identity": stats.identity or None, "versions": versions,
        "remote": remote_url() or None, "remote_hits": stats.remote_hits, "remote_errors": stats.remote_errors,
        "uploads": stats.uploads, "upload_bytes": stats.upload_bytes, **stats.xla,
    }


def version_summaries(cache: CacheDir | None, current: str) -> list[dict[str, Any]]:
    """Every version in the manifest: entries, bytes, last open; the current one first."""
    if cache is None or cache.index is None:
        return []
    counts: dict[str, list[int]] = {}
    for row in cache.index.rows():
        count = counts.setdefault(row.version, [0, 0])
        count[0] += 1
        count[1] += row.size
    manifest = cache.index.versions()
    summaries = [{"version": version, "current": version == current, "entries": counts.get(version, [0, 0])[0],
                  "bytes": counts.get(version, [0, 0])[1], "last_open": iso(last_open)}
                 for version, (_, last_open) in manifest.items()]
    return sorted(summaries, key=lambda s: (not s["current"], s["version"]))


def stats_view(stats: Stats, root: Path, exists: bool, versions: list[dict[str, Any]]) -> Table:
    table = grid()
    table.add_row("Cache dir", str(root.absolute()) + ("" if exists else "  (does not exist)"))
    table.add_row("Entries", str(stats.entries))
    table.add_row("Size on disk", format_size(stats.bytes))
    cap = configured_max_size()
    table.add_row("Max size", f"{format_size(cap)}  (GRAPHCACHE_MAX_SIZE; LRU beyond it)")
    rate = stats.hit_rate
    table.add_row("Hit rate", "-" if rate is None else f"{rate:.1%}")
    table.add_row("Hits", str(stats.hits))
    table.add_row("Misses", str(stats.misses))
    table.add_row("Compiles", str(stats.compiles))
    table.add_row("Compile time", duration(stats.compile_seconds))
    table.add_row("Time saved", duration(stats.saved_seconds))
    table.add_row("Bytes written", format_size(stats.bytes_written))
    table.add_row("Bytes evicted", format_size(stats.bytes_evicted))
    table.add_row("Errors", str(stats.errors))
    uncacheable = [f"{reason} {count}" for reason, count in stats.uncacheable.items() if count]
    table.add_row("Uncacheable", ", ".join(uncacheable) or "none")
    table.add_row("Identity", stats.identity or "none recorded yet")
    url = remote_url()
    if url or stats.remote_hits or stats.remote_errors or stats.uploads:
        table.add_row("Remote", url or "none configured")
        table.add_row("Remote hits", str(stats.remote_hits))
        table.add_row("Remote errors", str(stats.remote_errors))
        table.add_row("Uploads", f"{stats.uploads} ({format_size(stats.upload_bytes)})")
    if any(stats.xla.values()):  # XLA executables (xla.py); hits are derived from access times
        table.add_row("XLA", ", ".join(f"{name.removeprefix('xla_').replace('_', ' ')} {count}"
                                       for name, count in stats.xla.items()))
    others = [v for v in versions if not v["current"]]
    if others:
        table.add_row("Other versions", "\n".join(
            f"{v['version']}: {plural(v['entries'], 'entry', 'entries')}, "
            f"{format_size(v['bytes'])}" for v in others))
    return table


@cli.command("stats", short_help="Show entries, size, hit rate, counters and identity.")
@json_option
@cache_dir_option
def stats_command(as_json: bool) -> None:
    """Show entries, size, hit rate, counters and the current identity."""
    cache = open_cache()
    current = current_version(cache)
    stats = cache.stats(current) if cache is not None else Stats.from_counters(0, 0, {}, "")
    versions = version_summaries(cache, current)
    root = cache_root()
    emit(output_mode(as_json), data=stats_json(stats, root, versions),
         human=lambda: stats_view(stats, root, cache is not None, versions))


@cli.command("zero-stats", short_help="Reset the counters (entries are kept).")
@cache_dir_option
def zero_stats_command() -> None:
    """Reset the counters (hits, misses, compiles, ...); entries are kept."""
    root = cache_root()
    if not (root / INDEX_FILE).exists():
        message(f"No statistics to reset in {root}.")
        return
    cache = open_cache(write=True)
    if cache is None or cache.index is None:
        raise CliError(f"cannot open the cache index in {root}")
    cache.index.reset_counters()
    message(f"Statistics reset in {root}.")


@cli.command("ls")
@json_option
@click.option("-q", "--quiet", is_flag=True, help="Print keys only, one per line.")
@click.option("--sort", "order", callback=_parse_sort, metavar="FIELD[:asc|desc]",
              help="Sort by key, name, kind, size, created, accessed, identity or compile_seconds "
                   "[default: most recently used first].")
@click.option("--limit", type=click.IntRange(min=0), metavar="N", help="Show at most N entries.")
@filter_option
@click.option("--remote", is_flag=True,
              help=f"List the remote cache's entries (${settings.ENV_REMOTE}), every version, newest first.")
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
    rows = select_rows(cache, filters, now)
    if order is not None:
        rows = sort_rows(rows, order)
    if limit is not None:
        rows = rows[:limit]
    current = current_version(cache)
    if mode is Mode.TABLE and not rows:
        message("No entries." if cache is not None else f"No entries ({cache_root()} does not exist).")
        return
    emit(mode, data=[row_json(row) for row in rows], lines=lambda: (row.key for row in rows),
         human=lambda: entries_table(rows, now=now, current=current))


# -- the remote cache --------------------------------------------------------------------------------------------
def remote_url() -> str:
    return settings.resolve_str(None, settings.ENV_REMOTE).strip()


def open_remote() -> RemoteStore:
    """The remote configured by the environment (the same settings GraphCache reads)."""
    url = remote_url()
    if not url:
        raise CliError(f"no remote cache configured: set {settings.ENV_REMOTE} (e.g. s3://bucket/prefix)")
    return RemoteStore(url, read_only=bool(settings.env_flag(settings.ENV_REMOTE_READ_ONLY)),
                       timeout=settings.resolve_duration(None, settings.ENV_REMOTE_TIMEOUT,
                                                         settings.DEFAULT_REMOTE_TIMEOUT))


def remote_call(remote: RemoteStore, what: str, func: Callable[[], Any]) -> Any:
    """``func()``, its backend errors (botocore's, aiohttp's, ...) reported as one line about the remote."""
    try:
        return func()
    except (CliError, GraphCacheError):
        raise
    except Exception as exc:
        if _debug():
            traceback.print_exception(exc, file=sys.stderr)
        raise CliError(f"{what} on the remote cache {remote.url} failed: {type(exc).__name__}: {exc}") from None


def remote_files(remote: RemoteStore) -> list[RemoteFile]:
    """Every remote entry, newest first."""
    with spinner(f"Listing {remote.url}..."):
        files = remote_call(remote, "listing", lambda: list(remote.scan()))
    return sorted(files, key=lambda f: (-f.mtime, f.key))


def remote_json(f: RemoteFile, current: str) -> dict[str, Any]:
    return {"key": f.key, "version": f.version, "current": f.version == current, "size": f.size,
            "last_modified": iso(f.mtime), "path": f.path}


def remote_table(files: Sequence[RemoteFile], *, now: float, current: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("KEY", no_wrap=True, min_width=32)
    table.add_column("VERSION", no_wrap=True)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("LAST MODIFIED", no_wrap=True)
    for f in files:
        table.add_row(f.key, Text(f.version, style="" if f.version == current else "dim"), format_size(f.size),
                      ago(f.mtime, now))
    return table


def ls_remote(mode: Mode, limit: int | None, now: float) -> None:
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
                      current: str) -> list[RemoteFile]:
    files = remote_files(remote)
    if everything:
        return files
    if stale:
        if not current:
            raise CliError(f"no current version is recorded in {cache_root()}, so --stale cannot tell which remote "
                           "version to keep (open the cache with GraphCache once, or name the KEYS)")
        return [f for f in files if f.version != current]
    chosen: set[str] = set()
    for prefix in keys:
        text = prefix.strip().lower()
        if not _KEY_PREFIX.fullmatch(text):
            raise CliError(f"{prefix!r} is not a cache key (32 hex digits, or a unique prefix of one)")
        matches = {f.key for f in files if f.key.startswith(text)}
        if not matches:
            raise CliError(f"no remote entry matches key {prefix!r} in {remote.url}")
        if len(matches) > 1:
            raise CliError(f"key prefix {prefix!r} is ambiguous: it matches {len(matches)} remote entries; "
                           "give more digits")
        chosen |= matches
    return [f for f in files if f.key in chosen]


def purge_remote(*, everything: bool, stale: bool, keys: Sequence[str], dry_run: bool, yes: bool,
                 mode: Mode, now: float) -> None:
    """``purge --remote``: remove remote entries (every version's, or the stale versions' whole prefixes)."""
    remote = open_remote()
    current = current_version(open_cache())
    files = remote_purge_plan(remote, everything=everything, stale=stale, keys=keys, current=current)
    planned = sum(f.size for f in files)
    data: dict[str, Any] = {"remote": remote.url, "removed": [f.key for f in files], "count": len(files),
                            "bytes": planned, "dry_run": dry_run}
    if not files:
        message("Nothing to purge.")
        emit(mode, data={**data, "removed": [], "count": 0, "bytes": 0}, human=lambda: None)
        return
    if dry_run:
        message(f"Would remove {plural(len(files), 'remote entry', 'remote entries')}, freeing "
                f"{format_size(planned)} (dry run: nothing removed).")
        emit(mode, data=data, human=lambda: remote_table(files, now=now, current=current))
        return
    message(f"About to remove {plural(len(files), 'remote entry', 'remote entries')} ({format_size(planned)}) "
            f"from {remote.url}.")
    confirm(len(files), yes)
    with spinner("Purging remote entries..."):
        if stale:
            count, freed = remote_call(remote, "purging", lambda: remote.remove_versions({f.version for f in files}))
        else:
            count, freed = remote_call(remote, "purging", lambda: remote.remove(files))
    message(f"Removed {plural(count, 'remote entry', 'remote entries')}, freed {format_size(freed)}.")
    emit(mode, data={**data, "count": count, "bytes": freed}, human=lambda: None)


def entry_json(key: str, path: Path, header: codec.EntryHeader, row: IndexRow | None, current: str) -> dict[str, Any]:
    return {
        "key": key, "path": str(path), "name": header.name, "kind": header.kind, "size": path.stat().st_size,
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
    table = grid()
    table.add_row("Key", entry["key"])
    table.add_row("Path", entry["path"])
    table.add_row("Name", entry["name"] or "-")
    table.add_row("Kind", entry["kind"])
    table.add_row("Size", f"{format_size(entry['size'])} on disk, {format_size(entry['payload_size'])} payload")
    for label, field in (("Created", "created"), ("Last used", "last_used")):
        when = entry[field]
        table.add_row(label, f"{when} ({ago(datetime.fromisoformat(when).timestamp(), now)})" if when else "-")
    table.add_row("Version", entry["version"] + ("  (current)" if entry["current"] else "  (not current)"))
    table.add_row("Compile time", duration(entry["compile_seconds"]))
    table.add_row("Identity", "\n".join(f"{k}: {_text(v)}" for k, v in sorted(entry["identity"].items())) or "-")
    table.add_row("Identity id", entry["identity_id"] or "-")
    table.add_row("Key parts", "\n".join(f"{k}: {v}" for k, v in sorted(entry["key_parts"].items())) or "-")
    for name, value in sorted(entry["extra"].items()):
        table.add_row(name.replace("_", " ").capitalize(), _text(value))
    return table


@cli.command("show")
@click.argument("key")
@json_option
@cache_dir_option
def show_command(key: str, as_json: bool) -> None:
    """Show one entry's header. KEY may be a unique prefix."""
    cache = open_cache()
    full = resolve_key(cache, key)
    assert cache is not None  # resolve_key found the key in it
    path = cache.store.path_for(full)
    try:
        header = codec.read_header(str(path))
    except FileNotFoundError:
        raise CliError(f"entry {full} is indexed but its file is gone (run '{PROG} purge {full} --yes')") from None
    except CorruptEntryError as exc:
        raise CliError(f"entry {full} is corrupt: {exc} (run '{PROG} verify --fix')") from None
    row = cache.index.get(full) if cache.index is not None else None
    entry = entry_json(full, path, header, row, current_version(cache))
    now = time.time()
    emit(output_mode(as_json), data=entry, human=lambda: entry_view(entry, now))


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


def confirm(count: int, yes: bool) -> None:
    """Ask before deleting (on a terminal); refuse without ``--yes`` when there is no terminal to ask on."""
    if yes:
        return
    if not stdin_is_terminal():
        raise CliError(f"refusing to delete {plural(count, 'entry', 'entries')} without "
                       "confirmation: stdin is not a terminal (pass --yes to delete)")
    if not click.confirm("Delete them?", default=False, err=True):
        raise CliError("nothing deleted")


def remove(cache: CacheDir, rows: Sequence[IndexRow], *, stale: bool) -> tuple[list[str], int, int]:
    """Delete the planned entries: (keys removed, count, bytes freed)."""
    if stale:
        with spinner("Purging stale versions..."):
            result = cache.purge(stale=True)
        removed = [row.key for row in rows if not cache.store.path_for(row.key).exists()]
        return removed, result.entries, result.bytes
    keys = [row.key for row in rows]
    count = freed = 0
    with progress("Purging", len(keys)) as advance:
        for start in range(0, len(keys), PURGE_CHUNK):
            chunk = keys[start:start + PURGE_CHUNK]
            result = cache.purge(keys=chunk)
            count, freed = count + result.entries, freed + result.bytes
            advance(len(chunk))
    return keys, count, freed


@cli.command("purge", short_help="Remove entries: --all, --stale, --older-than, --filter or KEYS.")
@click.argument("keys", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Remove every entry.")
@click.option("--stale", is_flag=True, help="Remove the entries of every version other than the current one.")
@click.option("--older-than", "older_than", callback=_parse_age, metavar="AGE",
              help="Remove entries last used more than AGE ago (90s, 30m, 12h, 7d, 2w).")
@click.option("--max-size", "max_size", callback=_parse_size_option, metavar="SIZE",
              help="Trim by LRU: remove the least recently used entries until at most SIZE remains (5GB).")
@filter_option
@click.option("--dry-run", is_flag=True, help="Show what would be removed, remove nothing.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--remote", is_flag=True,
              help=f"Purge the remote cache (${settings.ENV_REMOTE}) instead: --all, --stale (every version "
                   "prefix but the current one) or KEYS.")
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
        if filters or max_size is not None:
            raise usage_error("--remote takes --all, --stale or KEYS")
        purge_remote(everything=everything, stale=stale, keys=keys, dry_run=dry_run, yes=yes, mode=mode, now=now)
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


class _ScanProgress:
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


def verify_view(bad: Sequence[tuple[str, str]], strays: Sequence[Path]) -> Table | None:
    if not bad and not strays:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("KEY / FILE", no_wrap=True)
    table.add_column("PROBLEM")
    for key, problem in bad:
        table.add_row(key, problem)
    for path in strays:
        table.add_row(str(path), "stray temp file (a writer died mid-write)")
    return table


@cli.command("verify")
@click.option("--fix", is_flag=True, help="Remove bad entries and stray temp files.")
@json_option
@cache_dir_option
def verify_command(fix: bool, as_json: bool) -> None:
    """Check every entry's format and checksums. Exits 1 when bad entries remain."""
    mode = output_mode(as_json)
    cache = open_cache(write=fix)
    bad: list[tuple[str, str]] = []
    strays: list[Path] = []
    checked = 0
    if cache is not None:
        checked = sum(1 for _ in cache.store.scan())
        strays = cache.store.stray_temp_files()
        with progress("Verifying", checked) as advance:
            if _is_terminal(sys.stderr):
                cache.store = _ScanProgress(cache.store, advance)  # type: ignore[assignment]
            bad = cache.verify(fix=fix)
    data = {"checked": checked, "bad": [{"key": k, "problem": p} for k, p in bad],
            "stray_temp_files": [str(p) for p in strays], "fixed": fix}
    emit(mode, data=data, human=lambda: verify_view(bad, strays))
    summary = f"Checked {plural_entries(checked)}: "
    if not bad and not strays:
        message(summary + "all good.")
    elif fix:
        message(summary + f"removed {plural(len(bad), 'bad entry', 'bad entries')} and "
                f"{plural(len(strays), 'stray temp file')}.")
    else:
        message(summary + f"{len(bad)} bad, {plural(len(strays), 'stray temp file')}.")
    if bad and not fix:
        raise CliError(f"{plural(len(bad), 'bad entry', 'bad entries')} found; run '{PROG} verify --fix' to "
                       "remove them")


# -- sharing commands (warm, export, import) live in cli_share.py ----------------------------------------------
from .cli_share import register as _register_share  # noqa: E402

_register_share(cli)
