"""The sharing commands of the ``graphcache`` CLI: ``warm``, ``export``, ``import`` and ``push``.

    warm PATH...       compile SavedModel dirs and frozen .pb/.pbtxt graphs into the cache (CI warming)
    export BUNDLE      write entries (default: every entry of the current version) to one .tar.zst file
    import BUNDLE      verify a bundle completely, then add its entries
    push [KEY...]      upload entries the remote cache lacks (default: every entry of the current version)

Registered on the main group by :func:`register` (called at the end of cli.py). ``warm`` imports
TensorFlow inside its function only; ``export`` and ``import`` stay TensorFlow-free (``import`` asks
TensorFlow for the version only when the cache dir has none recorded yet); so does ``push``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from . import bundles, push
from .core import settings
from .core.filters import Filter
from .core.units import format_size

if TYPE_CHECKING:
    from .warm import WarmResult

_STATUS_TEXT = {"compiled": ("compiled", "green"), "cached": ("already cached", "cyan"),
                "uncacheable": ("not cacheable", "yellow"), "failed": ("failed", "red")}


def _cli() -> Any:
    from . import cli

    return cli


def _ensure_cache_dir() -> Path:
    """The cache dir, created (mode 0700) when missing."""
    cli = _cli()
    root = cli.cache_root()
    try:
        settings.make_private_dir(root)
    except OSError as exc:
        raise cli.CliError(f"cannot create cache dir {str(root)!r}: {exc.strerror or exc}") from None
    if not root.is_dir():
        raise cli.CliError(f"cache dir {str(root)!r} is not a directory")
    return root


def _names(values: Sequence[str]) -> list[str] | None:
    """Repeatable, comma-separable tensor names; None when none were given."""
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    return names or None


@contextlib.contextmanager
def _bar(total: int) -> Iterator[Callable[[str], None]]:
    """``step(description)`` for a transient progress bar on stderr (terminal only)."""
    cli = _cli()
    if not cli._is_terminal(sys.stderr):
        yield lambda description: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
               MofNCompleteColumn())
    with Progress(*columns, console=cli.console(stderr=True), transient=True) as progress:
        task = progress.add_task("Warming", total=total)
        started = [False]

        def step(description: str) -> None:
            if started[0]:
                progress.advance(task, 1)
            started[0] = True
            progress.update(task, description=description)

        yield step


# -- warm ----------------------------------------------------------------------------------------------------
def _graph_label(result: WarmResult) -> str:
    return f"{result.path} [{result.signature}]" if result.signature else result.path


def warm_table(results: Sequence[WarmResult]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("GRAPH")
    table.add_column("STATUS", no_wrap=True)
    table.add_column("KEY", no_wrap=True)
    table.add_column("DETAIL")
    cli = _cli()
    for result in results:
        text, style = _STATUS_TEXT[result.status]
        detail = result.reason or cli.duration(result.seconds)
        table.add_row(_graph_label(result), Text(text, style=style), result.key or "-", detail)
    return table


def warm_command(paths: tuple[Path, ...], signatures: tuple[str, ...], feeds: tuple[str, ...],
                 fetches: tuple[str, ...], as_json: bool) -> None:
    cli = _cli()
    mode = cli.output_mode(as_json)
    from . import warm as warming
    from .cache import GraphCache

    jobs = warming.plan(paths, list(signatures) or None)
    feed_names, fetch_names = _names(feeds), _names(fetches)
    saved_models = sorted({str(job.path) for job in jobs if job.kind == "saved_model"})
    if (feed_names or fetch_names) and saved_models:
        raise cli.usage_error(f"--feed/--fetch name the tensors of GraphDef files; {saved_models[0]} is a "
                              "SavedModel, whose signatures name their own (use --signature)")
    if signatures and not saved_models:
        raise cli.usage_error("--signature selects SavedModel signatures, and no PATH is a SavedModel "
                              "directory")
    root = _ensure_cache_dir()
    cache = GraphCache(root)

    def guessed(result: WarmResult) -> None:
        parts = [f"feeds {', '.join(result.feeds) or '(none)'}" if "feeds" in result.guessed else "",
                 f"fetches {', '.join(result.fetches) or '(none)'}" if "fetches" in result.guessed else "",
                 f"targets {', '.join(result.targets)}" if "targets" in result.guessed else ""]
        cli.message(f"{result.path}: guessed {'; '.join(p for p in parts if p)} "
                    "(entries are keyed by signature: pass --feed/--fetch to choose)", style="yellow")

    with _bar(len(jobs)) as step:
        results = warming.run_jobs(jobs, cache, feeds=feed_names, fetches=fetch_names, on_guess=guessed,
                                   on_start=lambda job: step(job.path.name + (f" [{job.signature}]"
                                                                              if job.signature else "")))
    counts = {status: sum(1 for r in results if r.status == status) for status in warming.STATUSES}
    cli.emit(mode, data=[r.as_dict() for r in results],
             human=lambda: warm_table(results) if results else None)
    cli.message(f"Warmed {cli.plural(len(results), 'graph')} in {root}: {counts['compiled']} compiled, "
                f"{counts['cached']} already cached, {counts['uncacheable']} not cacheable, "
                f"{counts['failed']} failed.")
    if counts["failed"]:
        raise cli.CliError(f"{cli.plural(counts['failed'], 'graph')} failed to warm")


# -- export / import -----------------------------------------------------------------------------------------
def bundle_table(entries: Sequence[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("KEY", no_wrap=True, min_width=32)
    table.add_column("KIND", no_wrap=True)
    table.add_column("NAME")
    table.add_column("SIZE", justify="right", no_wrap=True)
    for entry in entries:
        table.add_row(entry["key"], entry.get("kind", "graph"), entry.get("name") or "-",
                      format_size(entry["size"]))
    return table


def export_command(bundle: Path, keys: tuple[str, ...], filters: list[Filter], as_json: bool) -> None:
    cli = _cli()
    mode = cli.output_mode(as_json)
    cache = cli.open_cache()
    if cache is None:
        raise cli.CliError(f"nothing to export: {cli.cache_root()} does not exist")
    selected = [cli.resolve_key(cache, key) for key in keys] if keys else None
    with cli.spinner(f"Exporting to {bundle}..."):
        summary = bundles.export_bundle(cache, bundle, selected, filters)
    for skipped in summary.skipped:
        cli.message(f"skipped {skipped['key']}: {skipped['problem']} (run '{cli.PROG} verify --fix')",
                    style="yellow")
    entry_bytes = sum(e["size"] for e in summary.entries)
    cli.emit(mode, data=summary.as_dict(), human=lambda: bundle_table(summary.entries))
    cli.message(f"Exported {cli.plural_entries(len(summary.entries))} ({format_size(entry_bytes)}) of "
                f"version {summary.version} to {summary.path} ({format_size(summary.bytes)}).")


def import_command(bundle: Path, as_json: bool) -> None:
    cli = _cli()
    mode = cli.output_mode(as_json)
    root = _ensure_cache_dir()
    cache = cli.open_cache(write=True)
    if cache is None or cache.index is None:
        raise cli.CliError(f"cannot open the cache index in {root}")
    version = None
    if not cache.current_version():
        cli.message(f"No compiler version is recorded in {root} yet: using this installation's "
                    "(asking TensorFlow).", style="dim")
        from .identity import installed_version  # imports TensorFlow: only when no version is recorded

        version = installed_version()
    with cli.spinner(f"Verifying and importing {bundle}..."):
        summary = bundles.import_bundle(cache, bundle, version=version)
    cli.emit(mode, data=summary.as_dict(), human=lambda: None)
    extra = f"; {len(summary.present)} already present" if summary.present else ""
    evicted = f"; the size cap then evicted {cli.plural_entries(summary.evicted)}" if summary.evicted else ""
    cli.message(f"Imported {cli.plural_entries(len(summary.added))} ({format_size(summary.bytes)}) of "
                f"version {summary.version} into {root}{extra}{evicted}.")


# -- push ----------------------------------------------------------------------------------------------------
def push_command(keys: tuple[str, ...], filters: list[Filter], as_json: bool) -> None:
    cli = _cli()
    mode = cli.output_mode(as_json)
    cache = cli.open_cache()
    if cache is None:
        raise cli.CliError(f"nothing to push: {cli.cache_root()} does not exist")
    remote = cli.open_remote()
    selected = [cli.resolve_key(cache, key) for key in keys] if keys else None
    with cli.spinner(f"Pushing to {remote.url}..."):
        summary = cli.remote_call(remote, "pushing", lambda: push.push_entries(
            cache, remote, selected, filters, signing_key=bundles.signing_key_for(cache.root)))
    for skipped in summary.skipped:
        cli.message(f"skipped {skipped['key']}: {skipped['problem']} (run '{cli.PROG} verify --fix')",
                    style="yellow")
    cli.emit(mode, data=summary.as_dict(), human=lambda: bundle_table(summary.pushed) if summary.pushed else None)
    present = f"; {len(summary.present)} already there" if summary.present else ""
    cli.message(f"Pushed {cli.plural_entries(len(summary.pushed))} ({format_size(summary.bytes)}) to "
                f"{remote.url}{present}.")


# -- registration --------------------------------------------------------------------------------------------
def register(group: click.Group) -> None:
    """Add ``warm``, ``export``, ``import`` and ``push`` to the ``graphcache`` group (called by cli.py)."""
    cli = _cli()

    @group.command("warm", short_help="Compile SavedModels and frozen graphs into the cache.")
    @click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
    @click.option("--signature", "signatures", multiple=True, metavar="NAME",
                  help="SavedModel signature to warm, repeatable [default: every signature].")
    @click.option("--feed", "feeds", multiple=True, metavar="TENSOR",
                  help="A GraphDef's input tensor (x:0), repeatable or comma-separated "
                       "[default: its Placeholders].")
    @click.option("--fetch", "fetches", multiple=True, metavar="TENSOR",
                  help="A GraphDef's output tensor, repeatable or comma-separated "
                       "[default: the nodes nothing consumes].")
    @cli.json_option
    @cli.cache_dir_option
    def warm(paths: tuple[Path, ...], signatures: tuple[str, ...], feeds: tuple[str, ...],
             fetches: tuple[str, ...], as_json: bool) -> None:
        """Compile SavedModel directories and frozen GraphDef files (.pb, .pbtxt) into the cache.

        A SavedModel's signatures are frozen and compiled as graphcache.load_saved_model does, which then
        skips loading the SavedModel. For a GraphDef without --feed/--fetch, the Placeholders are fed and
        the nodes nothing consumes are fetched (what was guessed is printed: consumers must compile the
        same signature to hit). Entries are per device kind: a CPU-only machine warms entries for CPU
        consumers. Creates the cache dir when missing. Exits 1 when a graph failed.
        """
        warm_command(paths, signatures, feeds, fetches, as_json)

    @group.command("export", short_help="Write entries to a bundle file (.tar.zst) for another machine.")
    @click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
    @click.argument("keys", nargs=-1)
    @cli.filter_option
    @cli.json_option
    @cli.cache_dir_option
    def export(bundle: Path, keys: tuple[str, ...], filters: list[Filter], as_json: bool) -> None:
        """Write entries to BUNDLE (tar + zstd, with a versioned manifest and checksums).

        KEYS (unique prefixes allowed) and --filter select entries (both: keys that match); without
        either, every entry of the current version. Aliases bring their graph entries along. A bundle
        holds one compiler version.
        """
        export_command(bundle, keys, filters, as_json)

    @group.command("import", short_help="Verify a bundle, then add its entries to the cache.")
    @click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
    @cli.json_option
    @cli.cache_dir_option
    def import_(bundle: Path, as_json: bool) -> None:
        """Verify all of BUNDLE, then add its entries (entries already present are kept).

        Refuses a bundle of another compiler version than the cache's current one, a corrupt or
        truncated bundle, and members that are not entries (absolute paths, '..', links, devices),
        writing nothing. Creates the cache dir when missing.
        """
        import_command(bundle, as_json)

    @group.command("push", short_help="Upload entries the remote cache lacks (GRAPHCACHE_REMOTE).")
    @click.argument("keys", nargs=-1)
    @cli.filter_option
    @cli.json_option
    @cli.cache_dir_option
    def push_(keys: tuple[str, ...], filters: list[Filter], as_json: bool) -> None:
        """Upload entries to the remote cache ($GRAPHCACHE_REMOTE) that it does not hold yet.

        For entries compiled before the remote was configured (new ones are uploaded as they are
        compiled). KEYS (unique prefixes allowed) and --filter select as for export; without either,
        every entry of the current version. Each entry is verified before it is sent; XLA executables
        are listed under their identity so other machines pull them when they enable XLA caching.
        """
        push_command(keys, filters, as_json)


__all__ = ["register"]
