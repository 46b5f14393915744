"""The entry format: round trip, compression choice, and every kind of damage detected."""

from __future__ import annotations

import os

import pytest

from graphcache.entry import codec
from graphcache.errors import CorruptEntryError

KEY = "0123456789abcdef0123456789abcdef"


def _header(**kw):
    return codec.EntryHeader(key=KEY, version="tf-test", identity={"backend": "grappler"}, name="n", **kw)


@pytest.mark.parametrize("payload", [b"", b"x" * 10, b"abc" * 100_000, os.urandom(600_000)])
def test_round_trip(payload):
    header, out = codec.decode(codec.encode(_header(created=1.0, compile_seconds=2.5), payload), KEY)
    assert out == payload
    assert header.compile_seconds == 2.5 and header.payload_size == len(payload)


def test_compresses_only_when_it_pays():
    compressible = codec.encode(_header(), b"abc" * 1_000_000)
    random = codec.encode(_header(), os.urandom(1_000_000))
    assert len(compressible) < 100_000
    assert len(random) > 1_000_000  # stored raw: random bytes do not shrink


def test_read_header_alone(tmp_path):
    path = tmp_path / "e"
    path.write_bytes(codec.encode(_header(created=5.0), b"payload"))
    assert codec.read_header(str(path)).created == 5.0


@pytest.mark.parametrize("compress", [True, False])
def test_every_single_bit_flip_region_is_detected(compress):
    data = codec.encode(_header(), b"abcdefgh" * 5000, compress=compress)
    for offset in [0, 9, 13, 20, 30, 40, codec.PREFIX_SIZE + 3, len(data) // 2, len(data) - 1]:
        damaged = bytearray(data)
        damaged[offset] ^= 0x10
        with pytest.raises(CorruptEntryError):
            codec.decode(bytes(damaged), KEY)


def test_truncation_and_wrong_key_are_detected():
    data = codec.encode(_header(), b"payload" * 100)
    for cut in (0, 10, codec.PREFIX_SIZE, len(data) - 1):
        with pytest.raises(CorruptEntryError):
            codec.decode(data[:cut], KEY)
    with pytest.raises(CorruptEntryError, match="expected"):
        codec.decode(data, "f" * 32)
