"""The bundle file format: one tar stream (POSIX pax) in one zstd frame, read as bytes and checked.

Reading never extracts anything: members are read as bytes, each must be ``manifest.json`` (first) or
``entries/<32 hex>.gce``, a regular file; :func:`scan` checks a whole bundle in one streaming pass (see
the package docstring for everything it refuses).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import xxhash
import zstandard

from ...core import settings
from ...entry import codec
from ...entry.checked import check
from ...entry.keyshape import ENTRY_SUFFIX, KEY_PATTERN, entry_file_name, is_key
from ...errors import CorruptEntryError, GraphCacheError, UntrustedEntryError

BUNDLE_FORMAT = "graphcache-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
ENTRIES = "entries"  # the folder of the entry members
ENTRY_MEMBER = re.compile(f"{ENTRIES}/({KEY_PATTERN}){re.escape(ENTRY_SUFFIX)}")
MAX_MANIFEST = 64 * 2**20
ZSTD_LEVEL = 3
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 2**20
IMPORT_LOCK = "import.lock"


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


# -- reading a bundle ----------------------------------------------------------------------------------------
class ZstdReader(io.RawIOBase):
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
            chunk = self._fh.read(CHUNK)
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


def member_name(key: str) -> str:
    """The bundle member that holds ``key``'s entry file."""
    return f"{ENTRIES}/{entry_file_name(key)}"


def check_member(member: tarfile.TarInfo, origin: str) -> str:
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
def open_members(path: Path) -> Iterator[Iterator[tuple[str, int, Callable[[], bytes]]]]:
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
        reader = ZstdReader(fh, origin)

        def generate() -> Iterator[tuple[str, int, Callable[[], bytes]]]:
            try:
                with tarfile.open(fileobj=reader, mode="r|") as tar:
                    for member in tar:
                        key = check_member(member, origin)

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


def parse_manifest(data: bytes, origin: str) -> dict[str, Any]:
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
              and entry.get("path") == member_name(entry["key"]))
        if not ok:
            raise CorruptBundleError(f"{origin}: malformed manifest record {entry!r:.200}")
        if entry["key"] in seen:
            raise CorruptBundleError(f"{origin}: the manifest lists entry {entry['key']} twice")
        seen.add(entry["key"])
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A bundle's manifest (its first member), without reading or checking the entries."""
    path = Path(path).expanduser()
    with open_members(path) as members:
        for key, size, read in members:
            if key != "" or size > MAX_MANIFEST:
                break
            return parse_manifest(read(), str(path))
    raise CorruptBundleError(f"{path} is not a graphcache bundle (its first member is not {MANIFEST})")


@dataclass
class Verified:
    manifest: dict[str, Any]
    checksums: dict[str, str]  # key -> xxh3-128 of the member
    headers: dict[str, codec.EntryHeader]


def scan(path: Path, expected_version: str | None, on_entry: Callable[[str, bytes, codec.EntryHeader], None]
          | None = None, verified: Verified | None = None, signing_key: bytes | None = None) -> Verified:
    """One pass over the bundle: checks everything; calls ``on_entry`` for each verified entry."""
    origin = str(path)
    manifest: dict[str, Any] | None = None
    records: dict[str, dict[str, Any]] = {}
    checksums: dict[str, str] = {}
    headers: dict[str, codec.EntryHeader] = {}
    with open_members(path) as members:
        for key, size, read in members:
            if manifest is None:
                manifest = _first_member(origin, key, size, read, expected_version, verified)
                records = {e["key"]: e for e in manifest["entries"]}
                continue
            if key == "":
                raise CorruptBundleError(f"{origin} holds a second {MANIFEST}")
            if key in checksums:
                raise CorruptBundleError(f"{origin} holds entry {key} twice")
            data, digest, header = _entry_member(origin, key, size, read, records.get(key), manifest["version"],
                                                 verified, signing_key)
            checksums[key] = digest
            headers[key] = header
            if on_entry is not None:
                on_entry(key, data, header)
        if manifest is None:
            raise CorruptBundleError(f"{origin} is an empty archive, not a graphcache bundle")
    missing = [key for key in records if key not in checksums]
    if missing:
        raise CorruptBundleError(f"{origin} is truncated or incomplete: {len(missing)} of the "
                                 f"manifest's entries missing ({missing[0]}...)")
    return Verified(manifest, checksums, headers)


def _first_member(origin: str, key: str, size: int, read: Callable[[], bytes], expected_version: str | None,
                  verified: Verified | None) -> dict[str, Any]:
    """The manifest, which must come first (and match the one ``verified`` read, on a second pass)."""
    if key != "":
        raise CorruptBundleError(f"{origin} is not a graphcache bundle (its first member is not {MANIFEST})")
    if size > MAX_MANIFEST:
        raise CorruptBundleError(f"{origin}: implausible manifest size {size}")
    manifest = parse_manifest(read(), origin)
    if verified is not None and manifest != verified.manifest:
        raise CorruptBundleError(f"{origin} changed while it was being imported")
    version = manifest["version"]
    if expected_version is not None and version != expected_version:
        raise BundleVersionError(
            f"{origin} holds entries of compiler version {version}, but the cache's current "
            f"version is {expected_version}: export the bundle with the same TensorFlow (and "
            f"GRAPHCACHE_IDENTITY_SALT) as the machines that use it")
    return manifest


def _entry_member(origin: str, key: str, size: int, read: Callable[[], bytes], record: dict[str, Any] | None,
                  version: str, verified: Verified | None, signing_key: bytes | None
                  ) -> tuple[bytes, str, codec.EntryHeader]:
    """One entry member checked against its manifest record and as an entry: (bytes, xxh3-128, header)."""
    if record is None:
        raise CorruptBundleError(f"{origin}: member {member_name(key)} is not listed in the manifest")
    if size != record["size"]:
        raise CorruptBundleError(f"{origin}: entry {key} is {size} bytes, the manifest says {record['size']}")
    data = read()
    digest = xxhash.xxh3_128_hexdigest(data)
    changed = verified is not None and verified.checksums.get(key) != digest
    if digest != record["xxh3_128"] or changed:
        raise CorruptBundleError(f"{origin}: entry {key} fails its checksum (the bundle is corrupt or was modified)")
    try:
        header = check(data, key, signing_key=signing_key).header
    except UntrustedEntryError as exc:
        raise UntrustedBundleError(f"{origin}: entry {key} is refused: {exc} "
                                   f"(${settings.ENV_SIGNING_KEY})") from None
    except CorruptEntryError as exc:
        raise CorruptBundleError(f"{origin}: entry {key} is corrupt: {exc}") from None
    if header.version != version:
        raise CorruptBundleError(f"{origin}: entry {key} is of version {header.version}, the manifest says "
                                 f"{version}")
    if "kind" in record and header.kind != record["kind"]:
        raise CorruptBundleError(f"{origin}: entry {key} is a {header.kind!r} entry, the manifest "
                                 f"says {record['kind']!r}")
    return data, digest, header


def verify_bundle(path: str | os.PathLike[str], version: str | None = None, *,
                  signing_key: bytes | None = None) -> dict[str, Any]:
    """Check a whole bundle (and, given ``version``, that it is of that version); returns its manifest."""
    return scan(Path(path).expanduser(), version, signing_key=signing_key).manifest


