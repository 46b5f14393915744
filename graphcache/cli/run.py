"""``graphcache run``: run a Python script or module with graphcache installed (no code change).

    graphcache [--cache-dir DIR] run [--cache-dir DIR] [--accelerate-train-mode MODE] [--no-children]
               (SCRIPT | -m MODULE) [ARGS]...

Like ``python SCRIPT ARGS`` / ``python -m MODULE ARGS``: the script runs as ``__main__`` with ``sys.argv``
as given, every TF1-style session it makes is a graphcache session (graphcache/session/adoption.py), and so are
those of the Python processes it starts (``--no-children``: not those). The script's exit status is the
command's (an uncaught exception: its traceback and 1, as Python does). The cache dir: ``--cache-dir``
(created when missing), else ``$GRAPHCACHE_DIR``, else the user cache dir; the other ``GRAPHCACHE_*``
settings apply as everywhere.

Exit status, as Python's own (tests/test_adoption.py runs both side by side): a missing script 2, a
missing module 1, ``sys.exit(n)`` n, an uncaught exception 1 after its traceback, and an uncaught
KeyboardInterrupt ends the process by SIGINT once the exit handlers ran (a shell shows 130).

``run_command`` is a plain click command: the ``graphcache`` group (cli/app.py) adds it. TensorFlow is
imported only when the command runs.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

import click

from .errors import ScriptInterrupted

_LOOKUP_FILE = "graphcache/session/adoption.py"  # where a missing script or module is reported from
_OWN_FILES = (_LOOKUP_FILE, "graphcache/cli/run.py", "/runpy.py", "<frozen runpy>")


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                        "help_option_names": ["-h", "--help"]},
               short_help="Run a Python script with graphcache installed (no code change).")
@click.option("-m", "as_module", is_flag=True, help="ARGS[0] is a module to run as a script (like python -m).")
@click.option("--cache-dir", "cache_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="The cache dir (created when missing) [default: the group's --cache-dir, $GRAPHCACHE_DIR, "
                   "else the user cache dir].")
@click.option("--accelerate-train-mode", metavar="MODE",
              help="ExperimentalConfig(accelerate_train_mode=MODE): TYPE|SPLIT|RATIO, e.g. fast1|step|0.9 "
                   "(the training loop needs a TellMeStepOrLossHook).")
@click.option("--no-children", is_flag=True, help="Do not install graphcache in the script's child processes.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, required=True, metavar="(SCRIPT | -m MODULE) [ARGS]...")
@click.pass_context
def run_command(ctx: click.Context, as_module: bool, cache_dir: Path | None, accelerate_train_mode: str | None,
                no_children: bool, args: tuple[str, ...]) -> int:
    """Run SCRIPT (or -m MODULE) with ARGS, every TensorFlow session in it compiled through the cache."""
    from ..config import ExperimentalConfig
    from ..core import settings
    from ..session import adoption

    if cache_dir is None:  # the group's --cache-dir (graphcache --cache-dir DIR run ...), if it has one
        cache_dir = getattr(ctx.find_root().obj, "cache_dir", None)
    if cache_dir is not None:
        cache_dir = settings.create_cache_dir(cache_dir.expanduser())  # errors name it (cli/app.py prints them)
    try:
        config = ExperimentalConfig(graph_compiler_cache_dir=cache_dir,
                                    accelerate_train_mode=accelerate_train_mode or None)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--accelerate-train-mode") from None
    target, argv = args[0], list(args[1:])
    runner = adoption.run_module if as_module else adoption.run_script
    try:
        runner(target, argv, children=not no_children, experimental_config=config)
    except SystemExit as exc:
        return exit_status(exc.code)
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        if _raised_here(exc):  # the script or module itself is missing: Python says so in one line
            click.echo(f"graphcache run: {exc}", err=True)
            return 1 if as_module else 2
        _print_script_traceback(exc)
        return 1
    except KeyboardInterrupt as exc:
        _print_script_traceback(exc)
        raise ScriptInterrupted from None
    except BaseException as exc:
        _print_script_traceback(exc)
        return 1
    return 0


def exit_status(code: Any) -> int:
    """The process exit status of ``sys.exit(code)``, as Python computes it (a message prints and gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    click.echo(str(code), err=True)
    return 1


def _raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` comes from looking the script up, not from inside it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith(_LOOKUP_FILE)


def _print_script_traceback(exc: BaseException) -> None:
    """The traceback Python would print for the script: graphcache's and runpy's frames left out."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith(_OWN_FILES):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


COMMANDS = (run_command,)
