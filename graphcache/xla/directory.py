"""The managed XLA directory: a materialized view of one XLA identity's entries, kept in sync.

Every executable TensorFlow writes becomes an entry of ``kind="xla"`` in the normal store
(``key = entry_key(<xla identity id>, <file name>)``, ``extra = {"file", "xla_dir", "xla_identity",
"xxh3", "device_type"}``, payload = the file's bytes), written through ``GraphCache.write_entry``, so
``ls``/``stats``/LRU and age eviction/``purge``/``verify``/bundles/the remote cover them.

- ``prepare`` (at enable, before TensorFlow can read anything): every file is hashed and checked against
  its entry's checksummed header (``extra["xxh3"]``; with a signing key, against the signed entry's
  payload). A file that does not match is moved aside as ``<file>.bad`` (and rewritten from its entry
  below); a file whose entry is gone (purged, evicted) is removed; a file with no entry and no sidecar was
  written by TensorFlow in a process that ended before it synced (killed, ``os._exit``) or that is still
  running: it is ingested when it is well formed (files.well_formed) and moved aside otherwise (with a
  signing key such files are never trusted). Then the identity's entries that only the remote has are
  pulled (its marker group: one listing, then parallel verified downloads; a remote that is down costs one
  timeout and one warning), and every entry of this identity whose file is missing is written (temp file
  + ``os.replace``): this is how entries from a bundle or another machine reach TensorFlow.
- ``sync`` (``GraphCache.flush``, interpreter exit): files TensorFlow wrote become entries, and the files
  TensorFlow read count as hits and update their entries' last use (hits.py).

Counters (the index's counters table, ``stats --json``): ``xla_compiles`` new files, ``xla_hits``,
``xla_materialized``, ``xla_bad_files``, ``xla_removed`` the repairs, ``xla_pulled`` the entries fetched
from the remote. Compile time is unknown (``compile_seconds=0``). Fail open: a failure warns once and
leaves TensorFlow unbound or the entry unsynced; XLA then compiles as it would without graphcache.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from ..core.counters import count_lookup
from ..core.failures import STORAGE_ERRORS, warn_once
from ..core.index.database import IndexRow
from ..core.service import EntryService
from ..core.versioning import remove_version_dirs
from ..entry import codec
from ..errors import CorruptEntryError
from . import files
from .files import BAD_SUFFIX, FILE_RE, KIND, XLA_DIR, entry_key, well_formed
from .hits import UseTracker, arm, read_quietly
from .identity import xla_identity_id

log = logging.getLogger("graphcache")

_CONSEQUENCE = "XLA compiles without the cache where it must"


@dataclass
class XlaReport:
    """What one enable (``prepare``) or ``sync`` did."""

    verified: int = 0
    materialized: int = 0
    ingested: int = 0
    moved_aside: int = 0
    removed: int = 0
    hits: int = 0
    pulled: int = 0
    bad_files: list[str] = field(default_factory=list)


class XlaCache:
    """One XLA directory (one identity) of one cache dir, kept in sync with the store's ``xla`` entries."""

    def __init__(self, cache: EntryService, identity: dict[str, Any]) -> None:
        self.cache = cache
        self.identity = identity
        self.id = xla_identity_id(identity)
        self.rel_dir = f"{XLA_DIR}/{cache.version}/{self.id}"
        self.directory = Path(cache.cache_dir) / XLA_DIR / cache.version / self.id
        self.bound = False
        self.last_report = XlaReport()
        self.uses = UseTracker()

    def __repr__(self) -> str:
        return f"XlaCache({str(self.directory)!r}, bound={self.bound})"

    @property
    def signing_key(self) -> bytes | None:
        return self.cache.signing_key

    def files(self) -> list[str]:
        """The executables in the directory (TensorFlow's file names; temp files, sidecars and .bad skipped)."""
        return files.executables(self.directory)

    def entries(self) -> list[IndexRow]:
        """The index rows of this identity's entries."""
        index = self.cache.index
        if index is None:
            return []
        return index.rows("kind = ? AND identity = ?", (KIND, self.id))

    # -- enable --------------------------------------------------------------------------------------------
    def prepare(self) -> bool:
        """Make the directory safe for TensorFlow to read: True when it may be bound."""
        report = XlaReport()
        self.last_report = report
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.uses.probe(self.directory)  # also proves the directory writable
        except STORAGE_ERRORS as exc:
            self.cache.failure("xla_io_error", f"preparing the XLA dir {self.directory}", exc,
                               consequence=_CONSEQUENCE, uncacheable=False)
            return False
        with contextlib.suppress(*STORAGE_ERRORS):  # housekeeping: never a reason not to bind
            self._remove_orphan_versions()
            files.remove_leftovers(self.directory)
        present: set[str] = set()
        for name in self.files():
            try:
                outcome = self._check(name, report)
            except STORAGE_ERRORS as exc:
                outcome = self._move_aside(name, report, f"unreadable ({exc})")
            if outcome is None:
                self.cache.failure("xla_io_error", f"checking {self.directory / name}",
                                   OSError("could not verify or move it aside"), consequence=_CONSEQUENCE,
                                   uncacheable=False)
                return False
            if outcome:
                present.add(name)
        try:
            self._pull(report)
        except Exception as exc:  # an optional step: never a reason not to bind
            self.cache.failure("xla_io_error", f"pulling XLA executables from {self.cache.remote}", exc,
                               consequence=_CONSEQUENCE, uncacheable=False)
        try:
            self._materialize(present, report)
        except STORAGE_ERRORS as exc:  # what is there is verified
            self.cache.failure("xla_io_error", f"writing executables into {self.directory}", exc,
                               consequence=_CONSEQUENCE, uncacheable=False)
        self.cache.count(xla_materialized=report.materialized, xla_bad_files=report.moved_aside,
                         xla_removed=report.removed, xla_pulled=report.pulled,
                         **count_lookup(KIND, misses=report.ingested, compiles=report.ingested))
        if report.moved_aside:
            warn_once("xla_bad_file", f"graphcache: {report.moved_aside} XLA executable(s) in {self.directory} "
                                      f"failed their check ({', '.join(report.bad_files[:3])}); moved aside as "
                                      f"*{BAD_SUFFIX} so TensorFlow never reads them, and rewritten from their "
                                      "entries when those are intact")
        return True

    def _check(self, name: str, report: XlaReport) -> bool | None:
        """Verify one file: True (kept), False (removed or moved aside), None (bad and could not be moved)."""
        path = self.directory / name
        key = entry_key(self.id, name)
        data, st = read_quietly(path)
        digest = xxhash.xxh3_128_hexdigest(data)
        expected = self._expected_digest(key)
        if expected is not None:
            if expected != digest:
                return self._move_aside(name, report, "does not match its entry")
            report.verified += 1
        elif files.read_sidecar(path) is not None:  # ingested once; the entry was purged or evicted since
            self._remove(name)
            report.removed += 1
            return False
        elif self.signing_key is not None or not well_formed(data, name):
            return self._move_aside(name, report, "not an entry, and not a well-formed XLA cache file")
        elif not self._ingest(name, data, st, digest):
            self.uses.remember(name, st)  # well formed but not stored (no sidecar: the next enable tries again)
            return True
        else:
            report.ingested += 1
        files.write_sidecar(path, digest, len(data))
        self.uses.remember(name, st)
        return True

    def _expected_digest(self, key: str) -> str | None:
        """The xxh3-128 the file must have according to its entry (None: no usable entry)."""
        if self.signing_key is not None:  # only a signed payload is trusted: read and check the whole entry
            entry = self.cache.read_entry(key, kind=KIND)
            return None if entry is None else xxhash.xxh3_128_hexdigest(entry[1])
        try:
            head = self.cache.store.read_head(key)  # the local entry's header alone: never the remote
            header = None if head is None else codec.peek_header(head)
        except CorruptEntryError as exc:
            self.cache.discard_corrupt(key, exc)
            return None
        if header is None or header.key != key or header.kind != KIND:
            return None
        value = header.extra.get("xxh3")
        return value if isinstance(value, str) else None

    def _pull(self, report: XlaReport) -> None:
        """Copy this identity's entries that only the remote has into the local store (``_materialize``
        then writes their files): one listing of the identity's marker group, then parallel verified
        downloads. The entry service fails open (breaker, timeout, one warning) and refuses corrupt or
        untrusted objects; without a remote this pulls nothing."""
        report.pulled = len(self.cache.pull_group(self.id))

    def _materialize(self, present: set[str], report: XlaReport) -> None:
        """Write every entry of this identity whose file is missing (entries from a bundle, moved-aside files)."""
        if self.cache.read_only:
            return
        present_keys = {entry_key(self.id, name) for name in present}
        for row in self.entries():
            if row.key in present_keys:
                continue
            entry = self.cache.read_entry(row.key, kind=KIND)
            if entry is None:
                continue
            header, payload = entry
            name = header.extra.get("file")
            if (header.extra.get("xla_dir") != self.rel_dir or not isinstance(name, str)
                    or not FILE_RE.match(name) or entry_key(self.id, name) != row.key):
                continue  # not ours, or a file name that could escape the directory
            digest = xxhash.xxh3_128_hexdigest(payload)
            if header.extra.get("xxh3") != digest:
                self.cache.discard_corrupt(row.key, CorruptEntryError("payload does not match its xxh3"))
                continue
            path = self.directory / name
            files.atomic_write(path, payload)
            files.write_sidecar(path, digest, len(payload))
            arm(path, os.stat(path))
            self.uses.remember(name, os.stat(path))
            present.add(name)
            report.materialized += 1

    def _remove_orphan_versions(self) -> None:
        """Remove ``xla/<version>`` dirs of versions the manifest no longer knows (purged while offline)."""
        index = self.cache.index
        if index is None:
            return
        known = set(index.versions()) | {self.cache.version}
        for child in self.directory.parent.parent.iterdir():
            if child.is_dir() and child.name not in known:
                remove_version_dirs(self.cache.cache_dir, child.name)

    # -- sync ----------------------------------------------------------------------------------------------
    def sync(self) -> XlaReport:
        """Ingest new files, record hits (see the module docstring)."""
        report = XlaReport()
        if self.cache.read_only or self.cache.disabled:
            return report
        for name in self.files():
            path = self.directory / name
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if self.uses.unchanged(name, st):
                if self.uses.first_use(name, st):
                    self.cache.touch(entry_key(self.id, name))
                    report.hits += 1
                continue
            try:
                data, st = read_quietly(path)
            except FileNotFoundError:
                continue
            if not well_formed(data, name):
                continue  # not TensorFlow's (complete) file; the next enable checks it
            digest = xxhash.xxh3_128_hexdigest(data)
            key = entry_key(self.id, name)
            if self._expected_digest(key) != digest:
                if not self._ingest(name, data, st, digest):
                    continue
                report.ingested += 1
            files.write_sidecar(path, digest, len(data))
            self.uses.remember(name, st)
            self.uses.settled(name)
        self.cache.count(**count_lookup(KIND, hits=report.hits, misses=report.ingested, compiles=report.ingested))
        return report

    def _ingest(self, name: str, data: bytes, st: os.stat_result, digest: str) -> bool:
        match = FILE_RE.match(name)
        assert match is not None
        header = codec.EntryHeader(
            key=entry_key(self.id, name), version=self.cache.version, identity=self.identity,
            name=f"xla:{match['device']}:{match['sig']}", kind=KIND, created=st.st_mtime, compile_seconds=0.0,
            key_parts=files.key_parts(self.id, name),
            extra={"file": name, "xla_dir": self.rel_dir, "xla_identity": self.id, "xxh3": digest,
                   "device_type": match["device"]})
        return self.cache.write_entry(header, data)

    # -- repairs -------------------------------------------------------------------------------------------
    def _move_aside(self, name: str, report: XlaReport, why: str) -> bool | None:
        path = self.directory / name
        log.warning("graphcache: XLA executable %s %s; moving it aside", path, why)
        report.moved_aside += 1
        report.bad_files.append(name)
        return False if files.move_aside(path) else None

    def _remove(self, name: str) -> None:
        files.remove(self.directory / name)
        self.uses.forget(name)
