"""Eight processes start together on one uncached graph: does graphcache compile it once, and what does it save?

Each round starts ``--procs`` fresh processes (default 8) on the same frozen model (default ResNet50).
Each one imports TensorFlow and parses the model's ``.pb``, says it is ready (a file in a barrier
folder) and waits; when all are ready the parent creates the ``go`` file and every process starts its
timer at once:

- ``graphcache``: ``from graphcache import GraphCache`` (graphcache's import: inside the timer, nothing of
  graphcache loaded before it, asserted) + ``GraphCache(dir).compile()`` on one shared, EMPTY cache dir +
  ``session()`` + first run.
  One process compiles (under the key's lock) and the others wait for its entry and load it; the number
  of compiles is read from the cache dir's stats afterwards (it must be 1);
- ``plain TF``: import + ``tf.compat.v1.Session`` + first run: every process runs Grappler itself.

"wall" is the time from ``go`` until the last of the processes has its first result; "per process" is the
median of each process's own time. Rounds alternate which variant goes first.

    .venv/bin/python benchmarks/concurrency.py --model resnet50 --procs 8 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cold_warm
import common

VARIANTS = ("graphcache", "plain")
LABELS = {"graphcache": "graphcache (shared empty dir)", "plain": "plain TF (each compiles)"}
READY_TIMEOUT = 600.0  # seconds for all processes to import TensorFlow and parse the model


def work_dir() -> Path:
    return common.WORK_DIR / "concurrency"


# -- the child ------------------------------------------------------------------------------------------------


def child_start(model: str, barrier_dir: str, index: int, cache_dir: str | None = None) -> dict[str, Any]:
    """Get ready (TF import, .pb parse), wait for the barrier's ``go`` file, then compile/load and run once."""
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph_def = graph_pb2.GraphDef.FromString(files.read_bytes())
    feed = files.feed_dict()
    common.assert_graphcache_not_imported(f"concurrency child {index}, before its timer")
    barrier = Path(barrier_dir)
    (barrier / f"ready-{index}").touch()
    go = barrier / "go"
    while not go.exists():
        time.sleep(0.002)
    start_wall = time.time()
    t0 = time.perf_counter()
    if cache_dir is not None:
        graph_cache = common.import_graphcache()  # inside the timer: its cost to the user
        compiled = graph_cache(cache_dir).compile(graph_def, files.fetches, files.feeds, name=model)
        hit: bool | None = compiled.hit
        sess = compiled.session()
    else:
        hit = None
        sess = tf.compat.v1.Session(graph=cold_warm._import_graph(tf, graph_def))
    outputs = sess.run(files.fetches, feed)
    elapsed = time.perf_counter() - t0
    end_wall = time.time()
    sess.close()
    return {"index": index, "start": start_wall, "end": end_wall, "elapsed": elapsed, "hit": hit,
            **cold_warm._output_summary(outputs), "peak_rss_mb": cold_warm._peak_rss_mb()}


# -- the parent -----------------------------------------------------------------------------------------------


def run_round(model: str, variant: str, procs: int, work: Path) -> dict[str, Any]:
    """Start ``procs`` processes, release them together, collect; returns the round's figures."""
    barrier = work / "barrier"
    shutil.rmtree(barrier, ignore_errors=True)
    barrier.mkdir(parents=True)
    cache_dir = None
    if variant == "graphcache":
        cache_dir = work / "cache"
        shutil.rmtree(cache_dir, ignore_errors=True)
        cache_dir.mkdir(parents=True)
    env = cold_warm._env()
    children = [common.start_function("concurrency", "child_start", env=env, model=model, barrier_dir=str(barrier),
                                      index=i, cache_dir=None if cache_dir is None else str(cache_dir))
                for i in range(procs)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while sum(1 for _ in barrier.glob("ready-*")) < procs:
            failed = [c for c in children if c.failed()]
            if failed:
                failed[0].result()  # raises ChildError with its stderr
            if time.monotonic() > deadline:
                raise common.ChildError(f"not all {procs} processes were ready after {READY_TIMEOUT:.0f}s")
            time.sleep(0.01)
        go_time = time.time()
        (barrier / "go").touch()
        rows = [child.result() for child in children]
    finally:
        for child in children:
            child.kill()
    result: dict[str, Any] = {
        "variant": variant,
        "wall": max(row["end"] for row in rows) - go_time,
        "per_process": common.median(row["elapsed"] for row in rows),
        "slowest": max(row["elapsed"] for row in rows),
        "fastest": min(row["elapsed"] for row in rows),
        "start_spread": max(row["start"] for row in rows) - min(row["start"] for row in rows),
        "out_sums": [row["out_sum"] for row in rows],
        "peak_rss_mb": max(row["peak_rss_mb"] for row in rows),
    }
    if cache_dir is not None:
        from graphcache.core.cachedir import CacheDir

        stats = CacheDir(cache_dir).stats()
        result.update(compiles=stats.compiles, hits=stats.hits, misses=stats.misses, entries=stats.entries,
                      hit_processes=sum(1 for row in rows if row["hit"]),
                      uncacheable=sum(stats.uncacheable.values()))
        shutil.rmtree(cache_dir, ignore_errors=True)
    else:
        result.update(compiles=procs)  # every plain process runs Grappler on its own graph
    return result


def bench(model: str = "resnet50", procs: int = 8, rounds: int = 3,
          log: Callable[[str], None] = cold_warm._log) -> dict[str, Any]:
    common.ensure_model(model, log=log)
    common.ensure_bytecode(log)
    work = work_dir()
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for index in range(rounds):
        for variant in VARIANTS if index % 2 == 0 else VARIANTS[::-1]:
            row = run_round(model, variant, procs, work)
            rows[variant].append(row)
            extra = (f", compiles {row['compiles']}, hits {row['hits']}" if variant == "graphcache" else "")
            log(f"[concurrency round {index + 1}/{rounds}] {variant:<10} wall {row['wall']:.3f}s, per process "
                f"{row['per_process']:.3f}s{extra}")
    shutil.rmtree(work, ignore_errors=True)
    med = {v: common.medians(rows[v]) for v in VARIANTS}
    sums = [s for v in VARIANTS for row in rows[v] for s in row["out_sums"]]
    reference = max(abs(s) for s in sums) or 1.0
    return {
        "model": model,
        "procs": procs,
        "rounds": rounds,
        "results": rows,
        "medians": med,
        "compiles_per_round": [row["compiles"] for row in rows["graphcache"]],
        "one_compile": all(row["compiles"] == 1 for row in rows["graphcache"]),
        "wall_ratio": common.ratio(med["graphcache"]["wall"], med["plain"]["wall"]),
        "per_process_ratio": common.ratio(med["graphcache"]["per_process"], med["plain"]["per_process"]),
        "output_relative_drift": (max(sums) - min(sums)) / reference,
    }


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = [["variant", "compiles", "wall, all done (s)", "per process (s)", "fastest (s)", "slowest (s)",
             "start spread", "peak RSS/process"]]
    for v in VARIANTS:
        m = result["medians"][v]
        compiles = (", ".join(str(c) for c in result["compiles_per_round"]) if v == "graphcache"
                    else str(result["procs"]))
        rows.append([LABELS[v], compiles, f"{m['wall']:.3f}", f"{m['per_process']:.3f}", f"{m['fastest']:.3f}",
                     f"{m['slowest']:.3f}", common.fmt_seconds(m["start_spread"]).strip(),
                     f"{m['peak_rss_mb']:.0f} MB"])
    return rows


def format_result(result: dict[str, Any]) -> str:
    name = cold_warm.DISPLAY.get(result["model"], result["model"])
    rows = table_rows(result)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"{result['procs']} processes started together on uncached {name}; medians of {result['rounds']} "
             "round(s) (compiles: per round, from graphcache stats)"]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
              for row in rows]
    lines.append(f"compiled once in every round: {'yes' if result['one_compile'] else 'NO'}; wall graphcache/plain "
                 f"{common.fmt_ratio(result['wall_ratio'])}, per process {common.fmt_ratio(result['per_process_ratio'])};"
                 f" outputs agree: relative spread {result['output_relative_drift']:.1e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help=f"one of {', '.join(common.MODEL_NAMES)}")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(format_result(bench(args.model, args.procs, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
