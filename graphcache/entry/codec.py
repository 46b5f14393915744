"""The entry byte format: one self-describing file per cache entry.

Layout (all integers little-endian)::

    offset  size  field
    0       8     magic  b"GRCACHE\\0"
    8       2     format version (FORMAT_VERSION)
    10      2     flags: bit 0 = payload is zstd-compressed; bit 1 = signed
    12      4     header length H
    16      8     xxh3-64 of the header bytes
    24      8     stored payload length P (bytes after the header, as stored)
    32      16    xxh3-128 of the stored payload bytes
    48      32    HMAC-SHA256 (zeros when unsigned) over bytes [0, 48) + header + stored payload
    80      H     header: UTF-8 JSON object (see EntryHeader)
    80+H    P     payload: the compiled artifact (a serialized GraphDef), zstd-compressed when flag bit 0

The fixed prefix is ``PREFIX_SIZE`` bytes. Signing is optional: with a signing key (the
``GRAPHCACHE_SIGNING_KEY`` setting) every entry written is signed, and a reader holding the key refuses
unsigned or badly signed entries (``UntrustedEntryError``): checksums catch accidents, the HMAC catches
someone who can write to a shared cache or remote. A reader checks the magic, the format version, both checksums,
the lengths, and that the header's ``key`` is the key it asked for (so a file copied or renamed onto the
wrong key is caught). Headers can be read alone (``read_header``) for listing without touching payloads.

Compression: weights barely compress, while decompressing a frozen model's payload takes longer than the
optimized graph's whole first run (benchmarks/results/RESULTS.md's zstd section has the trade-off). So the
payload is compressed only when a sample of it shrinks below ``COMPRESS_WORTHWHILE`` of its size.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Any

import xxhash

from ..errors import CorruptEntryError, UntrustedEntryError

MAGIC = b"GRCACHE\0"
FORMAT_VERSION = 1
FLAG_ZSTD = 1
FLAG_SIGNED = 2
_CHECKED = struct.Struct("<8sHHIQQ16s")  # the part of the prefix the HMAC covers
_PREFIX = struct.Struct("<8sHHIQQ16s32s")
PREFIX_SIZE = _PREFIX.size  # 80
_NO_SIGNATURE = bytes(32)
ZSTD_LEVEL = 3
COMPRESS_WORTHWHILE = 0.8  # compress when a sample shrinks to below 80% of its size
_SAMPLE_CHUNK = 256 * 1024
_SAMPLES = 8
MAX_HEADER = 16 * 1024 * 1024


class EntryHeader:
    """What an entry says about itself (the JSON header). Immutable: ``replace`` gives a changed copy.

    A plain class rather than a dataclass: every process that opens a cache imports this module, and
    creating a frozen dataclass costs a measurable share of that import (its methods are generated and exec'd).
    """

    __slots__ = ("key", "version", "identity", "name", "kind", "created", "compile_seconds", "payload_size",
                 "key_parts", "extra")
    key: str
    version: str  # the compiler version id (TF + git version + format + salt), for stale purges
    identity: dict[str, Any]  # the full compiler identity the key was computed with
    name: str
    kind: str
    created: float  # Unix time
    compile_seconds: float
    payload_size: int  # uncompressed payload bytes
    key_parts: dict[str, str]  # part name -> its own hash
    extra: dict[str, Any]  # e.g. feeds/fetches/targets

    def __init__(self, key: str, version: str, identity: dict[str, Any], name: str = "", kind: str = "graph",
                 created: float = 0.0, compile_seconds: float = 0.0, payload_size: int = 0,
                 key_parts: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> None:
        values = (key, version, identity, name, kind, created, compile_seconds, payload_size,
                  {} if key_parts is None else key_parts, {} if extra is None else extra)
        for field, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, field, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"EntryHeader is immutable: use replace({name}=...)")

    def as_dict(self) -> dict[str, Any]:
        return {field: getattr(self, field) for field in self.__slots__}

    def replace(self, **changes: Any) -> EntryHeader:
        return EntryHeader(**{**self.as_dict(), **changes})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EntryHeader) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # holds dicts

    def __reduce__(self) -> tuple[type[EntryHeader], tuple[Any, ...]]:  # copy and pickle through __init__
        return EntryHeader, tuple(getattr(self, field) for field in self.__slots__)

    def __repr__(self) -> str:
        return f"EntryHeader({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"

    def to_json(self) -> bytes:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> EntryHeader:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("header is not a JSON object")
        return cls(**{k: v for k, v in data.items() if k in cls.__slots__})


def _worth_compressing(payload: bytes | memoryview) -> bool:
    """Whether zstd pays, judged on a sample: up to ``_SAMPLES`` chunks spread over the payload, never more
    than a quarter of it (small payloads are judged on their first chunk)."""
    view = memoryview(payload)
    size = len(view)
    chunks = min(_SAMPLES, size // (4 * _SAMPLE_CHUNK))
    if chunks <= 1:
        sample = bytes(view[:_SAMPLE_CHUNK])
    else:
        step = (size - _SAMPLE_CHUNK) // (chunks - 1)
        sample = b"".join(bytes(view[i * step : i * step + _SAMPLE_CHUNK]) for i in range(chunks))
    if not sample:
        return False
    import zstandard  # here and in decode: a hit on an uncompressed entry (most: weights) never loads it

    compressed = zstandard.ZstdCompressor(level=1).compress(sample)
    return len(compressed) < COMPRESS_WORTHWHILE * len(sample)


def encode(header: EntryHeader, payload: bytes, *, compress: bool | None = None, level: int = ZSTD_LEVEL,
           signing_key: bytes | None = None) -> bytes:
    """The bytes of one entry file. ``compress=None`` decides by sampling the payload."""
    return b"".join(encode_parts(header, payload, compress=compress, level=level, signing_key=signing_key))


def encode_parts(header: EntryHeader, payload: bytes, *, compress: bool | None = None, level: int = ZSTD_LEVEL,
                 signing_key: bytes | None = None) -> tuple[bytes, bytes]:
    """``encode`` as (prefix + header, stored payload): written one after the other they are the entry
    file, and an uncompressed payload is not copied (joining a big payload costs as much as writing it)."""
    if compress is None:
        compress = _worth_compressing(payload)
    header = header.replace(payload_size=len(payload))
    if compress:
        import zstandard

        stored = zstandard.ZstdCompressor(level=level).compress(payload)
    else:
        stored = payload
    header_bytes = header.to_json()
    flags = (FLAG_ZSTD if compress else 0) | (FLAG_SIGNED if signing_key else 0)
    checked = _CHECKED.pack(MAGIC, FORMAT_VERSION, flags, len(header_bytes),
                            xxhash.xxh3_64_intdigest(header_bytes), len(stored), xxhash.xxh3_128_digest(stored))
    signature = _sign(signing_key, checked, header_bytes, stored) if signing_key else _NO_SIGNATURE
    return b"".join((checked, signature, header_bytes)), stored


def _sign(key: bytes, checked: bytes | memoryview, header: bytes | memoryview, stored: bytes | memoryview) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (checked, header, stored):
        mac.update(part)
    return mac.digest()


def _parse_prefix(data: bytes | memoryview) -> tuple[int, int, int, int, bytes]:
    if len(data) < PREFIX_SIZE:
        raise CorruptEntryError(f"truncated entry: {len(data)} bytes, the fixed prefix alone is {PREFIX_SIZE}")
    magic, version, flags, header_len, header_hash, stored_len, payload_hash, _ = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise CorruptEntryError("not a graphcache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise CorruptEntryError(f"entry format {version}, this graphcache reads format {FORMAT_VERSION}")
    if header_len > MAX_HEADER:
        raise CorruptEntryError(f"implausible header length {header_len}")
    return flags, header_len, header_hash, stored_len, payload_hash


def _parse_header(raw: bytes | memoryview, header_hash: int) -> EntryHeader:
    if xxhash.xxh3_64_intdigest(raw) != header_hash:
        raise CorruptEntryError("header checksum mismatch")
    try:
        return EntryHeader.from_json(bytes(raw))
    except (ValueError, TypeError) as exc:
        raise CorruptEntryError(f"unreadable header: {exc}") from None


def decode(data: bytes | memoryview, expected_key: str | None = None, *, signing_key: bytes | None = None
           ) -> tuple[EntryHeader, bytes | memoryview]:
    """Check an entry's bytes and return its header and (decompressed) payload.

    Raises CorruptEntryError on any mismatch; with ``signing_key``, UntrustedEntryError (a subclass) when
    the entry is unsigned or its signature does not verify. An uncompressed payload is a view into ``data``.
    """
    return decode_parts(*split(data), expected_key, signing_key=signing_key)


def split(data: bytes | memoryview) -> tuple[memoryview, memoryview]:
    """An entry's bytes as (prefix + header, stored payload), views into ``data`` (see decode_parts)."""
    view = memoryview(data)
    body = head_size(view)
    return view[:body], view[body:]


def head_size(prefix: bytes | memoryview) -> int:
    """The length of the prefix + header of the entry whose first PREFIX_SIZE (or more) bytes are given."""
    _, header_len, _, _, _ = _parse_prefix(prefix)
    return PREFIX_SIZE + header_len


def payload_hasher() -> Any:
    """A fresh hasher of the payload checksum's kind (xxh3-128), for hashing a payload while reading it."""
    return xxhash.xxh3_128()


def decode_parts(head: bytes | memoryview, stored: bytes | memoryview, expected_key: str | None = None, *,
                 signing_key: bytes | None = None, stored_digest: bytes | None = None
                 ) -> tuple[EntryHeader, bytes | memoryview]:
    """``decode`` for an entry read as (prefix + header, stored payload). An uncompressed payload is
    ``stored`` itself: read into its own ``bytes``, it reaches TensorFlow without a copy.

    ``stored_digest``: ``payload_hasher()``'s digest of ``stored``, computed while it was read (the store's
    ``read_parts``), so the payload checksum needs no second pass over the payload."""
    head = memoryview(head)
    flags, header_len, header_hash, stored_len, payload_hash = _parse_prefix(head)
    body = PREFIX_SIZE + header_len
    if len(head) != body or len(stored) != stored_len:
        raise CorruptEntryError(f"entry is {len(head) + len(stored)} bytes, its prefix says {body + stored_len}")
    header = _parse_header(head[PREFIX_SIZE:body], header_hash)
    if expected_key is not None and header.key != expected_key:
        raise CorruptEntryError(f"entry holds key {header.key}, expected {expected_key}")
    if (stored_digest if stored_digest is not None else xxhash.xxh3_128_digest(stored)) != payload_hash:
        raise CorruptEntryError("payload checksum mismatch")
    if signing_key:
        if not flags & FLAG_SIGNED:
            raise UntrustedEntryError("entry is not signed, and a signing key is set")
        expected = _sign(signing_key, head[: _CHECKED.size], head[PREFIX_SIZE:body], stored)
        if not hmac.compare_digest(expected, bytes(head[_CHECKED.size:PREFIX_SIZE])):
            raise UntrustedEntryError("entry signature does not verify with this signing key")
    if flags & FLAG_ZSTD:
        import zstandard

        try:
            payload = zstandard.ZstdDecompressor().decompress(stored, max_output_size=header.payload_size)
        except zstandard.ZstdError as exc:
            raise CorruptEntryError(f"payload does not decompress: {exc}") from None
    else:
        payload = stored
    if len(payload) != header.payload_size:
        raise CorruptEntryError(f"payload is {len(payload)} bytes, header says {header.payload_size}")
    return header, payload


def peek_header(data: bytes | memoryview) -> EntryHeader:
    """An entry's header from its bytes, checked against the header checksum; the payload is not read."""
    view = memoryview(data)
    _, header_len, header_hash, _, _ = _parse_prefix(view)
    return _parse_header(view[PREFIX_SIZE:PREFIX_SIZE + header_len], header_hash)


def read_header(path: str) -> EntryHeader:
    """Read only an entry's header (no payload read, no payload checksum)."""
    with open(path, "rb") as fh:
        prefix = fh.read(PREFIX_SIZE)
        _, header_len, header_hash, _, _ = _parse_prefix(prefix)
        raw = fh.read(header_len)
    if len(raw) != header_len:
        raise CorruptEntryError("truncated header")
    return _parse_header(raw, header_hash)
