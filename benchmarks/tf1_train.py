"""Cold vs warm start of a non-frozen TF1 training graph: ref variables (``VariableV2``), Adam, a global step.

The graph is ``benchmarks.models.tf1_training_graph(resource_variables=False)``. Every measurement is one
FRESH process; before its timer each child imports TensorFlow, builds the graph (Python graph
construction, equal for all variants) and makes its batch. The timer then covers what a training
program does before its first step returns: (warm and miss) import graphcache, create the session, run
the variables' initializer, run the first training step (``[train_op, loss]`` with a batch fed). No
graphcache module is loaded before the timer (asserted in the child): its import is graphcache's cost.

- ``cold``:  ``tf.compat.v1.Session`` with TF defaults: Grappler runs inside the init run and the first
  step (one compile per signature).
- ``warm``:  ``from graphcache import Session`` + ``Session(cache_dir=...)`` on a cache holding both
  signatures' entries.
- ``miss``:  the same on an EMPTY cache dir: fingerprint, Grappler, write, per signature.
- ``floor``: ``tf.compat.v1.Session`` with the optimizers off (graphcache's runtime ConfigProto) on the
  original, unoptimized graph: no compile at all, so a lower bound for the session set-up (it runs the
  unoptimized graph, which a warm session does not).

Rounds interleave the variants (rotating their order); the first round's miss fills the warm cache dir.

The graph has 124 nodes: under ``GRAPHCACHE_MIN_NODES`` (default 300), so by default graphcache.Session runs
it the plain TensorFlow way (warm and miss are then plain sessions behind graphcache's front, no signature
compiled). ``--cache-small`` sets ``GRAPHCACHE_MIN_NODES=0`` in the children: what caching such a graph costs
and saves (the reason for the default).

    .venv/bin/python benchmarks/tf1_train.py --runs 5 [--cache-small]
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

NAME = "tf1_train"
DISPLAY = "TF1 training (ref vars, Adam)"
DISPLAY_CACHED = DISPLAY + ", GRAPHCACHE_MIN_NODES=0"
VARIANTS = cold_warm.VARIANTS  # cold, warm, floor, miss
ROUND_ORDER = ("miss", "cold", "warm", "floor")


def work_dir() -> Path:
    return common.WORK_DIR / NAME


# -- the child (one fresh process per measurement) --------------------------------------------------------------


def child_run(variant: str, cache_dir: str | None = None) -> dict[str, Any]:
    """Session + init + first training step, timed; ``variant`` is cold, floor or graphcache (warm/miss)."""
    tf = common.warm_up()
    from models import tf1_training_graph

    model = tf1_training_graph(resource_variables=False)
    graph_bytes = len(model.graph.as_graph_def().SerializeToString())
    feed = model.batch(0)
    session_class: Any = tf.compat.v1.Session
    kwargs: dict[str, Any] = {}
    if variant == "graphcache":
        kwargs = {"cache_dir": cache_dir}
    elif variant == "floor":
        kwargs = {"config": cold_warm.floor_config()}
    common.assert_graphcache_not_imported(f"the {variant} child, before its timer")
    usage = common.usage()
    t0 = time.perf_counter()
    if variant == "graphcache":  # graphcache's import is inside the timer: its cost to the user
        from graphcache import Session

        session_class = Session
    ti = time.perf_counter()
    sess = session_class(graph=model.graph, **kwargs)
    t1 = time.perf_counter()
    sess.run(model.init)
    t2 = time.perf_counter()
    _, loss = sess.run([model.train, model.loss], feed)
    t3 = time.perf_counter()
    user, system, faults = (now - then for now, then in zip(common.usage(), usage, strict=True))
    result: dict[str, Any] = {"total": t3 - t0, "graphcache_import": ti - t0, "session": t1 - ti, "init": t2 - t1,
                              "first_step": t3 - t2,
                              "cpu_user": user, "cpu_sys": system, "minor_faults": faults, "loss": float(loss),
                              "graph_bytes": graph_bytes, "nodes": len(model.graph.as_graph_def().node)}
    start = time.perf_counter()
    sess.run([model.train, model.loss], model.batch(1))
    result["second_step"] = time.perf_counter() - start
    if variant == "graphcache":
        hits = [imported.hit for imported in sess.compiled_signatures.values()]
        result.update(signatures=len(hits), hits=sum(hits))
    sess.close()
    result["peak_rss_mb"] = cold_warm._peak_rss_mb()
    result["graphcache_runtime_loaded"] = any(m in sys.modules for m in ("graphcache.cache", "graphcache.session.drop_in"))
    if variant != "graphcache":
        common.assert_graphcache_not_imported(f"the {variant} child")
    return result


# -- the parent -----------------------------------------------------------------------------------------------


def bench(runs: int, log: Callable[[str], None] = cold_warm._log, *, cache_small: bool = False) -> dict[str, Any]:
    """``runs`` interleaved rounds of fresh cold, warm, floor and miss processes; a cold_warm-like result.
    ``cache_small``: cache the graph although it is under GRAPHCACHE_MIN_NODES."""
    common.ensure_bytecode(log)
    work = work_dir()
    shutil.rmtree(work, ignore_errors=True)
    warm_dir = work / "cache"
    warm_dir.mkdir(parents=True)
    env = cold_warm._env()
    if cache_small:
        env = {**env, "GRAPHCACHE_MIN_NODES": "0"}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in ROUND_ORDER}
    for index in range(runs):
        shift = index % len(ROUND_ORDER)
        for variant in ROUND_ORDER[shift:] + ROUND_ORDER[:shift]:
            if variant in ("cold", "floor"):
                row = common.run_function("tf1_train", "child_run", env=env, variant=variant)
            else:
                cache_dir = warm_dir if variant == "warm" or index == 0 else work / f"miss-{index}"
                cache_dir.mkdir(parents=True, exist_ok=True)
                row = common.run_function("tf1_train", "child_run", env=env, variant="graphcache",
                                          cache_dir=str(cache_dir))
                if cache_dir != warm_dir:
                    shutil.rmtree(cache_dir, ignore_errors=True)
                expected = row["signatures"] if variant == "warm" else 0
                if row["hits"] != expected:
                    raise RuntimeError(f"{NAME} {variant}: {row['hits']} of {row['signatures']} signatures hit, "
                                       f"expected {expected}")
            results[variant].append(row)
            log(f"[{NAME} round {index + 1}/{runs}] {variant:<5} {row['total']:.3f}s")
    med = {variant: common.medians(rows) for variant, rows in results.items()}
    total = {v: med[v]["total"] for v in VARIANTS}
    best = {v: min(row["total"] for row in results[v]) for v in VARIANTS}
    cpu = {v: common.median(row["cpu_user"] + row["cpu_sys"] for row in results[v]) for v in VARIANTS}
    losses = [row["loss"] for rows in results.values() for row in rows]
    leaked = [v for v in ("cold", "floor") if any(r["graphcache_runtime_loaded"] for r in results[v])]
    if leaked:
        log(f"WARNING: graphcache's cache/session code was imported in the {', '.join(leaked)} child(ren)")
    pairs = {"warm/cold": ("warm", "cold"), "warm/floor": ("warm", "floor"), "miss/cold": ("miss", "cold")}
    first = results["cold"][0]
    return {
        "model": NAME,
        "display": DISPLAY_CACHED if cache_small else DISPLAY,
        "runs": runs,
        "size_bytes": first["graph_bytes"],
        "nodes": first["nodes"],
        "signatures": results["warm"][0]["signatures"],
        "results": {v: results[v] for v in VARIANTS},
        "medians": med,
        "ratios": {name: common.ratio(total[a], total[b]) for name, (a, b) in pairs.items()},
        "ratios_best": {name: common.ratio(best[a], best[b]) for name, (a, b) in pairs.items()},
        "ratios_cpu": {name: common.ratio(cpu[a], cpu[b]) for name, (a, b) in pairs.items()},
        "loss_spread": max(losses) - min(losses),
        "graphcache_leaked_into": leaked,
    }


def format_result(result: dict[str, Any]) -> str:
    med = result["medians"]
    s = common.fmt_seconds
    lines = [
        f"{result.get('display', DISPLAY)}: GraphDef {cold_warm.size_text(result['size_bytes'])} ({result['nodes']} nodes), "
        f"{result['signatures']} signatures (init, train step)",
        f"medians of {result['runs']} fresh processes, seconds (TF import and graph construction excluded; "
        "graphcache's import included in warm and miss)",
        "",
        f"{'variant':<7} {'total':>8}   parts",
    ]
    cached = result["signatures"] > 0  # else: under GRAPHCACHE_MIN_NODES, run the plain way
    labels = {"cold": "tf.compat.v1.Session", "warm": "graphcache.Session, hit" if cached else
              "graphcache.Session, small graph: plain", "floor": "optimizers off",
              "miss": "graphcache.Session, empty dir" if cached else "graphcache.Session, small graph: plain"}
    for v in VARIANTS:
        m = med[v]
        gc_import = f"graphcache import {s(m['graphcache_import'])} + " if v in ("warm", "miss") else ""
        lines.append(f"{v:<7} {s(m['total'])}   {gc_import}session {s(m['session'])} + init run {s(m['init'])} + "
                     f"first step {s(m['first_step'])}   ({labels[v]})")
    ratios, best, cpu = result["ratios"], result["ratios_best"], result["ratios_cpu"]
    lines.append("")
    for name, goal in (("warm/cold", None), ("warm/floor", None), ("miss/cold", cold_warm.MISS_COLD_GOAL)):
        lines.append(f"{name:<10} {common.fmt_ratio(ratios[name], goal)}   [fastest process of each: "
                     f"{best[name]:.2f}x; CPU time: {cpu[name]:.2f}x]")
    lines += [
        "",
        "steady-state second step: " + ", ".join(f"{v} {s(med[v]['second_step']).strip()}" for v in VARIANTS),
        f"loss after the first step agrees across variants: spread {result['loss_spread']:.1e}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per variant (default 5)")
    parser.add_argument("--cache-small", action="store_true", help="GRAPHCACHE_MIN_NODES=0 in the children")
    args = parser.parse_args(argv)
    print(format_result(bench(args.runs, cache_small=args.cache_small)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
