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

A bundle holds the entries of exactly one compiler version; exporting an alias (kind ``saved_model`` or ``tf_function_alias``)
takes its target graph entry along. Import refuses, before writing anything:

- a bundle of another version than the cache's current one (both named in the error);
- a corrupt bundle: not zstd or not a tar, truncated, zstd checksum, a member's size or xxh3-128 differing
  from the manifest, an entry failing its checks against its key (entry/checked.py), members missing or not listed;
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

from .export import ExportSummary, export_bundle
from .format import (
    BUNDLE_VERSION,
    BundleError,
    BundleVersionError,
    CorruptBundleError,
    UnsafeBundleError,
    UntrustedBundleError,
    read_manifest,
    verify_bundle,
)
from .ingest import ImportSummary, import_bundle
from .targets import signing_key_for

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
    "signing_key_for",
    "verify_bundle",
]
