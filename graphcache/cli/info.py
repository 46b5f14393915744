"""The cache-wide commands: ``dir``, ``stats`` and ``zero-stats`` (the entry commands are in manage.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from ..core.stats import Stats
from .errors import CliError
from .options import (
    cache_dir_option,
    cache_root,
    configured_max_size,
    current_version,
    has_index,
    json_option,
    open_cache,
    output_mode,
    remote_option,
)
from .output import duration, emit, format_size, grid, iso, message, plural, plural_entries
from .remote import remote_url

if TYPE_CHECKING:
    from ..core.cachedir import CacheDir


@click.command("dir")
@cache_dir_option
def dir_command() -> None:
    """Print the cache dir's path."""
    root = cache_root()
    click.echo(str(root.absolute()))
    if not root.exists():
        message(f"note: {root} does not exist yet", style="dim")


def stats_json(stats: Stats, root: Path, exists: bool, versions: list[dict[str, Any]]) -> dict[str, Any]:
    """``stats --json``: every key of graphcache 0.1 (``hits``, ``misses``, ``compiles`` ... are graph
    lookups, as they were), plus ``exists``, ``totals`` (every kind's lookups) and ``by_kind``."""
    return {
        "cache_dir": str(root.absolute()), "exists": exists, "entries": stats.entries, "bytes": stats.bytes,
        "max_size": configured_max_size(),
        "totals": stats.totals, "by_kind": stats.by_kind,
        "hit_rate": stats.hit_rate, "hits": stats.hits, "misses": stats.misses, "compiles": stats.compiles,
        "compile_seconds": stats.compile_seconds, "saved_seconds": stats.saved_seconds,
        "bytes_written": stats.bytes_written, "bytes_evicted": stats.bytes_evicted, "evictions": stats.evictions,
        "index_rebuilds": stats.index_rebuilds,
        "errors": stats.errors,
        "uncacheable": dict(stats.uncacheable), "version": stats.version or None,
        "identity": stats.version or None,  # graphcache 0.1's name for the version, kept for existing scripts
        "versions": versions,
        "remote": remote_url() or None, "remote_hits": stats.remote_hits, "remote_errors": stats.remote_errors,
        "uploads": stats.uploads, "upload_bytes": stats.upload_bytes, "fetch_bytes": stats.fetch_bytes,
        **stats.xla, **stats.functions, **stats.traces, "trace_uncacheable_reasons": dict(stats.trace_reasons),
        "function_uncacheable_reasons": dict(stats.function_reasons),
        "accelerate_runs": dict(stats.accelerate_runs),
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
    view = grid()
    view.add_row("Cache dir", str(root.absolute()) + ("" if exists else "  (does not exist)"))
    view.add_row("Entries", str(stats.entries))
    view.add_row("Size on disk", format_size(stats.bytes))
    cap = configured_max_size()
    view.add_row("Max size", f"{format_size(cap)}  (GRAPHCACHE_MAX_SIZE; LRU beyond it)")
    totals = stats.totals  # every kind of entry: a TF2-only cache's hits are hits too
    rate = totals["hit_rate"]
    view.add_row("Hit rate", "-" if rate is None else f"{rate:.1%}")
    view.add_row("Hits", str(totals["hits"]))
    view.add_row("Misses", str(totals["misses"]))
    view.add_row("Compiles", str(totals["compiles"]))
    view.add_row("Compile time", duration(totals["compile_seconds"]))
    view.add_row("Time saved", duration(totals["saved_seconds"]))
    if stats.by_kind:
        view.add_row("By kind", kinds_table(stats.by_kind))
    view.add_row("Bytes written", format_size(stats.bytes_written))
    view.add_row("Bytes evicted", format_size(stats.bytes_evicted))
    view.add_row("Errors", str(stats.errors) + (f"  ({plural(stats.index_rebuilds, 'index rebuild')})"
                                                if stats.index_rebuilds else ""))
    uncacheable = [f"{reason} {count}" for reason, count in stats.uncacheable.items() if count]
    view.add_row("Uncacheable", ", ".join(uncacheable) or "none")
    if stats.traces.get("trace_uncacheable"):  # tf.function traces (traces/): their lookups are in the by-kind table
        view.add_row("Traces not cached", f"{stats.traces['trace_uncacheable']} (" + ", ".join(
            f"{reason} {count}" for reason, count in stats.trace_reasons.items()) + ")")
    if stats.functions.get("function_uncacheable"):  # tf.function optimized graphs (functions/)
        view.add_row("Functions not cached", f"{stats.functions['function_uncacheable']} (" + ", ".join(
            f"{reason} {count}" for reason, count in stats.function_reasons.items()) + ")")
    if any(stats.accelerate_runs.values()):  # accelerate_train_mode: what the training runs actually ran at
        view.add_row("Training precision", accelerate_runs_text(stats.accelerate_runs))
    view.add_row("Version", stats.version or "none recorded yet")
    url = remote_url()
    if url or stats.remote_hits or stats.remote_errors or stats.uploads:
        view.add_row("Remote", url or "none configured")
        view.add_row("Remote hits", str(stats.remote_hits))
        view.add_row("Remote errors", str(stats.remote_errors))
        view.add_row("Uploads", f"{stats.uploads} ({format_size(stats.upload_bytes)})")
    xla_files = {name: count for name, count in stats.xla.items() if name not in ("xla_hits", "xla_compiles")}
    if any(xla_files.values()):  # XLA executables' files (xla/): the lookups are in the by-kind table
        view.add_row("XLA files", ", ".join(f"{name.removeprefix('xla_').replace('_', ' ')} {count}"
                                            for name, count in xla_files.items()))
    others = [v for v in versions if not v["current"]]
    if others:
        view.add_row("Other versions", "\n".join(
            f"{v['version']}: {plural_entries(v['entries'])}, {format_size(v['bytes'])}" for v in others))
    return view


# How the stats view names each precision accelerate_train_mode's training runs ran at (core/counters.py).
_RUN_WORDS = {"bfloat16": "bfloat16", "float16": "float16",
              "original_unaccelerated": "original precision (rewriter unavailable here)",
              "original_after_switch": "original precision after the switch"}


def accelerate_runs_text(runs: dict[str, int]) -> str:
    """``bfloat16 90, original precision after the switch 10``: accelerate_train_mode's runs that happened."""
    return ", ".join(f"{_RUN_WORDS.get(name, name)} {count}" for name, count in runs.items() if count)


def kinds_table(by_kind: dict[str, dict[str, float]]) -> Table:
    """One row per kind of entry: its entries and lookups (XLA hits are derived from access times)."""
    table = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False)
    for column in ("kind", "entries", "size", "hits", "misses", "compiles", "saved"):
        table.add_column(column, justify="left" if column == "kind" else "right", header_style="dim")
    for kind, row in by_kind.items():
        table.add_row(kind, str(int(row["entries"])), format_size(int(row["bytes"])), str(row["hits"]),
                      str(row["misses"]), str(row["compiles"]), duration(row["saved_seconds"]))
    return table


@click.command("stats", short_help="Show entries, size, hit rate, counters and the current version.")
@remote_option("Show the fleet's instead: every host's counters (pushed to Redis: {env} or "
               "$GRAPHCACHE_COORDINATOR), summed, and the remote's entries and bytes.")
@json_option
@cache_dir_option
def stats_command(remote: bool, as_json: bool) -> None:
    """Show entries, size, hit rate, counters and the current compiler version."""
    if remote:
        from .fleet import stats_remote

        stats_remote(output_mode(as_json))
        return
    cache = open_cache()
    current = current_version(cache)
    stats = cache.stats(current) if cache is not None else Stats.from_counters(0, 0, {}, "")
    versions = version_summaries(cache, current)
    root = cache_root()
    emit(output_mode(as_json), data=stats_json(stats, root, cache is not None, versions),
         human=lambda: stats_view(stats, root, cache is not None, versions))


@click.command("zero-stats", short_help="Reset the counters (entries are kept).")
@remote_option("Reset the fleet's counters instead (every host's, in Redis: {env} or $GRAPHCACHE_COORDINATOR).")
@cache_dir_option
def zero_stats_command(remote: bool) -> None:
    """Reset the counters (hits, misses, compiles, ...); entries are kept."""
    if remote:
        from .fleet import zero_remote

        zero_remote()
        return
    root = cache_root()
    if not has_index(root):
        message(f"No statistics to reset in {root}.")
        return
    cache = open_cache(write=True)
    if cache is None or cache.index is None:
        raise CliError(f"cannot open the cache index in {root}")
    cache.index.reset_counters()
    message(f"Statistics reset in {root}.")


COMMANDS = (dir_command, stats_command, zero_stats_command)
