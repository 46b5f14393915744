"""The sharing commands: ``warm``, ``export``, ``import`` and ``push``.

    warm PATH...       compile SavedModel dirs and frozen .pb/.pbtxt graphs into the cache (CI warming)
    export BUNDLE      write entries (default: every entry of the current version) to one .tar.zst file
    import BUNDLE      verify a bundle completely, then add its entries
    push [KEY...]      upload entries the remote cache lacks (default: every entry of the current version)

``warm`` imports TensorFlow inside its function only; ``export`` and ``import`` stay TensorFlow-free
(``import`` asks TensorFlow for the version only when the cache dir has none recorded yet); so does
``push``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Column, Table
from rich.text import Text

from ..share import bundles, push
from .errors import PROG, CliError
from .native_log import quiet_native_stderr
from .options import (
    cache_dir_option,
    cache_root,
    ensure_cache_dir,
    feed_option,
    fetch_option,
    filter_option,
    json_option,
    open_cache,
    output_mode,
    usage_error,
)
from .output import duration, emit, format_size, message, plural, plural_entries, progress, spinner, table
from .remote import open_remote, remote_call
from .selection import resolve_key

if TYPE_CHECKING:
    from ..core.filters import Filter
    from ..share.warm import WarmResult

_STATUS_TEXT = {"compiled": ("compiled", "green"), "cached": ("already cached", "cyan"),
                "uncacheable": ("not cacheable", "yellow"), "failed": ("failed", "red")}


def _names(values: Sequence[str]) -> list[str] | None:
    """Repeatable, comma-separable tensor names; None when none were given."""
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    return names or None


def _report_skipped(skipped: Sequence[dict[str, Any]]) -> None:
    for entry in skipped:
        message(f"skipped {entry['key']}: {entry['problem']} (run '{PROG} verify --fix')", style="yellow")


# -- warm -------------------------------------------------------------------------------------------------------
def _graph_label(result: WarmResult) -> str:
    return f"{result.path} [{result.signature}]" if result.signature else result.path


def warm_table(results: Sequence[WarmResult]) -> Table:
    view = table("GRAPH", Column("STATUS", no_wrap=True), Column("KEY", no_wrap=True), "DETAIL")
    for result in results:
        text, style = _STATUS_TEXT[result.status]
        detail = result.reason or duration(result.seconds)
        view.add_row(_graph_label(result), Text(text, style=style), result.key or "-", detail)
    return view


def _report_guess(result: WarmResult) -> None:
    parts = [f"feeds {', '.join(result.feeds) or '(none)'}" if "feeds" in result.guessed else "",
             f"fetches {', '.join(result.fetches) or '(none)'}" if "fetches" in result.guessed else "",
             f"targets {', '.join(result.targets)}" if "targets" in result.guessed else ""]
    message(f"{result.path}: guessed {'; '.join(p for p in parts if p)} "
            "(entries are keyed by signature: pass --feed/--fetch to choose)", style="yellow")


@click.command("warm", short_help="Compile SavedModels and frozen graphs into the cache.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--signature", "signatures", multiple=True, metavar="NAME",
              help="SavedModel signature to warm, repeatable [default: every signature].")
@feed_option
@fetch_option
@json_option
@cache_dir_option
@quiet_native_stderr()
def warm_command(paths: tuple[Path, ...], signatures: tuple[str, ...], feeds: tuple[str, ...],
                 fetches: tuple[str, ...], as_json: bool) -> None:
    """Compile SavedModel directories and frozen GraphDef files (.pb, .pbtxt) into the cache.

    A SavedModel's signatures are frozen and compiled as graphcache.load_saved_model does, which then
    skips loading the SavedModel. For a GraphDef without --feed/--fetch, the Placeholders are fed and
    the nodes nothing consumes are fetched (what was guessed is printed: consumers must compile the
    same signature to hit). Entries are per device kind: a CPU-only machine warms entries for CPU
    consumers. Creates the cache dir when missing. Exits 1 when a graph failed.
    """
    mode = output_mode(as_json)
    from ..cache import GraphCache
    from ..share import warm as warming

    jobs = warming.plan(paths, list(signatures) or None)
    feed_names, fetch_names = _names(feeds), _names(fetches)
    saved_models = sorted({str(job.path) for job in jobs if job.kind == "saved_model"})
    if (feed_names or fetch_names) and saved_models:
        raise usage_error(f"--feed/--fetch name the tensors of GraphDef files; {saved_models[0]} is a "
                          "SavedModel, whose signatures name their own (use --signature)")
    if signatures and not saved_models:
        raise usage_error("--signature selects SavedModel signatures, and no PATH is a SavedModel directory")
    root = ensure_cache_dir()
    cache = GraphCache(root)
    with progress("Warming", len(jobs), min_total=1) as bar:  # each graph can take long: always show the bar
        results = warming.run_jobs(
            jobs, cache, feeds=feed_names, fetches=fetch_names, on_guess=_report_guess,
            on_start=lambda job: bar.step(job.path.name + (f" [{job.signature}]" if job.signature else "")))
    counts = {status: sum(1 for r in results if r.status == status) for status in warming.STATUSES}
    emit(mode, data=[r.as_dict() for r in results], human=lambda: warm_table(results) if results else None)
    message(f"Warmed {plural(len(results), 'graph')} in {root}: {counts['compiled']} compiled, "
            f"{counts['cached']} already cached, {counts['uncacheable']} not cacheable, "
            f"{counts['failed']} failed.")
    if counts["failed"]:
        raise CliError(f"{plural(counts['failed'], 'graph')} failed to warm")


# -- export / import --------------------------------------------------------------------------------------------
def bundle_table(entries: Sequence[dict[str, Any]]) -> Table:
    view = table(Column("KEY", no_wrap=True, min_width=32), Column("KIND", no_wrap=True), "NAME",
                 Column("SIZE", justify="right", no_wrap=True))
    for entry in entries:
        view.add_row(entry["key"], entry.get("kind", "graph"), entry.get("name") or "-", format_size(entry["size"]))
    return view


@click.command("export", short_help="Write entries to a bundle file (.tar.zst) for another machine.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("keys", nargs=-1)
@filter_option
@json_option
@cache_dir_option
def export_command(bundle: Path, keys: tuple[str, ...], filters: list[Filter], as_json: bool) -> None:
    """Write entries to BUNDLE (tar + zstd, with a versioned manifest and checksums).

    KEYS (unique prefixes allowed) and --filter select entries (both: keys that match); without
    either, every entry of the current version. Aliases bring their graph entries along. A bundle
    holds one compiler version.
    """
    mode = output_mode(as_json)
    cache = open_cache()
    if cache is None:
        raise CliError(f"nothing to export: {cache_root()} does not exist")
    selected = [resolve_key(cache, key) for key in keys] if keys else None
    with spinner(f"Exporting to {bundle}..."):
        summary = bundles.export_bundle(cache, bundle, selected, filters)
    _report_skipped(summary.skipped)
    entry_bytes = sum(e["size"] for e in summary.entries)
    emit(mode, data=summary.as_dict(), human=lambda: bundle_table(summary.entries))
    message(f"Exported {plural_entries(len(summary.entries))} ({format_size(entry_bytes)}) of "
            f"version {summary.version} to {summary.path} ({format_size(summary.bytes)}).")


@click.command("import", short_help="Verify a bundle, then add its entries to the cache.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@cache_dir_option
def import_command(bundle: Path, as_json: bool) -> None:
    """Verify all of BUNDLE, then add its entries (entries already present are kept).

    Refuses a bundle of another compiler version than the cache's current one, a corrupt or
    truncated bundle, and members that are not entries (absolute paths, '..', links, devices),
    writing nothing. Creates the cache dir when missing.
    """
    mode = output_mode(as_json)
    root = ensure_cache_dir()
    cache = open_cache(write=True)
    if cache is None or cache.index is None:
        raise CliError(f"cannot open the cache index in {root}")
    version = None
    if not cache.current_version():
        message(f"No compiler version is recorded in {root} yet: using this installation's "
                "(asking TensorFlow).", style="dim")
        from ..compile.identity import installed_version

        version = installed_version()
    with spinner(f"Verifying and importing {bundle}..."):
        summary = bundles.import_bundle(cache, bundle, version=version)
    emit(mode, data=summary.as_dict(), human=lambda: None)
    extra = f"; {len(summary.present)} already present" if summary.present else ""
    evicted = f"; the size cap then evicted {plural_entries(summary.evicted)}" if summary.evicted else ""
    message(f"Imported {plural_entries(len(summary.added))} ({format_size(summary.bytes)}) of "
            f"version {summary.version} into {root}{extra}{evicted}.")


# -- push -------------------------------------------------------------------------------------------------------
@click.command("push", short_help="Upload entries the remote cache lacks (GRAPHCACHE_REMOTE).")
@click.argument("keys", nargs=-1)
@filter_option
@json_option
@cache_dir_option
def push_command(keys: tuple[str, ...], filters: list[Filter], as_json: bool) -> None:
    """Upload entries to the remote cache ($GRAPHCACHE_REMOTE) that it does not hold yet.

    For entries compiled before the remote was configured (new ones are uploaded as they are
    compiled). KEYS (unique prefixes allowed) and --filter select as for export; without either,
    every entry of the current version. Each entry is verified before it is sent; XLA executables
    are listed under their identity so other machines pull them when they enable XLA caching.
    """
    mode = output_mode(as_json)
    cache = open_cache()
    if cache is None:
        raise CliError(f"nothing to push: {cache_root()} does not exist")
    remote = open_remote()
    selected = [resolve_key(cache, key) for key in keys] if keys else None
    with spinner(f"Pushing to {remote.url}..."):
        summary = remote_call(remote, "pushing", lambda: push.push_entries(
            cache, remote, selected, filters, signing_key=bundles.signing_key_for(cache.root)))
    _report_skipped(summary.skipped)
    emit(mode, data=summary.as_dict(), human=lambda: bundle_table(summary.pushed) if summary.pushed else None)
    present = f"; {len(summary.present)} already there" if summary.present else ""
    message(f"Pushed {plural_entries(len(summary.pushed))} ({format_size(summary.bytes)}) to "
            f"{remote.url}{present}.")


COMMANDS = (warm_command, export_command, import_command, push_command)
