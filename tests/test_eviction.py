"""Size cap with LRU by last use, age eviction, and exact counters under concurrency."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import xxhash

from graphcache.core.cachedir import CacheDir
from graphcache.entry import codec
from graphcache.store import LocalStore

from .helpers import ROOT


def _key(i: int) -> str:
    return xxhash.xxh3_128_hexdigest(str(i).encode())


def _fill(root, count: int, size: int = 1000, version: str = "tf-test-1") -> CacheDir:
    store = LocalStore(root)
    for i in range(count):
        header = codec.EntryHeader(key=_key(i), version=version, identity={"v": version}, name=f"e{i}",
                                   created=1000.0 + i)
        store.write(_key(i), codec.encode(header, os.urandom(size), compress=False))
    cache = CacheDir(root)
    cache.reconcile()
    for i in range(count):  # entry i was last used at time 2000 + i
        cache.index.touch(_key(i), 2000.0 + i)
    return cache


def test_lru_keeps_most_recently_used(tmp_path):
    cache = _fill(tmp_path, 10)
    entry = cache.index.get(_key(0)).size
    cache.index.touch(_key(0), 5000.0)  # the oldest becomes the newest: a hit counts as a use
    result = cache.evict(max_size=4 * entry)
    assert result.entries == 6
    kept = {row.key for row in cache.entries()}
    assert kept == {_key(0), _key(7), _key(8), _key(9)}
    assert {f.key for f in cache.store.scan()} == kept
    assert cache.stats().bytes_evicted == 6 * entry


def test_eviction_never_drops_the_entry_just_written(tmp_path):
    cache = _fill(tmp_path, 3)
    result = cache.evict(max_size=0, keep=_key(0))
    assert result.entries == 2 and [row.key for row in cache.entries()] == [_key(0)]


def test_age_eviction(tmp_path):
    cache = _fill(tmp_path, 5)
    result = cache.evict(max_age=2.5, now=2005.0)  # last used before 2002.5: entries 0, 1, 2
    assert result.entries == 3
    assert {row.key for row in cache.entries()} == {_key(3), _key(4)}


def test_graphcache_enforces_max_size_on_put(tmp_path, mlp, cnn):
    from graphcache import GraphCache

    cache = GraphCache(tmp_path, max_size="1B")
    first = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    second = cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    keys = {row.key for row in cache.entries()}
    assert keys == {second.key} and first.key not in keys
    assert cache.stats().evictions == 1 and cache.stats().max_size == 1


def test_max_size_from_environment(tmp_path, monkeypatch):
    from graphcache import GraphCache

    monkeypatch.setenv("GRAPHCACHE_MAX_SIZE", "500MB")
    assert GraphCache(tmp_path).max_size == 500 * 10**6
    assert GraphCache(tmp_path, max_size="2GiB").max_size == 2 * 2**30
    monkeypatch.setenv("GRAPHCACHE_MAX_AGE", "30d")
    assert GraphCache(tmp_path).max_age == 30 * 86400


def test_reader_survives_eviction_of_the_file_it_reads(tmp_path):
    cache = _fill(tmp_path, 2, size=200_000)
    path = cache.store.path_for(_key(0))
    with open(path, "rb") as reader:
        head = reader.read(100)
        cache.evict(max_size=0)
        rest = reader.read()
    assert not path.exists()
    codec.decode(head + rest, _key(0))  # the reader got the whole, valid entry


COUNTER_WORKER = r'''
import sys, time, os
from graphcache.core.index.database import CacheIndex
root, barrier = sys.argv[1], sys.argv[2]
index = CacheIndex(root)
while not os.path.exists(barrier):
    time.sleep(0.005)
for _ in range(50):
    index.add_counters({"hits": 1, "compile_seconds": 0.5, "uncacheable.io_error": 2})
'''


def test_concurrent_counters_are_exact(tmp_path):
    CacheDir(tmp_path)  # create the index once
    barrier = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", COUNTER_WORKER, str(tmp_path), str(barrier)], env=env)
             for _ in range(8)]
    time.sleep(0.5)
    barrier.touch()
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    stats = CacheDir(tmp_path).stats()
    assert stats.hits == 400
    assert stats.compile_seconds == pytest.approx(200.0)
    assert stats.uncacheable["io_error"] == 800


def test_index_totals_follow_inserts_updates_and_deletes(tmp_path):
    cache = _fill(tmp_path, 5)
    index = cache.index

    def summed():
        rows = index.rows()
        return len(rows), sum(r.size for r in rows)

    assert index.totals() == summed()
    row = index.get(_key(0))
    index.upsert(row._replace(size=row.size + 123))  # re-put of one key
    index.remove([_key(1), _key(2), "f" * 32])
    assert index.totals() == summed() and index.totals()[0] == 3


def test_reconcile_refreshes_sizes_a_killed_writer_left_stale(tmp_path):
    cache = _fill(tmp_path, 3)
    row = cache.index.get(_key(1))
    cache.index.upsert(row._replace(size=row.size - 2))  # file replaced, row not
    assert cache.index.totals()[1] != sum(f.size for f in cache.store.scan())
    cache.reconcile()
    assert cache.index.totals() == (3, sum(f.size for f in cache.store.scan()))
    assert cache.index.get(_key(1)).last_used == row.last_used
