"""The local store's read path (store/local.py + store/fileread.py): the same bytes and the same checks
whichever way a file is read, small or big, whole or damaged."""

from __future__ import annotations

import os
import sys

import pytest

from graphcache.entry import checked, codec
from graphcache.errors import CorruptEntryError
from graphcache.store import LocalStore, fileread, local

KEY = "0123456789abcdef" * 2


def _store_entry(tmp_path, payload: bytes, **header_fields) -> LocalStore:
    store = LocalStore(tmp_path)
    header = codec.EntryHeader(key=KEY, version="v", identity={}, **header_fields)
    store.write_parts(KEY, codec.encode_parts(header, payload, compress=False))
    return store


@pytest.mark.parametrize("size", [0, 10, local.HEAD_READ - 200, local.HEAD_READ + 1, fileread.POPULATE_FROM + 12345])
def test_read_parts_gives_the_entry_back(tmp_path, size):
    payload = os.urandom(size)
    store = _store_entry(tmp_path, payload)
    head, stored = store.read_parts(KEY)
    assert isinstance(stored, bytes) and stored == payload
    header, got = codec.decode_parts(head, stored, KEY)
    assert got == payload and header.payload_size == size
    assert store.read(KEY) == bytes(head) + stored  # the whole file, the same way


def test_a_header_longer_than_the_first_read(tmp_path):
    payload = os.urandom(5000)
    store = _store_entry(tmp_path, payload, extra={"padding": "x" * (2 * local.HEAD_READ)})
    header, got = codec.decode_parts(*store.read_parts(KEY), KEY)
    assert got == payload and len(header.extra["padding"]) == 2 * local.HEAD_READ


@pytest.mark.parametrize("size", [3000, fileread.POPULATE_FROM + 4096])
def test_truncated_and_damaged_files_fail_the_checks(tmp_path, size):
    payload = os.urandom(size)
    store = _store_entry(tmp_path, payload)
    path = store.path_for(KEY)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # truncated inside the payload
    with pytest.raises(CorruptEntryError, match="its prefix says"):
        checked.read_checked(store, KEY)
    damaged = bytearray(data)
    damaged[-1] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptEntryError, match="checksum"):
        checked.read_checked(store, KEY)
    path.write_bytes(data[:40])  # not even the fixed prefix
    with pytest.raises(CorruptEntryError, match="truncated"):
        store.read_parts(KEY)
    path.unlink()
    assert store.read_parts(KEY) is None and store.read(KEY) is None


def test_read_range_matches_pread_and_stops_at_the_end(tmp_path):
    data = os.urandom(3 * fileread.POPULATE_FROM + 999)
    path = tmp_path / "blob"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, size in ((0, len(data)), (17, fileread.POPULATE_FROM + 1), (5, 100)):
            got = fileread.read_range(fd, size, offset)
            assert type(got) is bytes and got == data[offset:offset + size] == fileread.pread_all(fd, size, offset)
        beyond = fileread.read_range(fd, 2 * fileread.POPULATE_FROM, len(data) - 1000)  # the file ends first
        assert beyond == data[-1000:]
    finally:
        os.close(fd)


def test_the_fallback_reads_the_same(tmp_path, monkeypatch):
    if sys.platform.startswith("linux"):
        assert fileread._NATIVE is not None  # the populated read is the one that runs here
    payload = os.urandom(fileread.POPULATE_FROM * 2)
    store = _store_entry(tmp_path, payload)
    native = store.read_parts(KEY)
    monkeypatch.setattr(fileread, "_NATIVE", None)  # not CPython / not Linux: os.pread only
    assert store.read_parts(KEY) == native



@pytest.mark.parametrize("native", [True, False])
def test_the_payload_is_hashed_as_it_is_read(tmp_path, monkeypatch, native):
    """read_range feeds the hasher exactly the bytes it returns (whole, in chunks, or cut short by the file's
    end), and the hit path's digest is the codec's payload checksum."""
    import xxhash

    if not native:
        monkeypatch.setattr(fileread, "_NATIVE", None)
    data = os.urandom(2 * fileread.HASH_CHUNK + 4321)
    path = tmp_path / "blob"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, size in ((0, len(data)), (3, fileread.POPULATE_FROM + 7), (9, 50), (len(data) - 99, 10**7)):
            hasher = xxhash.xxh3_128()
            got = fileread.read_range(fd, size, offset, hasher)
            assert got == data[offset:offset + size] and hasher.digest() == xxhash.xxh3_128_digest(got)
    finally:
        os.close(fd)
    for size in (10, 3 * fileread.HASH_CHUNK + 1):  # the small entry comes in the first read; the big one not
        payload = os.urandom(size)
        store = _store_entry(tmp_path / str(size), payload)
        hasher = codec.payload_hasher()
        head, stored = store.read_parts(KEY, hasher)
        header, got = codec.decode_parts(head, stored, KEY, stored_digest=hasher.digest())
        assert got == payload and checked.read_checked(store, KEY).payload == payload
        with pytest.raises(CorruptEntryError, match="payload checksum"):  # a digest of other bytes fails
            codec.decode_parts(head, stored, KEY, stored_digest=codec.payload_hasher().digest())
