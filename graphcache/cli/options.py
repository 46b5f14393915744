"""What the user configured: option declarations and their parsers, the environment, and the cache dir.

Every command takes ``--cache-dir`` (the last one given wins, before or after the command) through
:class:`State`; :func:`open_cache` opens it without ever creating it, so read-only commands on a
missing dir report an empty cache. Environment settings are read here (and in the group's help text),
through the same ``settings`` functions GraphCache uses, so the CLI sees the configuration a process
would.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from ..core import settings
from ..core.cachedir import CacheDir
from ..core.filters import Filter, FilterError, SortOrder, parse_filter, parse_sort
from ..core.index.database import INDEX_FILE
from ..core.units import UnitError, parse_duration, parse_size
from ..store import LocalStore
from .errors import CliError
from .output import Mode

F = TypeVar("F", bound=Callable[..., Any])


def usage_error(text: str) -> click.UsageError:
    """A usage error (exit 2) about the command being run."""
    return click.UsageError(text, ctx=click.get_current_context(silent=True))


def output_mode(as_json: bool, quiet: bool = False) -> Mode:
    if as_json and quiet:
        raise usage_error("--json and --quiet cannot be combined")
    return Mode.JSON if as_json else Mode.QUIET if quiet else Mode.TABLE


# -- the environment --------------------------------------------------------------------------------------------
def debug_enabled() -> bool:
    """Whether to print tracebacks (GRAPHCACHE_DEBUG; a value that does not parse counts as on)."""
    try:
        return bool(settings.env_flag(settings.ENV_DEBUG))
    except ValueError:
        return True


def configured_max_size() -> int:
    """The size cap processes get by default here: GRAPHCACHE_MAX_SIZE, else 10 GiB (a GraphCache may set its own)."""
    return settings.resolve_size(None, settings.ENV_MAX_SIZE, settings.DEFAULT_MAX_SIZE)


@dataclass(frozen=True)
class RemoteSettings:
    """The remote cache the environment configures (``url`` empty: none)."""

    url: str
    read_only: bool
    timeout: float


def remote_settings() -> RemoteSettings:
    return RemoteSettings(
        url=settings.resolve_str(None, settings.ENV_REMOTE).strip(),
        read_only=bool(settings.env_flag(settings.ENV_REMOTE_READ_ONLY)),
        timeout=settings.resolve_duration(None, settings.ENV_REMOTE_TIMEOUT, settings.DEFAULT_REMOTE_TIMEOUT))


def no_remote_error() -> CliError:
    return CliError(f"no remote cache configured: set {settings.ENV_REMOTE} (e.g. s3://bucket/prefix)")


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


def ensure_cache_dir() -> Path:
    """The cache dir, created (mode 0700) when missing: for the commands that add entries."""
    return settings.create_cache_dir(cache_root())  # a CacheDirError is reported like a CliError


def has_index(root: Path) -> bool:
    return (root / INDEX_FILE).exists()


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
    if has_index(root) or not any(LocalStore(root).scan()):
        return CacheDir(root, read_only=True)
    try:
        cache = CacheDir(root)
        cache.reconcile()
        return cache
    except (OSError, sqlite3.Error):
        return CacheDir(root, read_only=True)


def current_version(cache: CacheDir | None) -> str:
    return cache.current_version() if cache is not None else ""


# -- option declarations ----------------------------------------------------------------------------------------
def _set_cache_dir(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.ensure_object(State).cache_dir = value.expanduser()


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


def _parse_size(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
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


cache_dir_option = click.option(
    "--cache-dir", type=click.Path(file_okay=False, path_type=Path), expose_value=False,
    callback=_set_cache_dir, metavar="DIR",
    help=f"The cache dir [default: ${settings.ENV_DIR}, else the user cache dir].")
filter_option = click.option(
    "--filter", "filters", multiple=True, callback=_parse_filters, metavar="EXPR",
    help="FIELD OP VALUE, repeatable (all must match). Fields: size (10MB, 1GiB), created and accessed "
         "(an age: 'accessed>7d' = unused for over 7 days, or an ISO date), version ('version!=current'), "
         "kind, name (globs allowed). OP: > < >= <= = !=. Quote it: --filter 'size>10MB'.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
# A GraphDef's signature, as warm and explain take it (the defaults are graphcache.share.warm's guesses).
feed_option = click.option("--feed", "feeds", multiple=True, metavar="TENSOR",
                           help="A GraphDef's input tensor (x:0), repeatable or comma-separated "
                                "[default: its Placeholders].")
fetch_option = click.option("--fetch", "fetches", multiple=True, metavar="TENSOR",
                            help="A GraphDef's output tensor, repeatable or comma-separated "
                                 "[default: the nodes nothing consumes].")
sort_option = click.option(
    "--sort", "order", callback=_parse_sort, metavar="FIELD[:asc|desc]",
    help="Sort by key, name, kind, size, created, accessed, version or compile_seconds "
         "[default: most recently used first].")
older_than_option = click.option(
    "--older-than", "older_than", callback=_parse_age, metavar="AGE",
    help="Remove entries last used more than AGE ago (90s, 30m, 12h, 7d, 2w).")
max_size_option = click.option(
    "--max-size", "max_size", callback=_parse_size, metavar="SIZE",
    help="Trim by LRU: remove the least recently used entries until at most SIZE remains (5GB).")


def remote_option(help_text: str) -> Callable[[F], F]:
    """``--remote`` with ``help_text``, in which ``{env}`` names the variable that configures the remote."""
    return click.option("--remote", is_flag=True, help=help_text.format(env=f"${settings.ENV_REMOTE}"))


def group_epilog() -> str:
    """The environment variables the group's help lists."""
    return f"Environment: {settings.ENV_DIR} (the default cache dir), {settings.ENV_DEBUG}=1 (tracebacks)."


def debug_hint() -> str:
    return f"set {settings.ENV_DEBUG}=1 to see the traceback"
