"""The shape of a key and of an entry file's name, defined once.

A key is 32 lowercase hex digits (an xxh3-128 digest, keyparts.py); the local store, the remote store and
bundles all keep an entry as ``<key>.gce``; the CLI accepts a unique prefix of a key; a group of entries (kinds.py) has a short id.
"""

from __future__ import annotations

import re

KEY_DIGITS = 32
ENTRY_SUFFIX = ".gce"  # an entry file: the self-describing bytes of codec.py, wherever it is kept
KEY_PATTERN = f"[0-9a-f]{{{KEY_DIGITS}}}"
_KEY = re.compile(KEY_PATTERN)
_KEY_PREFIX = re.compile(f"[0-9a-f]{{1,{KEY_DIGITS}}}")
_GROUP_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")  # a group id (an XLA identity id: 12 hex digits): one path segment


def is_key(text: str) -> bool:
    """Whether ``text`` is a whole key."""
    return len(text) == KEY_DIGITS and _KEY.fullmatch(text) is not None


def is_key_prefix(text: str) -> bool:
    """Whether ``text`` (spaces and case aside) could begin a key."""
    return _KEY_PREFIX.fullmatch(text.strip().lower()) is not None


def is_group_id(text: str) -> bool:
    """Whether ``text`` can name a group of entries (kinds.py; one safe path segment)."""
    return _GROUP_ID.fullmatch(text) is not None


def entry_file_name(key: str) -> str:
    return f"{key}{ENTRY_SUFFIX}"
