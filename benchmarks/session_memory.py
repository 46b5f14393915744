"""Memory of a session that runs several fetch signatures of a frozen model: plain TensorFlow vs graphcache.

Each measurement is a fresh process that imports TensorFlow, reads the frozen model and imports it into a
tf.Graph, then records its resident set size (RSS: VmRSS in /proc/self/status), resets its peak resident
set (VmHWM) where the kernel allows it, and then (miss and hit: imports graphcache, inside the measured
region like every cost of graphcache's) opens a session, runs each fetch signature once, and records the
RSS again and the peak. Two figures per process, both over the RSS recorded right before the session:

- RSS growth  = VmRSS after the runs (and a full garbage collection) - that RSS: what the session keeps;
- peak growth = VmHWM at the end - that RSS: the most the process held at once while the session opened,
  compiled or loaded, and ran (the transient copies included). VmHWM is the process's peak since its
  start, and importing TensorFlow or the graph may have peaked higher than the session: so right before the
  session the peak is reset to the current RSS (writing "5" to /proc/self/clear_refs, Linux >= 4.0), which
  makes it the session's own. Where that does not take (checked in each process), the figure is VmHWM minus
  that RSS, an upper bound; the output says which.

Variants:

- plain  = ``tf.compat.v1.Session``;
- miss   = ``graphcache.Session`` on an empty cache dir (every signature compiled and written);
- hit    = ``graphcache.Session`` on the cache dir a previous process filled (every signature loaded).

The signatures (default 4, ResNet50): the model's output alone, then the output plus one intermediate ReLU
(at 1/4, 1/2, 3/4 of the graph): each compiles to a graph holding all of the model's weights, so a session
that imported each compiled graph as it is would hold one copy of the weights per signature.
graphcache shares those constants (graphcache/session/run_graph.py). Prints the median of each figure per
variant over ``--runs`` processes and the ratios to plain; goals: RSS growth <= 1.1x plain (miss and hit),
peak growth <= 1.05x plain for the miss and <= 0.8x plain for a hit (no Grappler, whose working copies
make plain's peak).

    python benchmarks/session_memory.py [--model resnet50] [--signatures 4] [--runs 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

GOAL = 1.1  # RSS growth, miss and hit, x plain
PEAK_GOALS = {"miss": 1.05, "hit": 0.8}  # peak growth, x plain
VARIANTS = ("plain", "miss", "hit")


def rss_mb(field: str = "VmRSS") -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (``5`` to /proc/self/clear_refs); True where it took.

    It took when, right after, the peak is the current RSS (within 1 MB); a peak left at the process's
    earlier high-water mark means the kernel ignored the request.
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return rss_mb("VmHWM") - rss_mb("VmRSS") <= 1.0


def fetch_signatures(graph, output: str, count: int) -> list[list[str]]:
    relus = [op.name for op in graph.get_operations() if op.type == "Relu"]
    extra = [relus[len(relus) * i // count] + ":0" for i in range(1, count)]
    return [[output]] + [[output, name] for name in extra]


def session_inputs(model: str, signatures: int) -> tuple[Any, Any, list[list[str]], dict[str, Any]]:
    """(child) TensorFlow, the frozen ``model`` imported into a tf.Graph, its ``signatures`` fetch signatures
    (fetch_signatures) and the feeds of one example input."""
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_pb2.GraphDef.FromString(files.read_bytes()), name="")
    return tf, graph, fetch_signatures(graph, files.fetches[0], signatures), {files.feeds[0]: files.example_input(0)}


def child_measure(variant: str, model: str, signatures: int, cache_dir: str | None = None) -> dict:
    """(child) RSS and peak growth, in MB, of a session running ``signatures`` fetch signatures once each."""
    tf, graph, fetch_sets, feeds = session_inputs(model, signatures)
    common.assert_graphcache_not_imported(f"the {variant} child, before the session")
    gc.collect()
    before = rss_mb()
    peak_before_reset = rss_mb("VmHWM")
    peak_reset = reset_peak()
    imported = before
    start = time.perf_counter()
    if variant == "plain":
        sess = tf.compat.v1.Session(graph=graph)
    else:
        from graphcache import GraphCache, Session  # measured: graphcache's import is part of what it costs

        imported = rss_mb()
        sess = Session(graph=graph, cache=GraphCache(cache_dir))
    for fetches in fetch_sets:
        sess.run(fetches, feeds)
    seconds = time.perf_counter() - start  # the session's first runs (and graphcache's import)
    if variant != "plain":
        sess.cache.flush()
        hits = [imported_graph.hit for imported_graph in sess.compiled_signatures.values()]
        if hits != [variant == "hit"] * len(fetch_sets):
            raise RuntimeError(f"{variant}: expected every signature to {'hit' if variant == 'hit' else 'miss'}, "
                               f"got {hits}")
    else:
        common.assert_graphcache_not_imported("the plain child")
    peak = rss_mb("VmHWM")
    gc.collect()
    after = rss_mb()
    return {"growth_mb": after - before, "peak_growth_mb": peak - before, "peak_reset": peak_reset,
            "import_growth_mb": imported - before, "rss_before_mb": before, "rss_mb": after, "peak_mb": peak,
            "peak_before_reset_mb": peak_before_reset, "seconds": seconds}


def peak_method(rows: dict[str, list[dict]]) -> str:
    flags = [row["peak_reset"] for results in rows.values() for row in results]
    if all(flags):
        return ("peak: VmHWM reset to the RSS right before the session (\"5\" written to /proc/self/clear_refs; "
                "checked in every process): the session's own peak")
    if not any(flags):
        return ("peak: this kernel did not reset VmHWM (/proc/self/clear_refs), so the peak is the process's since "
                "its start minus the RSS before the session: an upper bound (TF's or the graph's import may have "
                "peaked higher)")
    return (f"peak: VmHWM was reset in {sum(flags)} of {len(flags)} processes (clear_refs); in the others it is the "
            "process's peak since its start minus the RSS before the session (an upper bound)")


def format_result(model: str, signatures: int, runs: int, rows: dict[str, list[dict]]) -> str:
    growth = {v: common.median_of(rows[v], "growth_mb") for v in VARIANTS}
    peak = {v: common.median_of(rows[v], "peak_growth_mb") for v in VARIANTS}
    lines = [
        f"{model}: {signatures} fetch signatures, medians of {runs} fresh processes; both figures are growth over "
        "the RSS right before the session (after TF's import and the graph's import)",
        "RSS growth: VmRSS after the session's first runs (and a gc) minus that RSS; peak growth: VmHWM minus it",
        peak_method(rows),
        "miss and hit include graphcache's import (median " + ", ".join(
            f"{v} +{common.median_of(rows[v], 'import_growth_mb'):.0f} MB" for v in ("miss", "hit")) + " RSS of it)",
        f"  {'':5}  {'RSS growth':>11}  {'x plain':<30}  {'peak growth':>11}  x plain",
    ]
    for variant in VARIANTS:
        if variant == "plain":
            rss_ratio = peak_ratio = ""
        else:
            rss_ratio = common.fmt_ratio(common.ratio(growth[variant], growth["plain"]), GOAL)
            peak_ratio = common.fmt_ratio(common.ratio(peak[variant], peak["plain"]), PEAK_GOALS[variant])
        lines.append(f"  {variant:5}  +{growth[variant]:7.0f} MB  {rss_ratio:<30}  +{peak[variant]:7.0f} MB  {peak_ratio}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=common.MODEL_NAMES)
    parser.add_argument("--signatures", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per variant (medians)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    common.ensure_model(args.model, log=print)
    common.ensure_bytecode(print)
    print(common.describe_machine())
    rows: dict[str, list[dict]] = {"plain": [], "miss": [], "hit": []}
    for _ in range(args.runs):
        rows["plain"].append(common.run_function("session_memory", "child_measure", variant="plain",
                                                 model=args.model, signatures=args.signatures))
        with tempfile.TemporaryDirectory() as cache_dir:
            for variant in ("miss", "hit"):
                rows[variant].append(common.run_function("session_memory", "child_measure", variant=variant,
                                                         model=args.model, signatures=args.signatures,
                                                         cache_dir=cache_dir))
    print(format_result(args.model, args.signatures, args.runs, rows))
    growth = {v: common.median_of(rows[v], "growth_mb") for v in VARIANTS}
    peak = {v: common.median_of(rows[v], "peak_growth_mb") for v in VARIANTS}
    if args.json:
        args.json.write_text(json.dumps({
            "machine": common.machine_info(), "model": args.model, "signatures": args.signatures, "runs": rows,
            "growth_mb": growth, "peak_growth_mb": peak,
            "ratios": {v: common.ratio(growth[v], growth["plain"]) for v in ("miss", "hit")},
            "peak_ratios": {v: common.ratio(peak[v], peak["plain"]) for v in ("miss", "hit")},
            "goals": {"growth": GOAL, "peak_growth": PEAK_GOALS},
            "peak_reset": all(row["peak_reset"] for results in rows.values() for row in results)},
            indent=2) + "\n")


if __name__ == "__main__":
    main()
