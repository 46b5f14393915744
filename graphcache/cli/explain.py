"""Why did it miss: ``explain`` (a graph against what is cached) and ``misses`` (the recent misses).

    explain GRAPH   the key a .pb/.pbtxt or SavedModel signature would have, whether it is cached, and the
                    nearest cached entries with the key parts and nodes that differ
    misses          the misses processes recorded, newest first, each with its nearest entry

``explain`` computes a key, so it imports TensorFlow, inside its function only; it reads the cache and
writes nothing. ``misses`` reads the index alone (TensorFlow-free).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group, RenderableType
from rich.table import Column

from ..core.index import misses as recorded
from .errors import CliError
from .native_log import quiet_native_stderr
from .options import (
    cache_dir_option,
    cache_root,
    feed_option,
    fetch_option,
    json_option,
    open_cache,
    output_mode,
    remote_option,
    usage_error,
)
from .output import ago, emit, grid, iso, message, plural, table

if TYPE_CHECKING:
    from ..explain.report import Explanation, NearestEntry


def _names(values: Sequence[str]) -> list[str] | None:
    """Repeatable, comma-separable names; None when none were given."""
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    return names or None


# -- explain ----------------------------------------------------------------------------------------------------
def _entry_lines(entry: NearestEntry, limit: int) -> str:
    from ..explain.report import graph_words

    lines = []
    for part in entry.differs:
        if part == "graph":
            said = graph_words(entry.nodes, limit) if entry.nodes is not None else entry.nodes_note or "differs"
        else:
            said = entry.detail.get(part, "differs")
        lines.append(f"{part}: {said}")
    return "\n".join(lines) or "-"


def explanation_view(explained: Explanation, limit: int, now: float) -> RenderableType:
    head = grid()
    head.add_row("Key", explained.key or "-")
    head.add_row("Name", explained.name)
    if explained.signature is not None:
        sig = explained.signature
        head.add_row("Signature", f"feeds {', '.join(sig.feeds) or '-'}; fetches {', '.join(sig.fetches) or '-'}"
                     + (f"; targets {', '.join(sig.targets)}" if sig.targets else ""))
    if not explained.cacheable:
        head.add_row("Cached", f"no: not cacheable: {explained.reason}")
        return head
    head.add_row("Cached", "yes" if explained.cached else "no")
    if not explained.nearest:
        head.add_row("Nearest", "no other cached graph entry to compare with")
        return head
    view = table(Column("NEAREST ENTRY", no_wrap=True), "NAME", Column("AGE", no_wrap=True), "DIFFERS IN")
    for entry in explained.nearest:
        view.add_row(entry.key, entry.name or "-", ago(entry.created, now), _entry_lines(entry, limit))
    parts: list[RenderableType] = [head, "", view]
    if explained.more:
        parts.append(f"({plural(explained.more, 'more entry', 'more entries')} compared; --nearest to show more)")
    return Group(*parts)


@click.command("explain", short_help="Why a graph hits or misses: its key and the nearest cached entries.")
@click.argument("graph", type=click.Path(exists=True, path_type=Path))
@feed_option
@fetch_option
@click.option("--target", "targets", multiple=True, metavar="OP",
              help="A GraphDef's target op (run, not fetched), repeatable or comma-separated.")
@click.option("--signature", metavar="NAME",
              help="The SavedModel signature [default: serving_default, or the only one].")
@click.option("--name", metavar="NAME",
              help="The name the graph is compiled under [default: as warm and load_saved_model name it].")
@click.option("--nearest", "nearest", type=click.IntRange(min=1), default=3, show_default=True,
              help="How many nearest entries to show.")
@click.option("--limit", "limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Nodes listed per kind of change (added, removed, changed) before 'N more'.")
@json_option
@cache_dir_option
@quiet_native_stderr()
def explain_command(graph: Path, feeds: tuple[str, ...], fetches: tuple[str, ...], targets: tuple[str, ...],
                    signature: str | None, name: str | None, nearest: int, limit: int, as_json: bool) -> None:
    """Explain whether GRAPH (a frozen .pb/.pbtxt, or a SavedModel directory) would hit the cache.

    Prints the key GRAPH would have, whether it is cached, and the nearest cached entries (same name
    first, then most key parts shared), each with the key parts that differ (graph, feeds, fetches,
    targets, options, identity) and, where the graph differs, the nodes added, removed and changed.
    A SavedModel signature is frozen as load_saved_model freezes it; a GraphDef's feeds and fetches are
    guessed as warm guesses them. Reads the cache only.
    """
    mode = output_mode(as_json)
    feed_names, fetch_names, target_names = _names(feeds), _names(fetches), _names(targets)
    root = cache_root()
    if not root.is_dir():
        raise CliError(f"cache dir {str(root)!r} does not exist: nothing is cached there")
    from ..explain.report import explain
    from ..share import sources  # TensorFlow: only this command needs it
    from ..share.saved_model import is_saved_model_dir

    if is_saved_model_dir(graph):
        if feed_names or fetch_names or target_names:
            raise usage_error(f"--feed/--fetch/--target name a GraphDef's tensors; {graph} is a SavedModel, "
                              "whose signatures name their own (use --signature)")
    elif signature is not None:
        raise usage_error(f"--signature selects a SavedModel signature, and {graph} is not a SavedModel directory")
    from ..cache import GraphCache

    source = sources.load(graph, signature=signature, feeds=feed_names, fetches=fetch_names, targets=target_names)
    if source.guessed:
        message(f"{graph}: guessed {', '.join(source.guessed)}: feeds {', '.join(source.feeds) or '(none)'}; "
                f"fetches {', '.join(source.fetches) or '(none)'}"
                + (f"; targets {', '.join(source.targets)}" if source.targets else "")
                + " (pass --feed/--fetch to choose)", style="yellow")
    cache = GraphCache(root, read_only=True)
    explained = explain(source.graph_def, source.fetches, source.feeds, source.targets, cache=cache,
                        name=name or source.name, limit=nearest)
    now = time.time()
    emit(mode, data=explained.as_json(limit), human=lambda: explanation_view(explained, limit, now))


# -- misses -----------------------------------------------------------------------------------------------------
def miss_json(miss: recorded.Miss) -> dict[str, Any]:
    return {"time": iso(miss.time), "name": miss.name, "key": miss.key, "nearest": miss.nearest,
            "differs": list(miss.differs), "detail": miss.detail or None}


@click.command("misses", short_help="The recent misses, newest first, with the nearest cached entry.")
@click.option("--limit", "limit", type=click.IntRange(min=1), default=20, show_default=True,
              help=f"How many misses to list (the index keeps the newest {recorded.KEEP}).")
@click.option("--clear", is_flag=True, help="Forget the recorded misses.")
@remote_option("The misses of every host of the fleet instead (kept in Redis: {env} or $GRAPHCACHE_COORDINATOR), "
               "each with the nearest entry any host published.")
@json_option
@cache_dir_option
def misses_command(limit: int, clear: bool, remote: bool, as_json: bool) -> None:
    """List the misses processes recorded, newest first: when, the graph's name and key, the nearest
    cached entry at that moment and the key parts that differed from it (run 'graphcache explain' on the
    graph for the nodes). With --remote: every host's, with the host."""
    mode = output_mode(as_json)
    if remote:
        from .fleet import misses_remote

        misses_remote(mode, limit, clear)
        return
    cache = open_cache(write=clear)
    index = cache.index if cache is not None else None
    if clear:
        if index is None:
            raise CliError(f"cannot open the cache index in {cache_root()}")
        recorded.clear(index)
        message("Forgot the recorded misses.")
        return
    found = recorded.recent(index, limit) if index is not None else []
    now = time.time()

    def human() -> RenderableType | None:
        if not found:
            message("No misses recorded.")
            return None
        view = table(Column("WHEN", no_wrap=True), "NAME", Column("KEY", no_wrap=True),
                     Column("NEAREST", no_wrap=True), "DIFFERS IN")
        for miss in found:
            differs = ", ".join(miss.differs) if miss.nearest else "(nothing cached to compare with)"
            view.add_row(ago(miss.time, now), miss.name or "-", miss.key, miss.nearest or "-",
                         differs + (f"\n{miss.detail}" if miss.detail else ""))
        return view

    emit(mode, data=[miss_json(miss) for miss in found], human=human)


COMMANDS = (explain_command, misses_command)
