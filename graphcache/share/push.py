"""Upload entries a cache already holds to the remote (``graphcache push``).

A GraphCache with a remote uploads what it compiles from then on. Entries compiled before the remote was
configured (a team moving from per-machine caches to a shared bucket, a CI job that warmed a local dir,
a bundle imported from elsewhere) stay local until pushed. ``push_entries`` sends the selected ones
(default: every entry of the current version) that the remote does not list yet: each is verified first
(checksums, and the signature when a signing key is set), written whole exactly as the remote tier writes
it, and an XLA executable gets its marker afterwards (entry/kinds.py), so other machines pull it at
their next enable. Entries of several versions go under their own version prefixes.

It never imports TensorFlow: the CLI runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.cachedir import CacheDir
from ..core.filters import Filter
from ..entry import kinds
from ..entry.checked import read_entry_file
from ..errors import CorruptEntryError
from ..store.remote import RemoteStore


@dataclass
class PushSummary:
    pushed: list[dict[str, Any]] = field(default_factory=list)  # key, kind, name, version, size
    present: list[str] = field(default_factory=list)  # already on the remote
    skipped: list[dict[str, str]] = field(default_factory=list)  # key, problem (corrupt, vanished)
    markers: int = 0

    @property
    def bytes(self) -> int:
        return sum(entry["size"] for entry in self.pushed)

    def as_dict(self) -> dict[str, Any]:
        return {"pushed": self.pushed, "present": self.present, "skipped": self.skipped, "markers": self.markers,
                "bytes": self.bytes}


def push_entries(cache: CacheDir, remote: RemoteStore, keys: Iterable[str] | None = None,
                 filters: Iterable[str | Filter] | None = None, *, signing_key: bytes | None = None,
                 progress: Callable[[str], None] | None = None) -> PushSummary:
    """Upload the selected entries of ``cache`` that ``remote`` lacks; see the module docstring.

    ``keys``/``filters`` select as ``export`` does. Remote failures raise (the CLI reports them in one
    line); entries pushed before a failure stay pushed, each whole.
    """
    current = cache.current_version()
    rows = cache.select_to_share(keys, filters, current_version=current)
    on_remote = {(f.version, f.key) for f in remote.scan()}
    stores: dict[str, RemoteStore] = {}
    summary = PushSummary()
    for row in rows:
        if (row.version, row.key) in on_remote:
            summary.present.append(row.key)
            continue
        try:
            header, data = read_entry_file(cache.store, row.key, signing_key=signing_key)
        except (CorruptEntryError, OSError) as exc:
            summary.skipped.append({"key": row.key, "problem": str(exc)})
            continue
        target = stores.get(header.version)
        if target is None:  # a remote store writes under one version's prefix
            target = stores[header.version] = remote.for_version(header.version)
        target.write(header.key, data)
        group = kinds.group_of(header)
        if group is not None:
            target.mark(group, header.key)
            summary.markers += 1
        summary.pushed.append({"key": header.key, "kind": header.kind, "name": header.name,
                               "version": header.version, "size": len(data)})
        if progress is not None:
            progress(header.key)
    return summary


__all__ = ["PushSummary", "push_entries"]
