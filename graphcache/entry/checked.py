"""Reading an entry and checking it: the one path from stored bytes to a trusted (header, payload).

Every reader goes through here: GraphCache's hits, the remote tier's downloads, ``verify``, bundles
and pushes. The checks are codec.py's (magic, format version, both checksums, lengths, the header's key
against the key asked for, and the HMAC when a signing key is set); they raise ``CorruptEntryError``
or its subclass ``UntrustedEntryError``, and the caller decides what failing open means for it.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import CorruptEntryError
from . import codec


class CheckedEntry(NamedTuple):
    """An entry that passed every check: its header, its (decompressed) payload, and the file's bytes as
    stored, in two pieces (prefix + header, stored payload) so nothing is copied to hand them on."""

    header: codec.EntryHeader
    payload: bytes | memoryview
    head: bytes | memoryview
    stored: bytes | memoryview

    @property
    def size(self) -> int:
        """The entry file's size in bytes."""
        return len(self.head) + len(self.stored)

    def file_bytes(self) -> bytes:
        """The entry file's bytes in one piece (bundles and uploads write them whole)."""
        return bytes(self.head) + bytes(self.stored)


def check_parts(head: bytes | memoryview, stored: bytes | memoryview, key: str, *,
                signing_key: bytes | None = None, stored_digest: bytes | None = None) -> CheckedEntry:
    """Check an entry read as (prefix + header, stored payload) against ``key`` (``stored_digest``: see
    codec.decode_parts)."""
    header, payload = codec.decode_parts(head, stored, key, signing_key=signing_key, stored_digest=stored_digest)
    return CheckedEntry(header, payload, head, stored)


def check(data: bytes | memoryview, key: str, *, signing_key: bytes | None = None) -> CheckedEntry:
    """Check an entry file's bytes (a download, a bundle member) against ``key``."""
    return check_parts(*codec.split(data), key, signing_key=signing_key)


def read_checked(store, key: str, *, signing_key: bytes | None = None) -> CheckedEntry | None:
    """``key``'s entry from ``store`` (anything with ``read_parts``), checked; None when it is missing.

    Raises CorruptEntryError / UntrustedEntryError when it fails a check, OSError when it cannot be read.
    """
    hasher = codec.payload_hasher()  # the payload is checksummed as it is read
    parts = store.read_parts(key, hasher)
    if parts is None:
        return None
    return check_parts(*parts, key, signing_key=signing_key, stored_digest=hasher.digest())


def read_entry_file(store, key: str, *, signing_key: bytes | None = None) -> tuple[codec.EntryHeader, bytes]:
    """``key``'s checked header and its file's bytes in one piece (bundles and pushes send files whole);
    CorruptEntryError also when the entry is gone."""
    entry = read_checked(store, key, signing_key=signing_key)
    if entry is None:
        raise CorruptEntryError("the entry file is gone")
    return entry.header, entry.file_bytes()
