"""What a command raises, and the exit codes the runner (:func:`graphcache.cli.app.run`) turns it into.

Kept apart from the runner so that command modules can raise without importing the group.
"""

from __future__ import annotations

PROG = "graphcache"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CliError(Exception):
    """A runtime failure to report as one ``graphcache: error: ...`` line (exit 1)."""

