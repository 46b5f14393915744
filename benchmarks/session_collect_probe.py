"""Probe: could a Session miss keep TensorFlow's own compile instead of running Grappler offline?

A ``graphcache.Session`` miss today runs Grappler offline (``TF_OptimizeGraphSerialized``), imports the result
into its run graph and runs it. For a frozen ResNet50 with 4 fetch signatures that peaks ~1.2-1.4x plain
TensorFlow (benchmarks/miss_memory_timeline.py): the offline call holds ~4 more copies of the weights than a
session's own Grappler does (docs/architecture.md). This probe measures the other route, in fresh processes:

- ``plain``:   ``tf.compat.v1.Session``, each signature run once (what the user pays without graphcache);
- ``miss``:    ``graphcache.Session`` on an empty cache dir (today's miss);
- ``hit``:     ``graphcache.Session`` on the dir the miss filled (today's hit: constants shared between signatures);
- ``collect``: plain's session, each first run with ``RunOptions(output_partition_graphs=True)``: TensorFlow
  returns the graph its executor runs (after Grappler, placement, TensorFlow's graph passes, oneDNN's
  rewrites). Each is made importable by the user's names (compile/collected.py: the call frame's ``_Arg``
  nodes become Placeholders, its ``_Retval`` nodes are dropped) and serialized, as an entry's payload would be;
- ``replay``:  a fresh process imports each of those graphs into a tf.Graph of its own and runs it in a session
  with the optimizers off (compiled.runtime_config, as graphcache's hits run), checking each output against
  what plain TensorFlow returned in ``collect``'s process. One graph and session per signature, closed before
  the next: a hit's run graph holds every signature and shares their constants (session/run_graph.py), which
  this probe does not build, so replay's memory is not a hit's; its time is each signature's read, import
  and first run.

Memory figures as session_memory.py (peak: VmHWM over the RSS right before the session). Time: the first
runs of all signatures. Only compile/collected.py is built so far: what this prints decides whether the
rest of the route (a Session miss that runs plain TensorFlow and stores what it compiled) is worth building.

    python benchmarks/session_collect_probe.py [--model resnet50] [--signatures 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import session_memory  # noqa: E402

VARIANTS = ("plain", "miss", "hit", "collect", "replay")


class _Mark:
    """(child) Right before the session: the RSS, the peak reset to it and the time; ``figures`` at the end."""

    def __init__(self) -> None:
        gc.collect()
        self.before = session_memory.rss_mb()
        self.peak_reset = session_memory.reset_peak()
        self.start = time.perf_counter()

    def figures(self, **extra: object) -> dict:
        seconds = time.perf_counter() - self.start
        peak = session_memory.rss_mb("VmHWM")
        gc.collect()
        return {"peak_growth_mb": peak - self.before, "growth_mb": session_memory.rss_mb() - self.before,
                "seconds": seconds, "peak_reset": self.peak_reset, **extra}


def child_collect(model: str, signatures: int, out_dir: str) -> dict:
    """(child) plain's session, keeping each signature's partition graph as an importable GraphDef."""
    import numpy as np
    from tensorflow.core.protobuf import config_pb2

    from graphcache.compile import collected

    tf, graph, fetch_sets, feeds = session_memory.session_inputs(model, signatures)
    mark = _Mark()
    sess = tf.compat.v1.Session(graph=graph)
    stored = 0
    for i, fetches in enumerate(fetch_sets):
        metadata = config_pb2.RunMetadata()
        outputs = sess.run(fetches, feeds, options=config_pb2.RunOptions(output_partition_graphs=True),
                           run_metadata=metadata)
        data = collected.importable(list(metadata.partition_graphs), list(feeds), fetches).SerializeToString()
        del metadata
        stored += len(data)
        Path(out_dir, f"sig{i}.pb").write_bytes(data)
        del data
        np.savez(Path(out_dir, f"sig{i}.npz"), *outputs)
    return mark.figures(stored_mb=stored / 1e6)


def child_replay(model: str, signatures: int, out_dir: str) -> dict:
    """(child) the collected graphs imported and run with the optimizers off, checked against plain's outputs."""
    import numpy as np
    from tensorflow.core.framework import graph_pb2

    from graphcache.compile.compiled import runtime_config

    tf, _, fetch_sets, feeds = session_memory.session_inputs(model, signatures)
    mark = _Mark()
    identical, max_diff = True, 0.0
    for i in range(len(fetch_sets)):  # each in a graph of its own: a shared run graph would need graphcache's
        run_graph = tf.Graph()  # constant sharing (session/run_graph.py)
        with run_graph.as_default():
            tf.graph_util.import_graph_def(graph_pb2.GraphDef.FromString(Path(out_dir, f"sig{i}.pb").read_bytes()),
                                           name="")
        with tf.compat.v1.Session(graph=run_graph, config=runtime_config()) as sess:
            outputs = sess.run(fetch_sets[i], feeds)
        with np.load(Path(out_dir, f"sig{i}.npz")) as saved:
            expected = [saved[f"arr_{k}"] for k in range(len(outputs))]
        for got, want in zip(outputs, expected, strict=True):
            identical = identical and np.array_equal(got, want)
            max_diff = max(max_diff, float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)))))
    return mark.figures(identical=identical, max_abs_diff=max_diff)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=common.MODEL_NAMES)
    parser.add_argument("--signatures", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per variant (medians)")
    common.add_out_argument(parser, "session_collect_probe")
    args = parser.parse_args()
    common.ensure_model(args.model, log=print)
    common.ensure_bytecode(print)
    with common.teed_stdout(args.out, args.append):
        print(common.describe_machine())
        rows: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        kwargs = {"model": args.model, "signatures": args.signatures}
        for _ in range(args.runs):
            rows["plain"].append(common.run_function("session_memory", "child_measure", variant="plain", **kwargs))
            with tempfile.TemporaryDirectory() as work:
                for variant in ("miss", "hit"):
                    rows[variant].append(common.run_function("session_memory", "child_measure", variant=variant,
                                                             cache_dir=work, **kwargs))
            with tempfile.TemporaryDirectory() as work:
                rows["collect"].append(common.run_function("session_collect_probe", "child_collect", out_dir=work, **kwargs))
                rows["replay"].append(common.run_function("session_collect_probe", "child_replay", out_dir=work, **kwargs))
        plain_peak = common.median_of(rows["plain"], "peak_growth_mb")
        plain_seconds = common.median_of(rows["plain"], "seconds")
        print(f"{args.model}: {args.signatures} fetch signatures, medians of {args.runs} fresh processes per variant; "
              "MB over the RSS right before the session; s: the session's creation and first runs (miss and hit: "
              "with graphcache's import; replay: with reading and importing the graphs)")
        print(session_memory.peak_method(rows))
        print(f"  {'variant':8} {'peak growth':>12} {'x plain':>8} {'RSS growth':>11} {'s':>7} {'x plain':>8}")
        for variant in VARIANTS:
            peak = common.median_of(rows[variant], "peak_growth_mb")
            seconds = common.median_of(rows[variant], "seconds")
            print(f"  {variant:8} {peak:>+10.0f} MB {peak / plain_peak:>7.3f}x "
                  f"{common.median_of(rows[variant], 'growth_mb'):>+8.0f} MB {seconds:>7.2f} {seconds / plain_seconds:>7.3f}x")
        stored = common.median_of(rows["collect"], "stored_mb")
        identical = all(row["identical"] for row in rows["replay"])
        diff = max(row["max_abs_diff"] for row in rows["replay"])
        print(f"collect: {stored:.0f} MB of importable graphs for {args.signatures} signatures; replay's outputs "
              f"{'bit-identical to' if identical else f'differ (max abs {diff:.3g}) from'} plain TensorFlow's in every run")


if __name__ == "__main__":
    main()
