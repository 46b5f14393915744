"""A fleet on one machine: N processes as hosts (each its own cache dir), one shared remote, one graph.

Each round starts ``--hosts`` fresh processes; each imports TensorFlow and parses the model, says it is
ready and waits at a barrier; released together, each times ``GraphCache(its dir).compile()`` + the first
run (graphcache's import inside the timer, as in concurrency.py), then flushes its uploads (timed apart).
Variants, by what the hosts share:

- ``redis``: ``GRAPHCACHE_REMOTE=redis://...`` (one compile per fleet: leases in Redis, core/flight.py);
- ``s3+coordinator``: entries on S3 (moto's server on loopback), leases in Redis (``GRAPHCACHE_COORDINATOR``);
- ``s3``: the S3 tier alone: entries shared, no leases, so a cold fleet compiles once per host;
- ``none``: no remote: every host compiles.

Phases: ``cold`` (remote and cache dirs empty) and ``warm`` (the remote as the cold round left it, every
cache dir empty again: new hosts joining a warm fleet; with no remote, a host's own dir stays warm).
Figures per variant and phase: compiles in the fleet (from each host's stats), per-host time (median and
slowest), wall time to the last result, bytes moved (uploaded + fetched, from the counters). Then the
latency of one lookup that hits (the entry's bytes) and one that misses, in Redis and in S3 (medians).

    .venv/bin/python benchmarks/fleet_bench.py --model cnn --hosts 4

Needs redis-server on this machine, and moto + s3fs for the S3 variants (skipped, said so, without them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cold_warm
import common

VARIANTS = ("redis", "s3+coordinator", "s3", "none")
PHASES = ("cold", "warm")
READY_TIMEOUT = 600.0
LOOKUPS = 30  # repetitions of each lookup latency


def work_dir() -> Path:
    return common.WORK_DIR / "fleet"


# -- the child ------------------------------------------------------------------------------------------------
def child_host(model: str, barrier_dir: str, index: int, cache_dir: str) -> dict[str, Any]:
    """One host: get ready, wait for ``go``, compile through the cache (its remote from the environment), run."""
    common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.assert_graphcache_not_imported(f"fleet host {index}, before its timer")
    barrier = Path(barrier_dir)
    (barrier / f"ready-{index}").touch()
    go = barrier / "go"
    while not go.exists():
        time.sleep(0.002)
    start_wall = time.time()
    t0 = time.perf_counter()
    cache = common.import_graphcache()(cache_dir)
    compiled = cache.compile(graph_def, files.fetches, files.feeds, name=model)
    sess = compiled.session()
    outputs = sess.run(files.fetches, feed)
    elapsed = time.perf_counter() - t0
    end_wall = time.time()
    t1 = time.perf_counter()
    flushed = cache.flush(120)
    flush_seconds = time.perf_counter() - t1
    sess.close()
    stats = cache.stats()
    return {"index": index, "elapsed": elapsed, "start": start_wall, "end": end_wall, "hit": compiled.hit,
            "key": compiled.key, "compiles": stats.totals["compiles"], "remote_hits": stats.remote_hits,
            "upload_bytes": stats.upload_bytes, "fetch_bytes": stats.fetch_bytes, "flushed": flushed,
            "flush_seconds": flush_seconds, **cold_warm._output_summary(outputs)}


# -- the parent -----------------------------------------------------------------------------------------------
class Servers:
    """redis-server (tests/redisserver.py) and, when moto and s3fs are there, moto's S3 server."""

    def __init__(self) -> None:
        sys.path.insert(0, str(common.REPO_ROOT))
        from tests.redisserver import RedisServer

        self.redis = RedisServer()
        self.s3 = None
        self.s3_missing = ""
        try:
            import s3fs  # noqa: F401

            from tests.s3server import S3Server, s3_env

            self.s3 = S3Server()
            self.s3_env = s3_env(self.s3.endpoint)
        except ImportError as exc:
            self.s3_missing = f"S3 variants skipped: {exc}"

    def env(self, variant: str, bucket: str) -> dict[str, str] | None:
        """The hosts' environment for ``variant`` (None: not available here)."""
        if variant == "redis":
            return {"GRAPHCACHE_REMOTE": self.redis.url}
        if variant == "none":
            return {}
        if self.s3 is None:
            return None
        s3 = {**self.s3_env, "GRAPHCACHE_REMOTE": f"s3://{bucket}/fleet"}
        return {**s3, "GRAPHCACHE_COORDINATOR": self.redis.url} if variant == "s3+coordinator" else s3

    def close(self) -> None:
        self.redis.close()
        if self.s3 is not None:
            self.s3._server.stop()


def run_round(model: str, env: dict[str, str], hosts: int, work: Path, *, keep_dirs: bool) -> dict[str, Any]:
    barrier = work / "barrier"
    shutil.rmtree(barrier, ignore_errors=True)
    barrier.mkdir(parents=True)
    dirs = [work / f"host{i}" for i in range(hosts)]
    for path in dirs:
        if not keep_dirs:
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
    child_env = {**cold_warm._env(), **env}
    children = [common.start_function("fleet_bench", "child_host", env={**child_env, "GRAPHCACHE_HOST": f"host{i}"},
                                      model=model, barrier_dir=str(barrier), index=i, cache_dir=str(dirs[i]))
                for i in range(hosts)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while sum(1 for _ in barrier.glob("ready-*")) < hosts:
            failed = [c for c in children if c.failed()]
            if failed:
                failed[0].result()
            if time.monotonic() > deadline:
                raise common.ChildError(f"not all {hosts} hosts were ready after {READY_TIMEOUT:.0f}s")
            time.sleep(0.01)
        go = time.time()
        (barrier / "go").touch()
        rows = [child.result() for child in children]
    finally:
        for child in children:
            child.kill()
    # A host that did not hit compiled (its dir's counters are cumulative: a kept dir still counts its last round).
    return {"compiles": sum(1 for r in rows if not r["hit"]), "hits": sum(1 for r in rows if r["hit"]),
            "per_host": statistics.median(r["elapsed"] for r in rows), "slowest": max(r["elapsed"] for r in rows),
            "fastest": min(r["elapsed"] for r in rows), "wall": max(r["end"] for r in rows) - go,
            "bytes_moved": sum(r["upload_bytes"] + r["fetch_bytes"] for r in rows),
            "flush": max(r["flush_seconds"] for r in rows), "all_flushed": all(r["flushed"] for r in rows),
            "keys": sorted({r["key"] for r in rows}), "out_sums": [r["out_sum"] for r in rows]}


def lookup_latency(url: str, key: str, env: dict[str, str]) -> dict[str, float]:
    """Median seconds of one read that hits ``key`` and one that misses, on the store ``url`` names."""
    from graphcache.store import open_remote

    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({k: v for k, v in env.items() if not k.startswith("GRAPHCACHE_")})
    try:
        store = open_remote(url, version=_version_of(url, key, env))
        missing = "f" * 32
        store.read(key)  # the connection (and, for S3, the client) set up outside the timings
        found = {}
        for name, wanted in (("hit", key), ("miss", missing)):
            times = []
            for _ in range(LOOKUPS):
                t0 = time.perf_counter()
                data = store.read(wanted)
                times.append(time.perf_counter() - t0)
                assert (data is not None) == (name == "hit"), (url, name)
            found[name] = statistics.median(times)
        return found
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _version_of(url: str, key: str, env: dict[str, str]) -> str:
    from graphcache.store import open_remote

    return next(f.version for f in open_remote(url).scan() if f.key == key)


def bench(model: str = "cnn", hosts: int = 4, log: Callable[[str], None] = cold_warm._log) -> dict[str, Any]:
    common.ensure_model(model, log=log)
    common.ensure_bytecode(log)
    work = work_dir()
    servers = Servers()
    if servers.s3_missing:
        log(servers.s3_missing)
    results: dict[str, dict[str, Any]] = {}
    latency: dict[str, dict[str, float]] = {}
    try:
        for variant in VARIANTS:
            bucket = servers.s3.create_bucket() if servers.s3 is not None else ""
            env = servers.env(variant, bucket)
            if env is None:
                continue
            servers.redis.client().flushall()
            shutil.rmtree(work, ignore_errors=True)
            for phase in PHASES:
                row = run_round(model, env, hosts, work, keep_dirs=phase == "warm" and variant == "none")
                results[f"{variant}/{phase}"] = row
                log(f"[fleet {variant:<15} {phase}] compiles {row['compiles']}, per host {row['per_host']:.3f}s, "
                    f"slowest {row['slowest']:.3f}s, wall {row['wall']:.3f}s, moved {row['bytes_moved']} bytes")
            key = results[f"{variant}/cold"]["keys"][0]
            if variant in ("redis", "s3"):
                latency[variant] = lookup_latency(env["GRAPHCACHE_REMOTE"], key, env)
    finally:
        servers.close()
        shutil.rmtree(work, ignore_errors=True)
    sums = [s for row in results.values() for s in row["out_sums"]]
    reference = max(abs(s) for s in sums) or 1.0
    return {"model": model, "hosts": hosts, "cpus": os.cpu_count(), "results": results, "latency": latency,
            "output_relative_drift": (max(sums) - min(sums)) / reference}


def format_result(result: dict[str, Any]) -> str:
    rows = [["variant", "phase", "compiles", "per host (s)", "slowest (s)", "wall (s)", "bytes moved", "flush (s)"]]
    for name, row in result["results"].items():
        variant, phase = name.split("/")
        rows.append([variant, phase, str(row["compiles"]), f"{row['per_host']:.3f}", f"{row['slowest']:.3f}",
                     f"{row['wall']:.3f}", f"{row['bytes_moved']:,}", f"{row['flush']:.3f}"])
    lines = [f"{result['hosts']} hosts (processes, own cache dirs) on {result['model']}, released together; "
             f"{result['cpus']} CPUs", common.text_table(rows)]
    if result["latency"]:
        table = [["remote", "hit (ms)", "miss (ms)"]]
        table += [[name, f"{found['hit'] * 1000:.2f}", f"{found['miss'] * 1000:.2f}"]
                  for name, found in result["latency"].items()]
        lines += ["", f"one lookup, median of {LOOKUPS} (loopback servers)", common.text_table(table)]
    lines.append(f"outputs agree: relative spread {result['output_relative_drift']:.1e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cnn", help=f"one of {', '.join(common.MODEL_NAMES)}")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    result = bench(args.model, args.hosts)
    print(format_result(result))
    if args.json:
        args.json.write_text(json.dumps({"machine": common.machine_info(), **result}, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
