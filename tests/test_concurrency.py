"""Single flight across processes: N processes on one uncached graph, exactly one compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from graphcache import GraphCache

from .helpers import ROOT

WORKER = r'''
import json, os, sys, time
import numpy as np
import graphcache
from graphcache.compile.graphs import parse_graph_def
cache_dir, model_path, barrier, x_path = sys.argv[1:5]
graph_def = parse_graph_def(open(model_path, "rb").read())
meta = json.load(open(model_path + ".json"))
cache = graphcache.GraphCache(cache_dir)
while not os.path.exists(barrier):  # start together
    time.sleep(0.005)
compiled = cache.compile(graph_def, meta["fetches"], meta["feeds"], name="cnn")
with compiled.session() as s:
    out = s.run(meta["fetches"][0], {meta["feeds"][0]: np.load(x_path)})
print(json.dumps({"key": compiled.key, "hit": compiled.hit, "out": out.tolist()}))
'''


def test_eight_processes_one_compile(cache_dir, cnn, tmp_path):
    model_path = tmp_path / "cnn.pb"
    model_path.write_bytes(cnn.graph_def.SerializeToString())
    (tmp_path / "cnn.pb.json").write_text(json.dumps({"feeds": cnn.feeds, "fetches": cnn.fetches}))
    np.save(tmp_path / "x.npy", cnn.example_input(5))
    barrier = tmp_path / "go"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(cache_dir), str(model_path), str(barrier),
                               str(tmp_path / "x.npy")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(8)]
    try:
        time.sleep(1.0)
        barrier.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert len({r["key"] for r in results}) == 1
    assert sum(not r["hit"] for r in results) == 1
    outputs = [np.array(r["out"]) for r in results]
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])
    stats = GraphCache(cache_dir).stats()
    assert (stats.compiles, stats.misses, stats.hits) == (1, 1, 7)
