"""``make demo``: a real model compiled once, then loaded from the cache by a new process.

On the default cache dir (``$GRAPHCACHE_DIR`` or the user cache dir) with a frozen MobileNetV2:

1. purge the model's key, so that the first process really compiles;
2. cold: a fresh process calls GraphCache().compile() (a miss: fingerprint, Grappler, write), opens
   compiled.session() and runs the model once;
3. warm: another fresh process does the same and hits;
4. ``graphcache stats`` (or cache.stats() while the CLI is not installed).

Each time printed covers graphcache's import (``from graphcache import GraphCache``: no graphcache module is
loaded before the timer, asserted) + GraphCache() + compile() (fingerprint and lookup, plus the compile on a
miss) + session + first run; importing TensorFlow and parsing the model's .pb happen before the timer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import common

MODEL = "mobilenetv2"
LABEL = "MobileNetV2"


def child_demo(model: str) -> dict[str, Any]:
    """(fresh process) GraphCache() on the default dir + compile() + session() + first run, timed."""
    common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.assert_graphcache_not_imported("the demo child, before its timer")
    t0 = time.perf_counter()
    from graphcache import GraphCache  # inside the timer: graphcache's import is its cost to the user

    ti = time.perf_counter()
    cache = GraphCache()
    compiled = cache.compile(graph_def, files.fetches, files.feeds, name=f"demo-{model}")
    t1 = time.perf_counter()
    with compiled.session() as sess:
        t2 = time.perf_counter()
        output = sess.run(files.fetches, feed)[0]
        t3 = time.perf_counter()
    return {"total": t3 - t0, "graphcache_import": ti - t0, "lookup": t1 - ti, "session": t2 - t1,
            "first_run": t3 - t2, "hit": compiled.hit,
            "key": compiled.key, "compile_seconds": compiled.compile_seconds, "cache_dir": str(cache.cache_dir),
            "top_class": int(output.argmax())}


def child_purge(model: str) -> dict[str, Any]:
    """(fresh process) The model's key on the default cache dir, and that entry purged."""
    from graphcache import GraphCache, fingerprint

    files = common.ModelFiles.load(model)
    cache = GraphCache()
    key = fingerprint(str(files.pb_path), files.fetches, files.feeds)
    purged = cache.purge([key])
    stray = cache.store.stat(key) is not None  # an entry file the index did not list
    if stray:
        cache.store.delete(key)
    return {"key": key, "cache_dir": str(cache.cache_dir), "entries": purged.entries, "bytes": purged.bytes,
            "stray": stray}


def _say(text: str = "") -> None:
    print(text, flush=True)


def _describe(run: dict[str, Any]) -> str:
    what = "hit " if run["hit"] else "miss"
    lookup = "fingerprint + lookup" if run["hit"] else "fingerprint + Grappler compile + write"
    return (f"{what}  {run['total']:6.2f} s   (graphcache import {run['graphcache_import']:.2f} s, {lookup} "
            f"{run['lookup']:.2f} s, session {run['session']:.2f} s, first run {run['first_run']:.2f} s)")


def _print_stats(cache_dir: str) -> None:
    """``graphcache stats`` from the CLI; the cache's stats() when the CLI is not there (yet)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "graphcache", "stats"], cwd=common.REPO_ROOT,
                              env=common.child_env(), capture_output=True, text=True, timeout=120, check=False)
        cli_ok = proc.returncode == 0
        cli_error = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    except (OSError, subprocess.SubprocessError) as exc:
        proc, cli_ok, cli_error = None, False, str(exc)
    if cli_ok and proc is not None:
        _say(proc.stdout.rstrip())
        return
    _say(f"   (the graphcache CLI is not available: {cli_error})")
    _say("   cache.stats() instead:")
    from graphcache.core.cachedir import CacheDir

    stats = CacheDir(cache_dir).stats()
    hit_rate = f"{stats.hit_rate:.0%}" if stats.hit_rate is not None else "-"
    _say(f"   entries {stats.entries} ({stats.bytes / 1e6:.1f} MB), hits {stats.hits}, misses {stats.misses}, "
         f"hit rate {hit_rate}")
    _say(f"   compiles {stats.compiles} ({stats.compile_seconds:.1f} s compiling), "
         f"saved {stats.saved_seconds:.1f} s of compiles, {stats.bytes_written / 1e6:.1f} MB written, "
         f"errors {stats.errors}")
    uncacheable = {k: v for k, v in stats.uncacheable.items() if v}
    if uncacheable:
        _say(f"   uncacheable: {', '.join(f'{k} {v}' for k, v in sorted(uncacheable.items()))}")


def main() -> int:
    started = time.perf_counter()
    files = common.ensure_model(MODEL, log=lambda m: _say(f"   {m}"))
    common.ensure_bytecode(lambda m: _say(f"   {m}"))
    _say(f"graphcache demo: {LABEL}, frozen GraphDef {files.size_bytes / 1e6:.1f} MB ({files.nodes} nodes)")

    for name in ("GRAPHCACHE_DISABLE", "GRAPHCACHE_READ_ONLY"):
        if os.environ.get(name):
            _say(f"note: {name}={os.environ[name]} is set: the second process will not show a hit")

    # In a child too: the key needs TensorFlow (the compiler identity), whose import logs would bury the demo.
    purge = common.run_function("demo", "child_purge", model=MODEL)
    key = purge["key"]
    _say(f"cache dir: {purge['cache_dir']}")
    state = f"removed it ({purge['bytes'] / 1e6:.1f} MB)" if purge["entries"] or purge["stray"] else "not cached"
    _say(f"\n1. purge key {key}: {state}")

    _say("\n2. cold: a fresh process compiles through the cache and runs the model once ...")
    cold = common.run_function("demo", "child_demo", model=MODEL)
    _say(f"   {_describe(cold)}")
    _say("\n3. warm: another fresh process, same model ...")
    warm = common.run_function("demo", "child_demo", model=MODEL)
    _say(f"   {_describe(warm)}")

    _say(f"\n   speed-up: {cold['total'] / warm['total']:.1f}x faster from graphcache's import to first result "
         f"(cold {cold['total']:.2f} s -> warm {warm['total']:.2f} s); the hit skipped a "
         f"{warm['compile_seconds']:.2f} s compile")
    same = cold["top_class"] == warm["top_class"]
    _say(f"   same prediction in both processes: {'yes' if same else 'NO'} (class {warm['top_class']})")
    for run in (cold, warm):
        if run["key"] != key:
            _say(f"   WARNING: a child used key {run['key']}, the purged key was {key}")
    if cold["hit"] or not warm["hit"]:
        _say(f"   WARNING: expected miss then hit, got {'hit' if cold['hit'] else 'miss'} then "
             f"{'hit' if warm['hit'] else 'miss'}")

    _say("\n4. graphcache stats")
    _print_stats(purge["cache_dir"])
    _say(f"\n(demo took {time.perf_counter() - started:.0f} s; TensorFlow import and .pb parse are outside "
         "the timed parts, graphcache's import is inside)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
