"""The XLA directory on disk, and TensorFlow's file format.

Layout: ``<cache_dir>/xla/<version>/<xla identity id>/`` holds TensorFlow's files, one
``<prefix>__<signature>__<cluster>__<device type>.pb`` per cluster (XlaSerializedCacheKeyToFileName,
device_executable_persistor.cc), plus graphcache's own:

- ``<file>.xxh3``: a sidecar (hash and size) saying the file was ingested as an entry, which is how
  "entry purged" is told apart from "not ingested yet";
- ``<file>.bad``: a file that failed its check, moved aside so TensorFlow never reads it (kept
  ``BAD_GRACE_SECONDS`` for inspection);
- ``*.tmp``: a writer's temp file (ours or TensorFlow's), removed once older than the store's grace period.

Each file is the payload of one entry of kind ``xla`` whose key is ``entry_key(<xla identity id>, <file>)``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Any

from ..compile import wire
from ..entry import kinds
from ..entry.keyparts import combine, hash_text
from ..store.local import TMP_GRACE_SECONDS, atomic_writer

XLA_DIR = "xla"
KIND = kinds.XLA  # the kind of the entries that hold these files
SIDECAR_SUFFIX = ".xxh3"
BAD_SUFFIX = ".bad"
BAD_GRACE_SECONDS = 7 * 86400.0  # files moved aside are kept this long for inspection
# TensorFlow's file name: XlaSerializedCacheKeyToFileName (device_executable_persistor.cc).
FILE_RE = re.compile(r"^(?:(?P<prefix>[^/\\]*?)__)?(?P<sig>\d+)__(?P<cluster>\d+)__"
                     r"(?P<device>[A-Za-z0-9_]+?)(?P<pjrt>__pjrt)?\.pb$")


def xla_root(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir) / XLA_DIR


KEY_PARTS = ("identity", "file")


def key_parts(xla_id: str, file_name: str) -> dict[str, str]:
    """The named parts of an executable's entry key: its XLA identity and TensorFlow's file name (which
    holds the cluster's and signature's fingerprints and the device type)."""
    return {"identity": xla_id, "file": hash_text(file_name)}


def entry_key(xla_id: str, file_name: str) -> str:
    return combine(key_parts(xla_id, file_name), KEY_PARTS)


def executables(directory: Path) -> list[str]:
    """The executables in ``directory`` (TensorFlow's file names; temp files, sidecars and .bad skipped)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if FILE_RE.match(name))


def well_formed(data: bytes | memoryview, name: str) -> bool:
    """Whether ``data`` is TensorFlow's XlaSerializedCacheEntry for the file ``name``.

    The message must span exactly the file (a truncated file fails), its key must hold the signature and
    cluster fingerprints, device type, prefix and PjRt flag the file name states, and the HLO module and
    the executable must be present. A flipped bit inside the executable's bytes is not caught: only the
    checksum recorded when a file is ingested catches that.
    """
    match = FILE_RE.match(name)
    if match is None or not data:
        return False
    data = memoryview(data)  # no copies of the executable's bytes
    try:
        top: dict[int, Any] = {}
        for number, wire_type, value in wire.fields(data):
            if number in (1, 2, 3) and wire_type != 2:
                return False
            top[number] = value
        if not top.get(2) or not top.get(3) or 1 not in top:
            return False
        key: dict[int, Any] = {1: 0, 2: 0, 3: b"", 4: b"", 5: 0}
        for number, _wire_type, value in wire.fields(top[1]):
            key[number] = value
    except ValueError:
        return False
    return (key[1] == int(match["sig"]) and key[2] == int(match["cluster"])
            and key[3] == match["device"].encode() and key[4] == (match["prefix"] or "").encode()
            and bool(key[5]) == bool(match["pjrt"]))


# -- writing and moving files --------------------------------------------------------------------------------
def atomic_write(path: Path, data: bytes) -> None:
    with atomic_writer(path) as fh:
        fh.write(data)


def read_sidecar(path: Path) -> tuple[str, int] | None:
    """The (xxh3-128, size) recorded when ``path`` was ingested; None when it never was (or it is unreadable)."""
    try:
        digest, size = path.with_name(path.name + SIDECAR_SUFFIX).read_text().split()
        return digest, int(size)
    except (OSError, ValueError):
        return None


def write_sidecar(path: Path, digest: str, size: int) -> None:
    """Record ``path`` as ingested (best effort: a missing sidecar only means it is checked again)."""
    if read_sidecar(path) == (digest, size):
        return
    with contextlib.suppress(OSError):
        atomic_write(path.with_name(path.name + SIDECAR_SUFFIX), f"{digest} {size}\n".encode())


def move_aside(path: Path) -> bool:
    """Rename ``path`` to ``<file>.bad`` (or, failing that, delete it) and drop its sidecar; False when it
    could be neither moved nor deleted (TensorFlow might still read it)."""
    try:
        os.replace(path, path.with_name(path.name + BAD_SUFFIX))
    except FileNotFoundError:
        pass
    except OSError:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            return False
    with contextlib.suppress(OSError):
        path.with_name(path.name + SIDECAR_SUFFIX).unlink()
    return True


def remove(path: Path) -> None:
    """Delete a file and its sidecar (ones already gone are not an error)."""
    for victim in (path, path.with_name(path.name + SIDECAR_SUFFIX)):
        with contextlib.suppress(FileNotFoundError):
            victim.unlink()


def remove_leftovers(directory: Path) -> None:
    """Old temp files (ours and TensorFlow's), old moved-aside files and sidecars whose file is gone."""
    now = time.time()
    for item in os.scandir(directory):
        name = item.name
        grace = (TMP_GRACE_SECONDS if name.endswith(".tmp")
                 else BAD_GRACE_SECONDS if name.endswith(BAD_SUFFIX) else None)
        if grace is None:
            if name.endswith(SIDECAR_SUFFIX) and not (directory / name[: -len(SIDECAR_SUFFIX)]).exists():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(item.path)
            continue
        with contextlib.suppress(FileNotFoundError):
            if now - item.stat().st_mtime > grace:
                os.unlink(item.path)


