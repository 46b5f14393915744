"""Keys from named parts: the one way graphcache turns parts into a key or an id.

Every key is xxh3-128 over ``name=<part hash>\\n`` lines in a fixed order, and every entry stores its
parts (``EntryHeader.key_parts``), so a key can always be recomputed from what its entry says and a miss
can be explained part by part (the lesson of JAX's ``cache_key.py``). Graph keys (keys.py), SavedModel
aliases (saved_model.py) and XLA executables (xla/) all combine their parts here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import xxhash


def hash_text(text: str | bytes) -> str:
    """The xxh3-128 hex digest of a part's canonical text or bytes."""
    return xxhash.xxh3_128_hexdigest(text.encode() if isinstance(text, str) else text)


def hash_json(value: Any) -> str:
    """The xxh3-128 hex digest of a JSON-able value in canonical form (sorted keys)."""
    return hash_text(json.dumps(value, sort_keys=True))


def combine(parts: Mapping[str, str], order: Sequence[str]) -> str:
    """The key of ``parts`` (part name -> its hash), combined in ``order``; every named part must be there."""
    missing = [name for name in order if name not in parts]
    if missing:
        raise ValueError(f"key parts missing: {', '.join(missing)}")
    return xxhash.xxh3_128_hexdigest("".join(f"{name}={parts[name]}\n" for name in order).encode())


def identity_id(value: Mapping[str, Any]) -> str:
    """A 12-hex-digit id of a JSON-able description (an identity id: entries and dirs are named by it)."""
    return xxhash.xxh3_64_hexdigest(json.dumps(value, sort_keys=True).encode())[:12]


def version_id(version: Mapping[str, Any]) -> str:
    """A short readable compiler version id: ``tf2.21.0-1a2b3c4d`` (the hash covers every field)."""
    digest = xxhash.xxh3_64_hexdigest(json.dumps(version, sort_keys=True).encode())[:8]
    return f"tf{version['tensorflow']}-{digest}"
