"""Import: verify a whole bundle, then add its entries to a cache dir; nothing is left of a failed import."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from ...core import settings
from ...core.cachedir import CacheDir, row_from_header
from ...entry import codec
from ...entry.checked import read_checked
from ...errors import CorruptEntryError
from ...store.local import LOCKS_DIR
from .format import IMPORT_LOCK, BundleError, BundleVersionError, scan
from .targets import open_target, signing_key_for


@dataclass
class ImportSummary:
    path: str
    cache_dir: str
    version: str
    added: list[str]
    present: list[str]  # already in the cache (kept as they were)
    bytes: int  # bytes written
    evicted: int = 0  # entries the size cap removed afterwards

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "cache_dir": self.cache_dir, "version": self.version, "added": self.added,
                "present": self.present, "count": len(self.added), "bytes": self.bytes,
                "evicted": self.evicted}


# -- import --------------------------------------------------------------------------------------------------
def _expected_version(cache: CacheDir, own_version: str | None, version: str | None) -> str:
    recorded = own_version or cache.current_version()
    if recorded:
        if version is not None and version != recorded:
            raise BundleVersionError(f"version {version} was given, but the current version of {cache.root} "
                                     f"is {recorded}")
        return recorded
    if version:
        return version
    raise BundleError(f"no current compiler version is recorded in {cache.root} (no GraphCache has opened "
                      "it): pass version= (it must equal the bundle's), or import through a GraphCache")


def _already_there(cache: CacheDir, key: str, signing_key: bytes | None) -> bool:
    try:
        return read_checked(cache.store, key, signing_key=signing_key) is not None
    except CorruptEntryError:
        return False


def import_bundle(target: Any, path: str | os.PathLike[str], *, version: str | None = None,
                  progress: Callable[[int], None] | None = None) -> ImportSummary:
    """Verify the bundle at ``path`` completely, then add its entries to ``target``.

    ``target``: a cache dir path (created, mode 0700, when missing), a CacheDir or a GraphCache. The
    bundle's version must be the target's current version (see the module docstring; ``version`` is used
    only when none is recorded). Raises BundleVersionError, CorruptBundleError, UnsafeBundleError or
    BundleError, having written nothing. ``progress(n)``: called per entry in each pass.
    """
    path = Path(path).expanduser()
    cache, own_version, limits = open_target(target, create=True)
    if cache.read_only:
        raise BundleError(f"{cache.root} is opened read-only: cannot import into it")
    expected = _expected_version(cache, own_version, version)
    if not path.is_file():
        raise BundleError(f"no bundle at {str(path)!r}")

    def counted(key: str, data: bytes, header: codec.EntryHeader) -> None:
        if progress is not None:
            progress(1)

    signing_key = signing_key_for(target)
    verified = scan(path, expected, counted, signing_key=signing_key)  # pass 1: nothing is written
    writer = _Writer(cache, signing_key, progress)
    (cache.root / LOCKS_DIR).mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(cache.root / LOCKS_DIR / IMPORT_LOCK), thread_local=False):
        writer.write_all(path, expected, verified)
    evicted = 0
    if cache.index is not None and writer.written:
        max_size = limits.get("max_size", settings.resolve_size(None, settings.ENV_MAX_SIZE,
                                                                 settings.DEFAULT_MAX_SIZE))
        evicted = cache.evict(max_size=max_size, max_age=limits.get("max_age")).entries
    return ImportSummary(str(path), str(cache.root), verified.manifest["version"], writer.written, writer.present,
                         writer.total, evicted)


class _Writer:
    """Pass 2: each member checked against pass 1 and written, with its row; all or nothing."""

    def __init__(self, cache: CacheDir, signing_key: bytes | None, progress: Callable[[int], None] | None) -> None:
        self.cache, self.signing_key, self.progress = cache, signing_key, progress
        self.written: list[str] = []
        self.present: list[str] = []
        self.total = 0
        self.now = time.time()

    def write_all(self, path: Path, expected: str, verified: Any) -> None:
        index = self.cache.index
        try:
            scan(path, expected, self.write, verified, self.signing_key)
            if index is not None:
                if expected not in index.versions():
                    index.record_version(expected, dict(verified.manifest.get("version_info") or {}))
                if self.total:
                    index.add_counters({"bytes_written": self.total})
        except BaseException:
            for key in self.written:
                with contextlib.suppress(OSError):
                    self.cache.store.delete(key)
            if index is not None:
                with contextlib.suppress(Exception):
                    index.remove(self.written)
            raise

    def write(self, key: str, data: bytes, header: codec.EntryHeader) -> None:
        if _already_there(self.cache, key, self.signing_key):
            self.present.append(key)
        else:
            self.written.append(key)  # before the write: a failed write is cleaned up too
            self.cache.store.write(key, data)
            self.total += len(data)
            if self.cache.index is not None:
                self.cache.index.upsert(row_from_header(header, len(data), self.now))
        if self.progress is not None:
            self.progress(1)


