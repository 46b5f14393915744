"""The shape of a key and of an entry file's name, defined once.

A key is 32 lowercase hex digits (an xxh3-128 digest, keyparts.py); the local store, the remote store and
bundles all keep an entry as ``<key>.gce``; the CLI accepts a unique prefix of a key; a group of entries (kinds.py) has a short id.
"""

from __future__ import annotations

KEY_DIGITS = 32
ENTRY_SUFFIX = ".gce"  # an entry file: the self-describing bytes of codec.py, wherever it is kept
KEY_PATTERN = f"[0-9a-f]{{{KEY_DIGITS}}}"  # as a regular expression (bundles match member names with it)
# Character sets, not compiled expressions: every process that opens a cache imports this module.
_HEX = frozenset("0123456789abcdef")
_GROUP_ID_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-")
_GROUP_ID_MAX = 64  # a group id (an XLA identity id: 12 hex digits): one path segment


def is_key(text: str) -> bool:
    """Whether ``text`` is a whole key."""
    return len(text) == KEY_DIGITS and _HEX.issuperset(text)


def is_key_prefix(text: str) -> bool:
    """Whether ``text`` (spaces and case aside) could begin a key."""
    prefix = text.strip().lower()
    return 0 < len(prefix) <= KEY_DIGITS and _HEX.issuperset(prefix)


def is_group_id(text: str) -> bool:
    """Whether ``text`` can name a group of entries (kinds.py; one safe path segment)."""
    return 0 < len(text) <= _GROUP_ID_MAX and _GROUP_ID_CHARS.issuperset(text)


def entry_file_name(key: str) -> str:
    return f"{key}{ENTRY_SUFFIX}"
