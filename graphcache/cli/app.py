"""The ``graphcache`` group, the console script :func:`main`, and :func:`run`, the one exception-to-exit-code map.

The group imports the command modules and adds their commands; no command module imports the group
(huggingface_hub's cli/ layout), so there is no import cycle and a command is tested by invoking the
group as a user would.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import click

from ..errors import GraphCacheError, GraphCacheWarning
from ..version import package_version
from . import explain, info, manage, share
from . import run as run_commands
from .errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PROG, CliError, ScriptInterrupted
from .options import cache_dir_option, debug_enabled, debug_hint, group_epilog


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
    return f"unexpected {type(exc).__name__}: {exc} ({debug_hint()})"


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
    except click.Abort as exc:
        if isinstance(exc.__cause__, ScriptInterrupted):  # click's name for it: the group's main ends the process
            raise exc.__cause__ from None
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
        if debug_enabled():
            traceback.print_exception(exc, file=sys.stderr)
        _error(_failure_text(exc))
        return EXIT_FAILURE
    return result if isinstance(result, int) else EXIT_OK


@contextlib.contextmanager
def warnings_as_messages() -> Iterator[None]:
    """Show graphcache's own warnings as one ``graphcache: warning: ...`` line on stderr (not Python's
    ``file:line: GraphCacheWarning: ...`` form); other warnings are shown as Python shows them."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, GraphCacheWarning):
            click.echo(f"{PROG}: warning: {str(message).removeprefix(PROG + ': ')}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


class GraphCacheGroup(click.Group):
    """A group whose ``main`` runs through :func:`run`: one place maps exceptions to exit codes."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> int:
        try:
            with warnings_as_messages():
                code = run(lambda: super(GraphCacheGroup, self).main(
                    args, prog_name or PROG, complete_var, standalone_mode=False, **extra))
        except ScriptInterrupted:
            if not standalone_mode:
                return EXIT_INTERRUPTED
            raise ScriptInterrupted.end_process() from None
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(cls=GraphCacheGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=group_epilog())
@click.version_option(package_version(), "--version", prog_name=PROG, message="%(prog)s %(version)s")
@cache_dir_option
def cli() -> None:
    """Inspect and manage a graphcache cache dir (compiled TensorFlow graphs).

    Exit codes: 0 success, 1 failure, 2 usage error.
    """


for _command in (*info.COMMANDS, *manage.COMMANDS, *share.COMMANDS, *explain.COMMANDS,
                 *run_commands.COMMANDS):
    cli.add_command(_command)


def main(args: Sequence[str] | None = None, *, standalone_mode: bool = True) -> int:
    """The console script: run ``graphcache`` with ``args`` (default: ``sys.argv[1:]``).

    Exits with the command's exit code, or returns it when ``standalone_mode`` is False.
    """
    return cli.main(list(args) if args is not None else None, standalone_mode=standalone_mode)
