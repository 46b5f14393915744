"""Memory of a session that runs several fetch signatures of a frozen model: plain TensorFlow vs graphcache.

Each measurement is a fresh process that imports TensorFlow, reads the frozen model and imports it into a
tf.Graph, then records its resident set size (RSS), opens a session, runs each fetch signature once, and
records the RSS again: the growth is what the session and its runs cost. Variants:

- plain  = ``tf.compat.v1.Session``;
- miss   = ``graphcache.Session`` on an empty cache dir (every signature compiled and written);
- hit    = ``graphcache.Session`` on the cache dir a previous process filled (every signature loaded).

The signatures (default 4, ResNet50): the model's output alone, then the output plus one intermediate ReLU
(at 1/4, 1/2, 3/4 of the graph): each compiles to a graph holding all of the model's weights, so a session
that imported each compiled graph as it is would hold one copy of the weights per signature.
graphcache shares those constants (graphcache/session/run_graph.py). Prints the median growth per variant over
``--runs`` processes and the ratios to plain (goal: <= 1.1x).

    python benchmarks/session_memory.py [--model resnet50] [--signatures 4] [--runs 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

GOAL = 1.1


def _rss_mb(field: str = "VmRSS") -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def fetch_signatures(graph, output: str, count: int) -> list[list[str]]:
    relus = [op.name for op in graph.get_operations() if op.type == "Relu"]
    extra = [relus[len(relus) * i // count] + ":0" for i in range(1, count)]
    return [[output]] + [[output, name] for name in extra]


def child_measure(variant: str, model: str, signatures: int, cache_dir: str | None = None) -> dict:
    """(child) RSS growth, in MB, of a session running ``signatures`` fetch signatures once each."""
    tf = common.warm_up()
    from tensorflow.core.framework import graph_pb2

    files = common.ModelFiles.load(model)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_pb2.GraphDef.FromString(files.read_bytes()), name="")
    fetch_sets = fetch_signatures(graph, files.fetches[0], signatures)
    feeds = {files.feeds[0]: files.example_input(0)}
    if variant != "plain":
        import graphcache
    gc.collect()
    before = _rss_mb()
    if variant == "plain":
        sess = tf.compat.v1.Session(graph=graph)
    else:
        sess = graphcache.Session(graph=graph, cache=graphcache.GraphCache(cache_dir))
    for fetches in fetch_sets:
        sess.run(fetches, feeds)
    if variant != "plain":
        sess.cache.flush()
        hits = [imported.hit for imported in sess.compiled_signatures.values()]
        if hits != [variant == "hit"] * len(fetch_sets):
            raise RuntimeError(f"{variant}: expected every signature to {'hit' if variant == 'hit' else 'miss'}, "
                               f"got {hits}")
    gc.collect()
    after = _rss_mb()
    return {"growth_mb": after - before, "rss_mb": after, "peak_mb": _rss_mb("VmHWM")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=common.MODEL_NAMES)
    parser.add_argument("--signatures", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per variant (medians)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    common.ensure_model(args.model, log=print)
    print(common.describe_machine())
    print(f"{args.model}: {args.signatures} fetch signatures, RSS growth of the session and its first runs, "
          f"median of {args.runs} fresh processes")
    rows: dict[str, list[dict]] = {"plain": [], "miss": [], "hit": []}
    for _ in range(args.runs):
        rows["plain"].append(common.run_function("session_memory", "child_measure", variant="plain",
                                                 model=args.model, signatures=args.signatures))
        with tempfile.TemporaryDirectory() as cache_dir:
            for variant in ("miss", "hit"):
                rows[variant].append(common.run_function("session_memory", "child_measure", variant=variant,
                                                         model=args.model, signatures=args.signatures,
                                                         cache_dir=cache_dir))
    growth = {variant: common.median_of(results, "growth_mb") for variant, results in rows.items()}
    for variant in rows:
        ratio = common.ratio(growth[variant], growth["plain"])
        against = "" if variant == "plain" else f"   {common.fmt_ratio(ratio, GOAL)} of plain"
        print(f"  {variant:5}  +{growth[variant]:8.0f} MB{against}")
    if args.json:
        args.json.write_text(json.dumps({"machine": common.machine_info(), "model": args.model,
                                         "signatures": args.signatures, "runs": rows, "growth_mb": growth},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
