"""Which XLA executables TensorFlow loaded: hits and last use, told from access times.

TensorFlow does not report persistent-cache loads to Python, so this is approximate. At enable every file's
access time is re-armed (``os.utime`` with its own atime and mtime: the ctime moves past the atime, so
under Linux's default ``relatime`` the next read updates the atime; graphcache's own hashing read is undone
the same way). At sync, a file present since enable, not rewritten since (same inode, size and mtime) and
whose atime moved past its armed value was read by TensorFlow: a hit, counted once per process. When the
directory does not update access times (``noatime``, probed at enable) every file present and not
rewritten counts as used by every process that enables this identity. Concurrent processes can see each
other's reads (a hit may be counted by two processes) and only a read racing another process's enable can
go unseen.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path


@dataclass
class _Seen:
    """A file's state when graphcache last looked (and re-armed its access time)."""

    ino: int
    size: int
    mtime_ns: int
    atime_ns: int
    armed: bool

    def same_file(self, st: os.stat_result) -> bool:
        return (st.st_ino, st.st_size, st.st_mtime_ns) == (self.ino, self.size, self.mtime_ns)


class UseTracker:
    """The files of one XLA directory as graphcache last saw them, and the ones already counted as used."""

    def __init__(self) -> None:
        self.atime_works = False
        self._seen: dict[str, _Seen] = {}
        self._counted: set[str] = set()

    def probe(self, directory: Path) -> None:
        """Find out whether reads update access times in ``directory``; also proves it writable (raises)."""
        self.atime_works = _probe_atime(directory)

    def remember(self, name: str, st: os.stat_result) -> None:
        """``name`` as it is now (just re-armed): a later read of this very file is a use."""
        self._seen[name] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns, st.st_atime_ns, armed=True)

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)

    def settled(self, name: str) -> None:
        """Never count ``name`` as used in this process (it was compiled here, not loaded)."""
        self._counted.add(name)

    def unchanged(self, name: str, st: os.stat_result) -> bool:
        """Whether ``name`` is the file remembered (not new, not rewritten since)."""
        seen = self._seen.get(name)
        return seen is not None and seen.same_file(st)

    def first_use(self, name: str, st: os.stat_result) -> bool:
        """Whether the unchanged file ``name`` was read since it was remembered, and not counted yet in
        this process (it is counted now)."""
        seen = self._seen[name]
        if name in self._counted:
            return False
        used = st.st_atime_ns > seen.atime_ns if self.atime_works and seen.armed else True
        if used:  # without access times: present and not rewritten counts as used
            self._counted.add(name)
        return used


def arm(path: Path, st: os.stat_result) -> bool:
    """Re-arm ``path``'s access time (see the module docstring); False when it is not ours to touch."""
    try:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return True
    except OSError:  # not our file: access times stay as they are
        return False


def read_quietly(path: Path) -> tuple[bytes, os.stat_result]:
    """A file's bytes and its state after, leaving its access time as it was (and re-armed)."""
    st = os.stat(path)
    with open(path, "rb") as fh:
        data = fh.read()
    arm(path, st)
    return data, os.stat(path)


def _probe_atime(directory: Path) -> bool:
    """Whether reads update access times here (after an ``os.utime`` re-arm); also checks writability."""
    probe = directory / f".probe.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        probe.write_bytes(b"graphcache")
        st = os.stat(probe)
        old = st.st_mtime_ns - 10**9
        os.utime(probe, ns=(old, st.st_mtime_ns))
        with open(probe, "rb") as fh:
            fh.read()
        return os.stat(probe).st_atime_ns != old
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
