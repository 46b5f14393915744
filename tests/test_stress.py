"""Stress: several processes mixing compiles, hits, purges and evictions on one cache dir.

Afterwards ``verify`` finds nothing wrong, the index agrees with the files, and the shared counters add
up exactly to what the workers saw. Default: 4 processes for 6 s; GRAPHCACHE_SLOW_TESTS=1: 8 for 60 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from graphcache.core.cachedir import CacheDir

from .helpers import ROOT, record

SLOW = os.environ.get("GRAPHCACHE_SLOW_TESTS") == "1"
PROCESSES, SECONDS = (8, 60.0) if SLOW else (4, 6.0)

WORKER = r'''
import json, random, sys, time, warnings
warnings.simplefilter("ignore")
import graphcache
from graphcache.compile.graphs import parse_graph_def
cache_dir, model_path, seed, seconds, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
import os
meta = json.load(open(model_path + ".json"))
base = parse_graph_def(open(model_path, "rb").read())
# several distinct graphs: the same model with one constant changed, so keys differ
variants = []
for i in range(6):
    gd = type(base)(); gd.CopyFrom(base)
    const = next(n for n in gd.node if n.op == "Const" and n.attr["value"].tensor.tensor_content)
    content = bytearray(const.attr["value"].tensor.tensor_content); content[0] ^= i
    const.attr["value"].tensor.tensor_content = bytes(content)
    variants.append(gd)
cache = graphcache.GraphCache(cache_dir, max_size=int(sys.argv[6]))
rng = random.Random(seed)
counts = {"hits": 0, "misses": 0, "purges": 0}
while not os.path.exists(barrier):
    time.sleep(0.005)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    action = rng.random()
    if action < 0.85:
        compiled = cache.compile(rng.choice(variants), meta["fetches"], meta["feeds"])
        counts["hits" if compiled.hit else "misses"] += 1
    elif action < 0.95:
        keys = [row.key for row in cache.entries()]
        if keys:
            cache.purge([rng.choice(keys)])
            counts["purges"] += 1
    else:
        cache.purge(max_size=cache.stats().bytes // 2)
        counts["purges"] += 1
print(json.dumps(counts))
'''


def test_mixed_workload_leaves_a_consistent_cache(cache_dir, mlp, tmp_path):
    model = tmp_path / "mlp.pb"
    model.write_bytes(mlp.graph_def.SerializeToString())
    (tmp_path / "mlp.pb.json").write_text(json.dumps({"feeds": mlp.feeds, "fetches": mlp.fetches}))
    entry_size = 16_000  # roughly one mlp entry: a cap of ~4 entries keeps eviction busy
    barrier = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(cache_dir), str(model), str(seed), str(SECONDS),
                               str(barrier), str(4 * entry_size)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for seed in range(PROCESSES)]
    try:
        time.sleep(2.0)
        barrier.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=SECONDS + 300)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    cache = CacheDir(cache_dir)
    assert cache.verify() == []
    on_disk = {f.key: f.size for f in cache.store.scan()}
    assert {row.key: row.size for row in cache.entries()} == on_disk
    assert cache.index.totals() == (len(on_disk), sum(on_disk.values()))
    stats = cache.stats()
    hits, misses = sum(r["hits"] for r in results), sum(r["misses"] for r in results)
    assert (stats.hits, stats.misses) == (hits, misses)
    assert stats.compiles == misses and stats.errors == 0
    assert hits > 0 and misses > 0 and sum(r["purges"] for r in results) > 0
    record("stress", f"{PROCESSES} processes x {SECONDS:.0f}s: {hits} hits, {misses} compiles, "
                     f"{sum(r['purges'] for r in results)} purges, {stats.evictions} evictions; verify clean, "
                     "counters exact")
