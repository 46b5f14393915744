"""The local store: one file per entry under ``entries/<first 2 hex of key>/<key>.gce``.

Writes go to a temp file in the same folder, flushed and fsynced, then ``os.replace``d onto the final
name: a reader never sees a partial entry (pip's ``adjacent_tmp_file`` + ``replace``). Deletes race with
readers harmlessly: POSIX keeps an open file readable after unlink, and a reader that loses the race
sees a miss.

Single-flight compiles use striped lock files ``locks/<2 hex>.lock`` (256 of them), created once and
never deleted: unlinking a lock file would let waiters split across inodes (see filelock's _unix.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..entry import codec
from ..entry.keyshape import ENTRY_SUFFIX, entry_file_name, is_key
from .base import Store, StoredFile
from .fileread import pread_all, read_range

TMP_SUFFIX = ".tmp"
ENTRIES_DIR = "entries"
LOCKS_DIR = "locks"
TMP_GRACE_SECONDS = 3600.0  # a temp file older than this belongs to a writer that died
HEAD_READ = 64 * 1024  # read_parts reads this much first: prefix + header (a few kB), small entries whole
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

if TYPE_CHECKING:
    import filelock


@contextlib.contextmanager
def atomic_writer(final: Path, tag: str = "") -> Iterator[BinaryIO]:
    """A file handle whose content appears at ``final`` only whole: temp file in the same folder, then
    flush + fsync + ``os.replace``; on any failure the temp file is removed and ``final`` is untouched."""
    tmp = final.parent / f".{tag or final.name}.{os.getpid()}.{os.urandom(4).hex()}{TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class LocalStore(Store):
    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.root = Path(root)
        self.entries_dir = self.root / ENTRIES_DIR
        self.locks_dir = self.root / LOCKS_DIR
        self.read_only = read_only

    # -- paths ---------------------------------------------------------------------------------------------
    def path_for(self, key: str) -> Path:
        return self.entries_dir / key[:2] / entry_file_name(key)

    def lock(self, key: str, timeout: float) -> filelock.FileLock:
        """The striped lock guarding ``key``'s compile. Never deleted (see module docstring)."""
        import filelock  # its import is paid by the first compile, not by every process that opens a cache

        self.locks_dir.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(str(self.locks_dir / f"{key[:2]}.lock"), timeout=timeout, thread_local=False)

    def _open(self, key: str) -> int | None:
        """A read-only descriptor of ``key``'s file, or None when there is none (a deleter won the race)."""
        try:
            return os.open(self.path_for(key), os.O_RDONLY | _O_CLOEXEC)
        except FileNotFoundError:
            return None

    # -- Store interface -----------------------------------------------------------------------------------
    def read(self, key: str) -> bytes | None:
        fd = self._open(key)
        if fd is None:
            return None
        try:
            return read_range(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)

    def read_parts(self, key: str, hasher: Any = None) -> tuple[bytes, bytes] | None:
        """The entry as (prefix + header, stored payload), each its own ``bytes``: the payload then goes to
        TensorFlow without being copied out of the whole file's bytes. ``hasher`` is
        fed the stored payload as it is read (fileread.read_range).

        Two reads: the first ``HEAD_READ`` bytes (prefix, header and, for a small entry, everything), then the
        payload in one read into a ``bytes`` of its exact size (fileread.py: one copy, no join). Raises
        CorruptEntryError when the prefix is not an entry's; a file shorter than its prefix says comes back
        short, for the codec's length check.
        """
        fd = self._open(key)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            first = pread_all(fd, min(size, HEAD_READ), 0)
            body = codec.head_size(first)
            if body > len(first):  # a header over HEAD_READ bytes
                first += pread_all(fd, body - len(first), len(first))
            if len(first) >= size and body <= len(first):  # the whole (small) entry came in the first read
                stored = first[body:]
                if hasher is not None:
                    hasher.update(stored)
                return first[:body], stored
            return first[:body], read_range(fd, max(0, size - body), body, hasher)
        finally:
            os.close(fd)

    def read_head(self, key: str) -> bytes | None:
        """The prefix and header (one read of ``HEAD_READ`` bytes, a second only for a bigger header)."""
        fd = self._open(key)
        if fd is None:
            return None
        try:
            first = pread_all(fd, HEAD_READ, 0)
            body = codec.head_size(first)
            return first[:body] if body <= len(first) else first + pread_all(fd, body - len(first), len(first))
        finally:
            os.close(fd)

    def write_parts(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        final = self.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(final, key) as fh:
            for part in parts:
                fh.write(part)

    def delete(self, key: str) -> int:
        path = self.path_for(key)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # another process deleted it first: not an error
            return 0
        return size

    def stat(self, key: str) -> StoredFile | None:
        path = self.path_for(key)
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return StoredFile(key, str(path), st.st_size, st.st_mtime)

    def is_empty(self) -> bool:
        """Whether the store holds no entry file (temp files aside): the first entry found ends the scan."""
        with contextlib.closing(self.scan()) as files:
            return next(files, None) is None

    def scan(self) -> Iterator[StoredFile]:
        """Every entry file (not temp files), in no particular order."""
        try:
            shards = list(os.scandir(self.entries_dir))
        except FileNotFoundError:
            return
        for shard in shards:
            if not shard.is_dir():
                continue
            with contextlib.suppress(FileNotFoundError), os.scandir(shard.path) as items:  # closed if abandoned
                for item in items:
                    name = item.name
                    if not name.endswith(ENTRY_SUFFIX) or not is_key(name[: -len(ENTRY_SUFFIX)]):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        st = item.stat()
                        yield StoredFile(name[: -len(ENTRY_SUFFIX)], item.path, st.st_size, st.st_mtime)

    def stray_temp_files(self, older_than: float = TMP_GRACE_SECONDS) -> list[Path]:
        """Temp files left by writers that died mid-write (older than the grace period)."""
        cutoff = time.time() - older_than
        found: list[Path] = []
        try:
            shards = list(os.scandir(self.entries_dir))
        except FileNotFoundError:
            return found
        for shard in shards:
            if not shard.is_dir():
                continue
            with contextlib.suppress(FileNotFoundError):
                for item in os.scandir(shard.path):
                    if item.name.endswith(TMP_SUFFIX):
                        with contextlib.suppress(FileNotFoundError):
                            if item.stat().st_mtime < cutoff:
                                found.append(Path(item.path))
        return found

    def remove_stray_temp_files(self, older_than: float = TMP_GRACE_SECONDS) -> int:
        removed = 0
        for path in self.stray_temp_files(older_than):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
        return removed
