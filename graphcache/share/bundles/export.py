"""Export: the selected entries of a cache dir, verified, into one bundle file (written atomically)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import xxhash
import zstandard

from ...core.filters import Filter
from ...entry import kinds
from ...entry.checked import read_entry_file
from ...entry.keyparts import identity_id
from ...entry.keyshape import is_key
from ...errors import CorruptEntryError
from ...store.local import atomic_writer
from ...version import package_version
from .format import BUNDLE_FORMAT, BUNDLE_VERSION, MANIFEST, ZSTD_LEVEL, BundleError, member_name
from .targets import open_target, signing_key_for


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
    cache, own_version, _ = open_target(source, create=False)
    current = own_version or cache.current_version()
    rows = cache.select_to_share(keys, filters, current_version=current)
    if not rows:
        raise BundleError(f"no entries selected in {cache.root}: nothing to export")
    selected = _Selected.collect(cache, [row.key for row in rows], signing_key_for(source))
    if not selected.records:
        raise BundleError(f"none of the {len(rows)} selected entries is readable: "
                          + "; ".join(f"{s['key']}: {s['problem']}" for s in selected.skipped[:3]))
    version, entries, manifest = selected.manifest()
    final = Path(path).expanduser()
    if final.is_dir():
        raise BundleError(f"{str(final)!r} is a directory: give the bundle's file name")
    _write(final, cache, entries, manifest, level, progress)
    return ExportSummary(str(final), version, entries, final.stat().st_size, selected.skipped)


@dataclass
class _Selected:
    """Pass 1: every selected entry verified and checksummed, with the entries its aliases name."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    version_info: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def collect(cls, cache: Any, keys: list[str], signing_key: bytes | None) -> _Selected:
        selected = cls()
        queue = list(keys)
        while queue:
            key = queue.pop(0)
            if key not in selected.records:
                queue.extend(selected.add(cache, key, signing_key))
        return selected

    def add(self, cache: Any, key: str, signing_key: bytes | None) -> list[str]:
        """Record ``key``'s entry (or skip it, saying why); the keys it brings along (an alias's target)."""
        try:
            header, data = read_entry_file(cache.store, key, signing_key=signing_key)
        except (CorruptEntryError, OSError) as exc:
            self.skipped.append({"key": key, "problem": str(exc)})
            return []
        ident = identity_id(header.identity) if header.identity else ""
        if header.identity:
            self.identities[ident] = header.identity
            self.version_info = self.version_info or dict(header.identity.get("version_info") or {})
        record = self.records[key] = {
            "key": key, "kind": header.kind, "name": header.name, "version": header.version,
            "path": member_name(key), "size": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data),
            "identity_id": ident, "created": header.created}
        if header.kind not in kinds.ALIASES:
            return []
        target = record["target"] = str(header.extra.get("target", ""))  # an alias travels with its entry
        return [target] if is_key(target) and target not in self.records and cache.store.stat(target) else []

    def manifest(self) -> tuple[str, list[dict[str, Any]], bytes]:
        """(the one compiler version, the entries' records, the manifest's bytes)."""
        versions = sorted({r["version"] for r in self.records.values()})
        if len(versions) > 1:
            raise BundleError(f"the selected entries belong to {len(versions)} compiler versions "
                              f"({', '.join(versions)}); a bundle holds one: narrow the selection, e.g. "
                              "--filter identity=current")
        entries = [{k: v for k, v in r.items() if k != "version"} for r in self.records.values()]
        manifest = {
            "format": BUNDLE_FORMAT, "bundle_version": BUNDLE_VERSION,
            "created": datetime.now(UTC).isoformat(timespec="seconds"), "graphcache": package_version(),
            "version": versions[0], "version_info": self.version_info, "identities": self.identities,
            "entries": entries, "total_bytes": sum(e["size"] for e in entries),
        }
        return versions[0], entries, json.dumps(manifest, indent=1, sort_keys=True).encode()


def _write(final: Path, cache: Any, entries: list[dict[str, Any]], manifest: bytes, level: int,
           progress: Callable[[int], None] | None) -> None:
    """Pass 2: the manifest, then each entry as it was checksummed in pass 1, into a zstd-compressed tar."""
    with atomic_writer(final) as fh:
        compressor = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=False)
        with compressor.stream_writer(fh, closefd=False) as zfh, \
                tarfile.open(fileobj=zfh, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_member_info(MANIFEST, len(manifest), time.time()), io.BytesIO(manifest))
            for entry in entries:
                data = cache.store.read(entry["key"])
                if data is None or xxhash.xxh3_128_hexdigest(data) != entry["xxh3_128"]:
                    raise BundleError(f"entry {entry['key']} changed while it was being exported: run again")
                tar.addfile(_member_info(entry["path"], len(data), entry["created"]), io.BytesIO(data))
                if progress is not None:
                    progress(1)


