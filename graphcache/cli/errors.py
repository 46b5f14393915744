"""What a command raises, and the exit codes the runner (:func:`graphcache.cli.app.run`) turns it into.

Kept apart from the runner so that command modules can raise without importing the group.
"""

from __future__ import annotations

import sys
from typing import Any

PROG = "graphcache"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CliError(Exception):
    """A runtime failure to report as one ``graphcache: error: ...`` line (exit 1)."""


class ScriptInterrupted(KeyboardInterrupt):
    """The script ended by an uncaught KeyboardInterrupt (its traceback printed). ``end_process`` gives
    Python a plain KeyboardInterrupt to end the process with, as it ends an interrupted ``python SCRIPT``:
    by SIGINT, after the exit handlers (graphcache's pending writes among them) ran. (Python does that for
    exactly KeyboardInterrupt, not a subclass.)"""

    @staticmethod
    def end_process() -> KeyboardInterrupt:
        """The exception to raise out of the console script; Python's excepthook stays quiet about it."""
        interrupt, previous = KeyboardInterrupt(), sys.excepthook

        def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            if value is not interrupt:  # the script's traceback was printed already
                previous(kind, value, tb)

        sys.excepthook = excepthook
        return interrupt
