"""Chaos: several processes doing random cache operations while a driver kills them and damages files.

Workers compile (hits and misses, each result checked against plain TensorFlow's output for that graph,
computed once here), purge, evict, export and import bundles, run ``verify --fix`` and reset the counters,
all on one cache dir. Meanwhile the driver SIGKILLs random workers (and starts new ones) and flips random
bytes in random files: entry files, temp files of writers, ``index.db`` and its WAL, lock files, bundles.
Afterwards ``verify --fix`` (the real CLI) leaves a clean cache, every result any worker returned matched,
no counter is negative, and the healed cache serves every graph correctly.

Default: 3 workers for 6 s of chaos; GRAPHCACHE_SLOW_TESTS=1: 5 workers for 60 s.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .helpers import FAULTS, ROOT, record
from .test_index_healing import cli, cli_json, entry_files

SLOW = os.environ.get("GRAPHCACHE_SLOW_TESTS") == "1"
WORKERS, SECONDS = (5, 60.0) if SLOW else (3, 6.0)
GRAPHS = 4
KILL_CHANCE = 0.04  # per driver step (every 0.02-0.25 s): a kill every ~3 s; the rest are damaged files
RTOL, ATOL = 1e-5, 1e-6

WORKER = r'''
import json, os, random, sys, time, traceback, warnings
import numpy as np
import graphcache
from graphcache.share import bundles
from graphcache.share.bundles.format import BundleError
from graphcache.core.cachedir import CacheDir
cache_dir, spec_path, seed, log_path, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
spec = json.load(open(spec_path))
x = np.array(spec["input"], np.float32)
expected = [np.array(e, np.float32) for e in spec["expected"]]
rng = random.Random(seed)
log = open(log_path, "a", buffering=1)
def note(**fields):
    log.write(json.dumps(fields) + "\n")
warnings.simplefilter("always")
warnings.showwarning = lambda message, *args, **kwargs: note(op="warning", text=str(message)[:400])
cache = graphcache.GraphCache(cache_dir, max_size=spec["max_size"])
note(op="ready")
OPS = ["compile", "purge", "evict", "export", "import", "verify", "zero"]
WEIGHTS = [70, 8, 5, 5, 5, 4, 3]
n = 0
while not os.path.exists(stop):
    op = rng.choices(OPS, WEIGHTS)[0]
    n += 1
    try:
        if op == "compile":
            i = rng.randrange(len(spec["graphs"]))
            compiled = cache.compile(spec["graphs"][i], spec["fetches"], spec["feeds"])
            with compiled.session() as sess:
                out = sess.run(spec["fetches"][0], {spec["feeds"][0]: x})
            ok = bool(np.allclose(out, expected[i], rtol=spec["rtol"], atol=spec["atol"]))
            note(op=op, hit=compiled.hit, ok=ok, graph=i)
            continue
        if op == "purge":
            keys = [row.key for row in cache.entries()]
            if keys:
                cache.purge([rng.choice(keys)])
        elif op == "evict":
            cache.purge(max_size=cache.stats().bytes // 2)
        elif op == "export":
            bundles.export_bundle(cache, os.path.join(spec["bundles"], f"{seed}-{n}.tar.zst"))
        elif op == "import":
            found = sorted(p for p in os.listdir(spec["bundles"]) if p.endswith(".tar.zst"))
            if found:
                bundles.import_bundle(cache, os.path.join(spec["bundles"], rng.choice(found)))
        elif op == "verify":
            CacheDir(cache_dir, timeout=10.0).audit(fix=True)
        elif op == "zero":
            cache.management().index.reset_counters()
        note(op=op)
    except BundleError as exc:  # a bundle the driver damaged, or nothing to export: refused, as it must be
        note(op=op, refused=f"{type(exc).__name__}: {exc}"[:300])
    except Exception as exc:
        note(op=op, error=f"{type(exc).__name__}: {exc}"[:300], trace=traceback.format_exc()[-2000:])
'''


def _variants(mlp, tmp_path: Path) -> list[str]:
    paths = []
    for i in range(GRAPHS):
        graph_def = type(mlp.graph_def)()
        graph_def.CopyFrom(mlp.graph_def)
        const = next(n for n in graph_def.node if n.op == "Const" and n.attr["value"].tensor.tensor_content)
        content = bytearray(const.attr["value"].tensor.tensor_content)
        content[0] ^= i
        const.attr["value"].tensor.tensor_content = bytes(content)
        path = tmp_path / f"graph{i}.pb"
        path.write_bytes(graph_def.SerializeToString())
        paths.append(str(path))
    return paths


def _plain_tensorflow(path: str, mlp, x: np.ndarray) -> np.ndarray:
    """The graph run the plain TensorFlow way: no graphcache, the default optimizers."""
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef.FromString(Path(path).read_bytes())
    with tf.Graph().as_default() as graph:
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(mlp.fetches[0], {mlp.feeds[0]: x})


def _targets(root: Path, bundles: Path) -> dict[str, list[Path]]:
    """The files the driver damages, by kind."""
    entries = root / "entries"
    found: dict[str, list[Path]] = {
        "entry": list(entries.glob("*/*.gce")), "temp file": list(entries.glob("*/*.tmp")),
        "index.db": [root / "index.db"], "index.db-wal": [root / "index.db-wal"],
        "lock file": list((root / "locks").glob("*.lock")), "bundle": list(bundles.glob("*.tar.zst")),
    }
    return {kind: [p for p in paths if p.is_file()] for kind, paths in found.items()}


def _flip(path: Path, rng: random.Random) -> bool:
    """Damage ``path`` in place as a disk fault would: 1-4 random bytes flipped, or now and then a run of up to
    512 random bytes (a bad sector); an empty file (a lock file) gets random bytes. False when it vanished."""
    try:
        with open(path, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if not size:
                fh.write(rng.randbytes(rng.randint(1, 8)))
                return True
            if rng.random() < 0.25:
                length = min(size, rng.randint(16, 512))
                fh.seek(rng.randrange(size - length + 1))
                fh.write(rng.randbytes(length))
                return True
            for _ in range(rng.randint(1, 4)):
                offset = rng.randrange(size)
                fh.seek(offset)
                byte = fh.read(1)
                fh.seek(offset)
                fh.write(bytes([byte[0] ^ rng.randint(1, 255)]))
    except OSError:
        return False
    return True


def _read_logs(logs: list[Path]) -> list[dict]:
    lines = []
    for path in logs:
        if path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):  # a line cut short by SIGKILL
                    lines.append(json.loads(line))
    return lines


def test_chaos_leaves_a_clean_cache_and_only_right_results(cache_dir, mlp, tmp_path):
    x = mlp.example_input(0)
    graphs = _variants(mlp, tmp_path)
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "graphs": graphs, "feeds": mlp.feeds, "fetches": mlp.fetches, "input": x.tolist(),
        "expected": [_plain_tensorflow(path, mlp, x).tolist() for path in graphs],
        "max_size": 3 * 16_000, "bundles": str(bundles), "rtol": RTOL, "atol": ATOL}))
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    rng = random.Random(1234)
    logs: list[Path] = []
    procs: list[subprocess.Popen] = []

    def spawn() -> None:
        log = tmp_path / f"worker{len(logs)}.log"
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, str(cache_dir), str(spec), str(len(logs)),
                                       str(log), str(stop)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))

    for _ in range(WORKERS):
        spawn()
    faults: collections.Counter[str] = collections.Counter()
    killed = 0
    try:
        deadline = time.monotonic() + 300
        while sum('"ready"' in p.read_text() for p in logs if p.exists()) < WORKERS:
            assert time.monotonic() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs), procs[0].communicate()[1][-3000:]
            time.sleep(0.2)
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.02, 0.25))
            half_way_without_a_kill = not killed and time.monotonic() > end - SECONDS / 2
            if rng.random() < KILL_CHANCE or half_way_without_a_kill:  # a started worker, at a random point
                live = [proc for proc, log in zip(procs, logs, strict=True)
                        if proc.poll() is None and log.exists() and '"ready"' in log.read_text()]
                if live:
                    rng.choice(live).send_signal(signal.SIGKILL)
                    killed += 1
                    spawn()
                continue
            targets = _targets(cache_dir, bundles)
            kinds = [kind for kind, paths in targets.items() if paths]
            if kinds:
                kind = rng.choice(kinds)
                if _flip(rng.choice(targets[kind]), rng):
                    faults[kind] += 1
        stop.touch()
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
            assert proc.returncode in (0, -signal.SIGKILL), err[-3000:]
    finally:
        stop.touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

    # afterwards: verify --fix leaves a clean cache
    fixed = cli(cache_dir, "verify", "--fix")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    after = cli_json(cache_dir, "verify")
    assert after["clean"], after
    files = entry_files(cache_dir)
    stats = cli_json(cache_dir, "stats")
    assert (stats["entries"], stats["bytes"]) == (len(files), sum(files.values()))
    assert sorted(row["key"] for row in cli_json(cache_dir, "ls")) == sorted(files)
    numbers = {k: v for k, v in stats.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    numbers.update(stats["uncacheable"])
    assert all(value >= 0 for value in numbers.values()), numbers

    # every result any process returned matched plain TensorFlow's; nothing raised
    lines = _read_logs(logs)
    compiles = [line for line in lines if line["op"] == "compile" and "ok" in line]
    wrong = [line for line in compiles if not line["ok"]]
    errors = [line for line in lines if "error" in line]
    assert not wrong, wrong[:5]
    assert not errors, errors[:3]
    assert compiles, "no compile finished"

    # the healed cache serves every graph, and serves it right
    import graphcache

    cache = graphcache.GraphCache(cache_dir)
    for path, want in zip(graphs, json.loads(spec.read_text())["expected"], strict=True):
        compiled = cache.compile(path, mlp.fetches, mlp.feeds)
        with compiled.session() as sess:
            np.testing.assert_allclose(sess.run(mlp.fetches[0], {mlp.feeds[0]: x}), want, rtol=RTOL, atol=ATOL)
    cache.close()

    ops = collections.Counter(line["op"] for line in lines if line["op"] not in ("ready", "warning"))
    hits = sum(1 for line in compiles if line["hit"])
    refused = sum(1 for line in lines if "refused" in line)
    warned = [line["text"] for line in lines if line["op"] == "warning" and "graphcache" in line["text"]]
    rebuilds = sum("rebuilt it from the entry files" in text for text in warned)
    FAULTS.extend([f"chaos: bit flips in {kind}" for kind in faults for _ in range(faults[kind])])
    FAULTS.extend(["chaos: SIGKILL"] * killed)
    record("chaos", f"{len(logs)} worker processes ({WORKERS} at a time) x {SECONDS:.0f}s: {sum(ops.values())} "
                    f"trials ({len(compiles)} compiles: {hits} hits, {len(compiles) - hits} misses; "
                    + ", ".join(f"{ops[op]} {op}" for op in sorted(ops) if op != "compile")
                    + f"; {refused} damaged bundles refused), {sum(faults.values())} faults injected ("
                    + ", ".join(f"{faults[kind]} in {kind}" for kind in sorted(faults))
                    + f"), {killed} processes killed; {rebuilds} worker processes rebuilt the index; "
                    f"wrong results = {len(wrong)}, errors = {len(errors)}; verify --fix then clean, "
                    "counters >= 0")
