"""Bundles: a cache dir's entries in one file, to carry from a CI machine to the machines that run the graphs.

    graphcache export cache.tar.zst            # every entry of the current version
    graphcache import cache.tar.zst            # on the consumer: verify, then add

Layout: a tar stream (POSIX pax) compressed as one zstd frame with a content checksum. Members, in order::

    manifest.json              always first
    entries/<key>.gce          one per entry: the entry file's bytes, unchanged (codec.py format)

The manifest (JSON)::

    {"format": "graphcache-bundle", "bundle_version": 1, "created": "<ISO-8601 UTC>",
     "graphcache": "<package version>", "version": "<compiler version id, e.g. tf2.21.0-1a2b3c4d>",
     "version_info": {<TF version, git version, entry format, salt>},
     "identities": {"<identity id>": {<full compiler identity: backend, options, device kind...>}},
     "entries": [{"key": ..., "kind": "graph" | "saved_model", "name": ..., "path": "entries/<key>.gce",
                  "size": <bytes>, "xxh3_128": "<hex of the member's bytes>", "identity_id": ...,
                  "target": "<graph key, aliases only>"}],
     "total_bytes": <sum of sizes>}

A bundle holds the entries of exactly one compiler version; exporting an alias (kind ``saved_model``)
takes its target graph entry along. Import refuses, before writing anything:

- a bundle of another version than the cache's current one (both named in the error);
- a corrupt bundle: not zstd or not a tar, truncated, zstd checksum, a member's size or xxh3-128 differing
  from the manifest, an entry failing ``codec.decode`` against its key, members missing or not listed;
- with a signing key (``GRAPHCACHE_SIGNING_KEY``, or the GraphCache's), an unsigned or badly signed entry;
- a member that is not ``manifest.json`` or ``entries/<32 hex>.gce``, a regular file: absolute paths,
  ``..``, symlinks, hard links, devices, directories. Nothing is ever extracted: members are read as bytes.

The whole bundle is verified first (one streaming pass); a second pass writes each entry with the store's
atomic write and indexes it, checking each member against the first pass. When anything fails midway,
what this import wrote is removed: the cache is left as it was. Entries the cache already holds are kept.

**The current version.** ``import_bundle`` reads the target's current version from its index
(``CacheDir.current_version()``, no TensorFlow). Given a :class:`~graphcache.GraphCache`, its own version
is used. A cache dir that has never been opened has no current version: pass ``version=`` (which must
equal the bundle's), or import through a GraphCache. The CLI's ``import`` in that case asks this
installation's TensorFlow for its version (it imports TensorFlow only then).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import filelock
import xxhash
import zstandard

from .core import codec, kinds, settings
from .core.cachedir import CacheDir, row_from_header
from .core.checked import read_checked, read_entry_file
from .core.filters import Filter
from .core.keyparts import identity_id
from .core.service import EntryService
from .errors import CorruptEntryError, GraphCacheError, UntrustedEntryError
from .store.local import LOCKS_DIR, atomic_writer, is_key

BUNDLE_FORMAT = "graphcache-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
ENTRY_MEMBER = re.compile(r"entries/([0-9a-f]{32})\.gce")
MAX_MANIFEST = 64 * 2**20
ZSTD_LEVEL = 3
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 2**20
_IMPORT_LOCK = "import.lock"


class BundleError(GraphCacheError):
    """A bundle cannot be exported or imported; the message says why."""


class BundleVersionError(BundleError):
    """The bundle's compiler version is not the cache's current version."""


class CorruptBundleError(BundleError):
    """The bundle is not a graphcache bundle, is truncated, or fails a checksum."""


class UntrustedBundleError(BundleError):
    """A signing key is set and an entry of the bundle is unsigned or does not verify with it."""


class UnsafeBundleError(BundleError):
    """A member would land outside the cache (absolute path, ``..``, link, device) or is not an entry."""


@dataclass
class ExportSummary:
    path: str
    version: str
    entries: list[dict[str, Any]]  # the manifest's entry records
    bytes: int  # the bundle file's size
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"key", "problem"}: corrupt or gone

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "version": self.version, "count": len(self.entries), "bytes": self.bytes,
                "entry_bytes": sum(e["size"] for e in self.entries), "entries": self.entries,
                "skipped": self.skipped}


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


# -- opening caches ------------------------------------------------------------------------------------------
def signing_key_for(target: Any) -> bytes | None:
    """The signing key entries are checked with: the cache's own, else ``GRAPHCACHE_SIGNING_KEY``."""
    if isinstance(target, EntryService):
        return target.signing_key
    return settings.resolve_str(None, settings.ENV_SIGNING_KEY).encode() or None


def _cache_dir(target: Any, *, create: bool) -> tuple[CacheDir, str | None, dict[str, Any]]:
    """(CacheDir, the GraphCache's version or None, eviction settings) for a path, CacheDir or GraphCache."""
    if isinstance(target, CacheDir):
        return target, None, {}
    if isinstance(target, EntryService):
        return target.management(), target.version, {"max_size": target.max_size, "max_age": target.max_age}
    root = Path(target).expanduser()
    if create and not root.exists():
        root.mkdir(parents=True, mode=0o700)
    if not root.is_dir():
        raise BundleError(f"cache dir {str(root)!r} does not exist or is not a directory")
    try:
        cache = CacheDir(root)
    except (OSError, sqlite3.Error):
        if create:
            raise
        return CacheDir(root, read_only=True), None, {}
    if cache.index is not None and cache.index.created_now:
        cache.reconcile()
    return cache, None, {}


# -- export --------------------------------------------------------------------------------------------------
def _member_info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, int(mtime), 0o644, tarfile.REGTYPE
    info.uname = info.gname = ""
    return info


def export_bundle(source: Any, path: str | os.PathLike[str], keys: Iterable[str] | None = None,
                  filters: Iterable[str | Filter] | None = None, *, level: int = ZSTD_LEVEL,
                  progress: Callable[[int], None] | None = None) -> ExportSummary:
    """Write the selected entries of ``source`` (a cache dir path, CacheDir or GraphCache) to ``path``.

    ``keys``: exact keys; ``filters``: ``FIELD OP VALUE`` expressions (both given: keys that match).
    Neither: every entry of the current version. Aliases bring their target entries along. The entries
    must share one compiler version. Corrupt or vanished entries are skipped and listed in ``skipped``.
    The bundle is written to a temp file beside ``path`` and renamed into place. ``progress(n)`` is
    called as entries are written.
    """
    cache, own_version, _ = _cache_dir(source, create=False)
    signing_key = signing_key_for(source)
    current = own_version or cache.current_version()
    rows = cache.select_to_share(keys, filters, current_version=current)
    if not rows:
        raise BundleError(f"no entries selected in {cache.root}: nothing to export")
    # pass 1: verify and checksum every selected entry, adding alias targets
    records: dict[str, dict[str, Any]] = {}
    identities: dict[str, dict[str, Any]] = {}
    skipped: list[dict[str, str]] = []
    version_info: dict[str, Any] = {}
    queue = [row.key for row in rows]
    while queue:
        key = queue.pop(0)
        if key in records:
            continue
        try:
            header, data = read_entry_file(cache.store, key, signing_key=signing_key)
        except (CorruptEntryError, OSError) as exc:
            skipped.append({"key": key, "problem": str(exc)})
            continue
        ident = identity_id(header.identity) if header.identity else ""
        if header.identity:
            identities[ident] = header.identity
            version_info = version_info or dict(header.identity.get("version_info") or {})
        record = {"key": key, "kind": header.kind, "name": header.name, "version": header.version,
                  "path": f"entries/{key}.gce", "size": len(data),
                  "xxh3_128": xxhash.xxh3_128_hexdigest(data),
                  "identity_id": ident, "created": header.created}
        if header.kind == kinds.SAVED_MODEL:
            target = str(header.extra.get("target", ""))
            record["target"] = target
            if is_key(target) and target not in records and cache.store.stat(target) is not None:
                queue.append(target)
        records[key] = record
    if not records:
        raise BundleError(f"none of the {len(rows)} selected entries is readable: "
                          + "; ".join(f"{s['key']}: {s['problem']}" for s in skipped[:3]))
    versions = sorted({r["version"] for r in records.values()})
    if len(versions) > 1:
        raise BundleError(f"the selected entries belong to {len(versions)} compiler versions "
                          f"({', '.join(versions)}); a bundle holds one: narrow the selection, e.g. "
                          "--filter identity=current")
    version = versions[0]
    entries = [{k: v for k, v in r.items() if k != "version"} for r in records.values()]
    manifest = {
        "format": BUNDLE_FORMAT, "bundle_version": BUNDLE_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"), "graphcache": _package_version(),
        "version": version, "version_info": version_info, "identities": identities, "entries": entries,
        "total_bytes": sum(e["size"] for e in entries),
    }
    manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
    # pass 2: write the bundle
    final = Path(path).expanduser()
    if final.is_dir():
        raise BundleError(f"{str(final)!r} is a directory: give the bundle's file name")
    with atomic_writer(final) as fh:
        compressor = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=False)
        with compressor.stream_writer(fh, closefd=False) as zfh, \
                tarfile.open(fileobj=zfh, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_member_info(MANIFEST, len(manifest_bytes), time.time()), io.BytesIO(manifest_bytes))
            for entry in entries:
                data = cache.store.read(entry["key"])
                if data is None or xxhash.xxh3_128_hexdigest(data) != entry["xxh3_128"]:
                    raise BundleError(f"entry {entry['key']} changed while it was being exported: run again")
                tar.addfile(_member_info(entry["path"], len(data), entry["created"]), io.BytesIO(data))
                if progress is not None:
                    progress(1)
    return ExportSummary(str(final), version, entries, final.stat().st_size, skipped)


def _package_version() -> str:
    from . import __version__

    return __version__


# -- reading a bundle ----------------------------------------------------------------------------------------
class _ZstdReader(io.RawIOBase):
    """A zstd stream as a file: raises CorruptBundleError on a truncated frame or trailing garbage."""

    def __init__(self, fh: BinaryIO, origin: str) -> None:
        self._fh = fh
        self._origin = origin
        self._decomp = zstandard.ZstdDecompressor().decompressobj()
        self._buf = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while self._pos >= len(self._buf) and not self._done:
            chunk = self._fh.read(_CHUNK)
            if not chunk:
                if not self._decomp.eof:
                    raise CorruptBundleError(f"{self._origin} is truncated (the compressed stream ends "
                                             "early)")
                self._done = True
                return
            if self._decomp.eof:
                raise CorruptBundleError(f"{self._origin} has data after its end")
            try:
                self._buf, self._pos = self._decomp.decompress(chunk), 0
            except zstandard.ZstdError as exc:
                raise CorruptBundleError(f"{self._origin} is corrupt: {exc}") from None
            if self._decomp.eof and self._decomp.unused_data:
                raise CorruptBundleError(f"{self._origin} has data after its end")

    def readinto(self, buffer: Any) -> int:
        self._fill()
        available = len(self._buf) - self._pos
        if available <= 0:
            return 0
        count = min(len(buffer), available)
        buffer[:count] = self._buf[self._pos:self._pos + count]
        self._pos += count
        return count

    def drain(self) -> None:
        """Read to the end, so a truncated stream or a bad frame checksum is noticed."""
        while True:
            self._pos = len(self._buf)
            self._fill()
            if self._done:
                return


def _check_member(member: tarfile.TarInfo, origin: str) -> str:
    """The entry key a member holds ('' for the manifest); UnsafeBundleError for anything else."""
    name = member.name
    where = f"{origin}: member {name!r}"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise UnsafeBundleError(f"{where} has an absolute path: refused")
    if ".." in re.split(r"[\\/]", name):
        raise UnsafeBundleError(f"{where} would land outside the cache ('..' in its path): refused")
    if member.issym() or member.islnk():
        raise UnsafeBundleError(f"{where} is a {'symbolic' if member.issym() else 'hard'} link "
                                f"(to {member.linkname!r}): refused")
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeBundleError(f"{where} is a device or FIFO: refused")
    if not member.isreg():
        raise UnsafeBundleError(f"{where} is not a regular file: refused")
    if name == MANIFEST:
        return ""
    match = ENTRY_MEMBER.fullmatch(name)
    if match is None:
        raise UnsafeBundleError(f"{where} is neither {MANIFEST} nor an entry (entries/<key>.gce): refused")
    return match.group(1)


@contextlib.contextmanager
def _members(path: Path) -> Iterator[Iterator[tuple[str, int, Callable[[], bytes]]]]:
    """(key or '' for the manifest, size, read()) of every member, checked for safety before it is read.

    The caller checks the size before calling ``read()`` (a member is never read beyond what it declares).
    """
    origin = str(path)
    with contextlib.ExitStack() as stack:
        try:
            fh = stack.enter_context(open(path, "rb"))
        except OSError as exc:
            raise BundleError(f"cannot read bundle {origin!r}: {exc.strerror or exc}") from None
        if fh.read(4) != ZSTD_MAGIC:
            raise CorruptBundleError(f"{origin} is not a graphcache bundle (not zstd-compressed)")
        fh.seek(0)
        reader = _ZstdReader(fh, origin)

        def generate() -> Iterator[tuple[str, int, Callable[[], bytes]]]:
            try:
                with tarfile.open(fileobj=reader, mode="r|") as tar:
                    for member in tar:
                        key = _check_member(member, origin)

                        def read(member: tarfile.TarInfo = member) -> bytes:
                            # called by the consumer, outside this generator's try: map tar errors here too
                            try:
                                extracted = tar.extractfile(member)
                                assert extracted is not None  # a regular file
                                data = extracted.read()
                            except (tarfile.TarError, EOFError) as exc:
                                raise CorruptBundleError(f"{origin} is not a valid bundle (tar: {exc})") from None
                            if len(data) != member.size:
                                raise CorruptBundleError(f"{origin} is truncated (member {member.name!r})")
                            return data

                        yield key, member.size, read
                reader.drain()
            except (tarfile.TarError, EOFError) as exc:
                raise CorruptBundleError(f"{origin} is not a valid bundle (tar: {exc})") from None

        yield generate()


def _parse_manifest(data: bytes, origin: str) -> dict[str, Any]:
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptBundleError(f"{origin}: the manifest is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise CorruptBundleError(f"{origin} is not a graphcache bundle (its manifest says no)")
    if manifest.get("bundle_version") != BUNDLE_VERSION:
        raise BundleError(f"{origin} is bundle format {manifest.get('bundle_version')!r}; this graphcache "
                          f"reads format {BUNDLE_VERSION}")
    entries = manifest.get("entries")
    version = manifest.get("version")
    if not isinstance(version, str) or not version or not isinstance(entries, list):
        raise CorruptBundleError(f"{origin}: the manifest lacks its version or entries")
    seen: set[str] = set()
    for entry in entries:
        ok = (isinstance(entry, dict) and isinstance(entry.get("key"), str) and is_key(entry["key"])
              and isinstance(entry.get("size"), int) and isinstance(entry.get("xxh3_128"), str)
              and entry.get("path") == f"entries/{entry['key']}.gce")
        if not ok:
            raise CorruptBundleError(f"{origin}: malformed manifest record {entry!r:.200}")
        if entry["key"] in seen:
            raise CorruptBundleError(f"{origin}: the manifest lists entry {entry['key']} twice")
        seen.add(entry["key"])
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A bundle's manifest (its first member), without reading or checking the entries."""
    path = Path(path).expanduser()
    with _members(path) as members:
        for key, size, read in members:
            if key != "" or size > MAX_MANIFEST:
                break
            return _parse_manifest(read(), str(path))
    raise CorruptBundleError(f"{path} is not a graphcache bundle (its first member is not {MANIFEST})")


@dataclass
class _Verified:
    manifest: dict[str, Any]
    checksums: dict[str, str]  # key -> xxh3-128 of the member
    headers: dict[str, codec.EntryHeader]


def _scan(path: Path, expected_version: str | None, on_entry: Callable[[str, bytes, codec.EntryHeader], None]
          | None = None, verified: _Verified | None = None, signing_key: bytes | None = None) -> _Verified:
    """One pass over the bundle: checks everything; calls ``on_entry`` for each verified entry."""
    origin = str(path)
    manifest: dict[str, Any] | None = verified.manifest if verified is not None else None
    records: dict[str, dict[str, Any]] = {}
    checksums: dict[str, str] = {}
    headers: dict[str, codec.EntryHeader] = {}
    with _members(path) as members:
        first = True
        for key, size, read in members:
            if first:
                if key != "":
                    raise CorruptBundleError(f"{origin} is not a graphcache bundle (its first member is not "
                                             f"{MANIFEST})")
                if size > MAX_MANIFEST:
                    raise CorruptBundleError(f"{origin}: implausible manifest size {size}")
                parsed = _parse_manifest(read(), origin)
                if verified is not None and parsed != verified.manifest:
                    raise CorruptBundleError(f"{origin} changed while it was being imported")
                manifest = parsed
                version = manifest["version"]
                if expected_version is not None and version != expected_version:
                    raise BundleVersionError(
                        f"{origin} holds entries of compiler version {version}, but the cache's current "
                        f"version is {expected_version}: export the bundle with the same TensorFlow (and "
                        f"GRAPHCACHE_IDENTITY_SALT) as the machines that use it")
                records = {e["key"]: e for e in manifest["entries"]}
                first = False
                continue
            assert manifest is not None
            if key == "":
                raise CorruptBundleError(f"{origin} holds a second {MANIFEST}")
            record = records.get(key)
            if record is None:
                raise CorruptBundleError(f"{origin}: member entries/{key}.gce is not listed in the manifest")
            if key in checksums:
                raise CorruptBundleError(f"{origin} holds entry {key} twice")
            if size != record["size"]:
                raise CorruptBundleError(f"{origin}: entry {key} is {size} bytes, the manifest says "
                                         f"{record['size']}")
            data = read()
            digest = xxhash.xxh3_128_hexdigest(data)
            changed = verified is not None and verified.checksums.get(key) != digest
            if digest != record["xxh3_128"] or changed:
                raise CorruptBundleError(f"{origin}: entry {key} fails its checksum (the bundle is corrupt "
                                         "or was modified)")
            try:
                header, _ = codec.decode(data, key, signing_key=signing_key)
            except UntrustedEntryError as exc:
                raise UntrustedBundleError(f"{origin}: entry {key} is refused: {exc} "
                                           f"(${settings.ENV_SIGNING_KEY})") from None
            except CorruptEntryError as exc:
                raise CorruptBundleError(f"{origin}: entry {key} is corrupt: {exc}") from None
            if header.version != manifest["version"]:
                raise CorruptBundleError(f"{origin}: entry {key} is of version {header.version}, the "
                                         f"manifest says {manifest['version']}")
            if "kind" in record and header.kind != record["kind"]:
                raise CorruptBundleError(f"{origin}: entry {key} is a {header.kind!r} entry, the manifest "
                                         f"says {record['kind']!r}")
            checksums[key] = digest
            headers[key] = header
            if on_entry is not None:
                on_entry(key, data, header)
        if first:
            raise CorruptBundleError(f"{origin} is an empty archive, not a graphcache bundle")
    assert manifest is not None
    missing = [key for key in records if key not in checksums]
    if missing:
        raise CorruptBundleError(f"{origin} is truncated or incomplete: {len(missing)} of the "
                                 f"manifest's entries missing ({missing[0]}...)")
    return _Verified(manifest, checksums, headers)


def verify_bundle(path: str | os.PathLike[str], version: str | None = None, *,
                  signing_key: bytes | None = None) -> dict[str, Any]:
    """Check a whole bundle (and, given ``version``, that it is of that version); returns its manifest."""
    return _scan(Path(path).expanduser(), version, signing_key=signing_key).manifest


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
    cache, own_version, limits = _cache_dir(target, create=True)
    if cache.read_only:
        raise BundleError(f"{cache.root} is opened read-only: cannot import into it")
    expected = _expected_version(cache, own_version, version)
    if not path.is_file():
        raise BundleError(f"no bundle at {str(path)!r}")

    def counted(key: str, data: bytes, header: codec.EntryHeader) -> None:
        if progress is not None:
            progress(1)

    signing_key = signing_key_for(target)
    verified = _scan(path, expected, counted, signing_key=signing_key)  # pass 1: nothing is written
    root = cache.root
    (root / LOCKS_DIR).mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    present: list[str] = []
    total = 0
    now = time.time()

    def write(key: str, data: bytes, header: codec.EntryHeader) -> None:
        nonlocal total
        if _already_there(cache, key, signing_key):
            present.append(key)
        else:
            written.append(key)  # before the write: a failed write is cleaned up too
            cache.store.write(key, data)
            total += len(data)
            if cache.index is not None:
                cache.index.upsert(row_from_header(header, len(data), now))
        if progress is not None:
            progress(1)

    with filelock.FileLock(str(root / LOCKS_DIR / _IMPORT_LOCK), thread_local=False):
        try:
            # pass 2: write, checking every member against pass 1
            _scan(path, expected, write, verified, signing_key)
            if cache.index is not None:
                if expected not in cache.index.versions():
                    cache.index.record_version(expected, dict(verified.manifest.get("version_info") or {}))
                if total:
                    cache.index.add_counters({"bytes_written": total})
        except BaseException:
            for key in written:
                with contextlib.suppress(OSError):
                    cache.store.delete(key)
            if cache.index is not None:
                with contextlib.suppress(Exception):
                    cache.index.remove(written)
            raise
    evicted = 0
    if cache.index is not None and written:
        max_size = limits.get("max_size", settings.resolve_size(None, settings.ENV_MAX_SIZE,
                                                                 settings.DEFAULT_MAX_SIZE))
        evicted = cache.evict(max_size=max_size, max_age=limits.get("max_age")).entries
    return ImportSummary(str(path), str(root), verified.manifest["version"], written, present, total, evicted)


__all__ = [
    "BUNDLE_VERSION",
    "BundleError",
    "BundleVersionError",
    "CorruptBundleError",
    "ExportSummary",
    "ImportSummary",
    "UnsafeBundleError",
    "UntrustedBundleError",
    "export_bundle",
    "import_bundle",
    "read_manifest",
    "verify_bundle",
]
