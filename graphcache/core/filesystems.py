"""Which file system a cache dir is on, and a clear word when it is a network one.

A cache dir is made for one machine's disk: its index is SQLite in WAL mode, whose shared-memory file does
not work across machines (https://www.sqlite.org/wal.html: "WAL does not work over a network filesystem"),
and its compile locks are advisory file locks, which NFS, CIFS and the parallel file systems honour only
partly across clients. Entry files themselves are written whole and renamed into place, which those file
systems publish atomically, and the index heals itself from them; so one machine using a network cache
dir works, while several sharing one can lose index updates and compile a graph twice. Sharing between
machines is the remote tier's job (``GRAPHCACHE_REMOTE``: S3, any fsspec URL, Redis), over a local dir.

Detection reads ``/proc/self/mountinfo`` (Linux): the mount with the longest mount point that holds the
dir names the file system type. Elsewhere, or when it cannot be read, nothing is detected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from .failures import warn_once

MOUNTINFO = "/proc/self/mountinfo"
# File system types (mountinfo's names) on which SQLite's WAL and file locks are unsafe across machines.
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
    "fuse.glusterfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "fuse.ceph",
    "fuse.lustre", "pvfs2", "orangefs", "ocfs2", "gfs2",
})


class Mount(NamedTuple):
    point: str
    fstype: str
    source: str


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` text: fields 5 (mount point) and, after the ``-``
    separator, the type and source (proc(5)); octal escapes (``\\040`` for a space) decoded."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        try:
            after = fields.index("-", 6)  # optional fields end with "-"
            mounts.append(Mount(_unescape(fields[4]), fields[after + 1], _unescape(fields[after + 2])))
        except (ValueError, IndexError):
            continue  # not a mountinfo line
    return mounts


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mount_of(path: str | os.PathLike[str], mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (resolved): the one with the longest mount point above it."""
    resolved = str(Path(path).resolve())
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = resolved == point or resolved.startswith(point if point == "/" else point + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


def network_mount(path: str | os.PathLike[str], mountinfo: str | None = None) -> Mount | None:
    """The network file system's mount ``path`` is on, or None (a local disk, or nothing could be read)."""
    if mountinfo is None:
        try:
            mountinfo = Path(MOUNTINFO).read_text()
        except OSError:
            return None
    mount = mount_of(path, parse_mountinfo(mountinfo))
    return mount if mount is not None and mount.fstype in NETWORK_TYPES else None


def warn_if_network(path: str | os.PathLike[str], mountinfo: str | None = None) -> Mount | None:
    """Warn once per process when the cache dir ``path`` is on a network file system; returns its mount."""
    mount = network_mount(path, mountinfo)
    if mount is not None:
        warn_once("network_cache_dir", network_message(path, mount))
    return mount


def network_message(path: str | os.PathLike[str], mount: Mount) -> str:
    return (f"graphcache: the cache dir {str(path)!r} is on a network file system ({mount.fstype}, {mount.source} "
            f"on {mount.point}), where its index (SQLite WAL) and compile locks are not safe across machines. "
            f"It works from one machine; to share compiles between machines keep the cache dir on a local disk "
            f"and set GRAPHCACHE_REMOTE (s3://..., redis://..., or any fsspec URL)")
