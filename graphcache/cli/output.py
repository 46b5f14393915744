"""The CLI's one output sink: consoles, output modes, tables, progress, prompts and the formatting helpers.

Data (tables, JSON, keys) goes to stdout through :func:`emit`; messages, prompts, spinners and progress
bars go to stderr. Off a terminal nothing transient is drawn and tables are not wrapped, so scripts
read plain lines. Every command draws its tables with :func:`table` and :func:`grid`, so the house
style is written here once.
"""

from __future__ import annotations

import contextlib
import enum
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import click
from rich import box
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table
from rich.text import Text

from ..core.units import format_size
from .errors import CliError

PROGRESS_MIN = 50  # by default a progress bar shows from this many steps on (and only on a terminal)

__all__ = [
    "PROGRESS_MIN", "Mode", "ProgressBar", "ago", "confirm", "console", "duration", "emit", "format_size",
    "grid", "is_terminal", "iso", "message", "plural", "plural_entries", "progress", "spinner",
    "stdin_is_terminal", "table", "version_cell",
]


# -- consoles ---------------------------------------------------------------------------------------------------
def is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def stdin_is_terminal() -> bool:
    return is_terminal(sys.stdin)


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout/stderr; unbounded width when it is not a terminal (no wrapping)."""
    terminal = is_terminal(sys.stderr if stderr else sys.stdout)
    return Console(stderr=stderr, markup=False, highlight=False, soft_wrap=not terminal,
                   width=None if terminal else 1 << 12)


def message(text: str, style: str | None = None) -> None:
    """A message for the user, on stderr."""
    console(stderr=True).print(text, style=style)


def confirm(count: int, yes: bool) -> None:
    """Ask before deleting (on a terminal); refuse without ``--yes`` when there is no terminal to ask on."""
    if yes:
        return
    if not stdin_is_terminal():
        raise CliError(f"refusing to delete {plural_entries(count)} without "
                       "confirmation: stdin is not a terminal (pass --yes to delete)")
    if not click.confirm("Delete them?", default=False, err=True):
        raise CliError("nothing deleted")


# -- results on stdout ------------------------------------------------------------------------------------------
class Mode(enum.Enum):
    TABLE = "table"
    JSON = "json"
    QUIET = "quiet"


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
        if is_terminal(sys.stdout):
            out.print(renderable)
            return
        with out.capture() as captured:  # no terminal: drop the padding rich puts after the last column
            out.print(renderable)
        click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def table(*columns: Column | str) -> Table:
    """A data table in the house style: a bold header underlined, no outer border, no edge padding.

    ``columns`` are rich :class:`~rich.table.Column` objects (or plain headers), e.g.
    ``Column("SIZE", justify="right", no_wrap=True)``.
    """
    return Table(*columns, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")


def grid() -> Table:
    """A two-column label/value table without borders."""
    view = Table.grid(padding=(0, 3))
    view.add_column(style="bold", no_wrap=True)
    view.add_column()
    return view


def version_cell(version: str, current: str) -> Text:
    """A version for a table cell: dimmed unless it is the current one."""
    return Text(version or "-", style="" if version == current else "dim")


# -- progress on stderr -----------------------------------------------------------------------------------------
class ProgressBar:
    """What a command reports progress to; does nothing when no bar is drawn (see :func:`progress`).

    Counted work calls :meth:`advance`; work done one named item at a time calls :meth:`step` as each item
    starts, so the bar shows what is running (warming one graph can take a minute).
    """

    def __init__(self, bar: Progress | None = None, task: TaskID | None = None) -> None:
        self._bar, self._task = bar, task
        self._stepping = False

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def advance(self, count: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, count)

    def step(self, description: str) -> None:
        """Start the next item: the previous one (if any) counts as done, ``description`` names the new one."""
        if self._stepping:
            self.advance(1)
        self._stepping = True
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=description)


@contextlib.contextmanager
def progress(description: str, total: int, *, min_total: int = PROGRESS_MIN) -> Iterator[ProgressBar]:
    """A transient progress bar on stderr, drawn only on a terminal and for at least ``min_total`` steps."""
    if total < min_total or not is_terminal(sys.stderr):
        yield ProgressBar()
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
               MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        yield ProgressBar(bar, bar.add_task(description, total=total))


@contextlib.contextmanager
def spinner(text: str) -> Iterator[None]:
    """A transient spinner on stderr while an operation without progress steps runs (terminal only)."""
    if not is_terminal(sys.stderr):
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
