"""The private directory TensorFlow's function file cache reads, and the variable that points it there.

TensorFlow reads ``TF_GRAPH_CACHING`` with getenv at every multi-device instantiation
(OptimizeFunctionGraphOrReadFromFileCache); an empty value turns its file cache off. graphcache sets
the variable to "" at enable and, only while a hit's first call runs, to a directory of its own that
holds exactly one file: the entry just verified for this call, under the name TensorFlow will look up.
Afterwards the variable is "" again and the directory is emptied (files TensorFlow wrote meanwhile, for
functions the call instantiated while it ran and that took over 3 s, are deleted unread).

The variable is created once and only its value changes afterwards: glibc's setenv replaces an existing
variable's string pointer in place (and never frees the old string), so a getenv in a TensorFlow thread
at that moment sees the old or the new value; adding or removing a variable can move the environment
array under a concurrent reader.

Whether TensorFlow read the file (a hit) is told by its access time: the file's atime and mtime are set
in the past when it is written, so the next read moves the atime (Linux ``relatime`` updates an atime
that is not newer than the ctime). Where access times do not move (``noatime``, probed once) a file
present for the call counts as read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

from ..core import exits
from ..core.failures import warn_once

TF_GRAPH_CACHING = "TF_GRAPH_CACHING"
_PAST_SECONDS = 60.0


def take_over_variable() -> None:
    """Create ``TF_GRAPH_CACHING`` with an empty value (TensorFlow's own, unsafe file cache off). A value
    the user set is replaced, with one warning: its files are keyed by function name and node count only."""
    value = os.environ.get(TF_GRAPH_CACHING)
    if value:
        warn_once("tf_graph_caching", f"graphcache: {TF_GRAPH_CACHING}={value} is ignored while graphcache caches "
                                      "TF2 functions (TensorFlow's file cache keys files by function name and node "
                                      "count only, so a changed function can load a stale graph)")
    if value != "":
        os.environ[TF_GRAPH_CACHING] = ""


class ServedFile:
    """One file offered to TensorFlow for one call; ``read`` says afterwards whether TensorFlow read it."""

    def __init__(self, path: Path, armed_atime_ns: int | None) -> None:
        self.path = path
        self._armed = armed_atime_ns
        self.read = False

    def finish(self) -> None:
        try:
            atime = self.path.stat().st_atime_ns
        except OSError:
            atime = None
        self.read = self._armed is None or (atime is not None and atime > self._armed)


class TFDir:
    """A private (mode 0700) directory TensorFlow is pointed at for one call at a time."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="graphcache-functions-"))
        self.atime_moves = self._probe_atime()
        exits.at_exit(exits.FUNCTIONS, self.remove)  # the private directory goes at exit

    def _arm(self, path: Path) -> int:
        past = time.time_ns() - int(_PAST_SECONDS * 1e9)
        os.utime(path, ns=(past, past))
        return past

    def _probe_atime(self) -> bool:
        probe = self.path / "atime-probe"
        try:
            probe.write_bytes(b"x")
            armed = self._arm(probe)
            probe.read_bytes()
            return probe.stat().st_atime_ns > armed
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def place(self, file_name: str, data: bytes) -> ServedFile:
        """Put ``data`` at ``file_name`` and point TensorFlow here until ``release`` (the caller holds the
        process lock: one served file at a time). Raises OSError when the file cannot be written."""
        path = self.path / file_name
        self.path.mkdir(mode=0o700, exist_ok=True)  # a tmp cleaner may have removed it
        self._empty()
        with open(path, "wb") as fh:
            fh.write(data)
        served = ServedFile(path, self._arm(path) if self.atime_moves else None)
        os.environ[TF_GRAPH_CACHING] = str(self.path)
        return served

    def release(self, served: ServedFile) -> None:
        """Point TensorFlow nowhere again, note whether it read the file, and empty the directory."""
        os.environ[TF_GRAPH_CACHING] = ""
        served.finish()
        with contextlib.suppress(OSError):
            self._empty()

    def _empty(self) -> None:
        with os.scandir(self.path) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)

    def remove(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shutil.rmtree(self.path, ignore_errors=True)
