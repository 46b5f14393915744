"""What explaining misses costs a miss: the node table every entry keeps, and recording each miss.

    python benchmarks/miss_explain.py [--models mlp,resnet50] [--runs 5] [--index-rows 10000]

In ONE process, per model, alternating so machine noise hits both alike:

- a miss (``GraphCache.compile`` of a graph whose key is new, until its entry is stored) with recording
  on (as shipped: the node table in the header, the nearest entry looked up, one row in ``misses``) and
  off (``explain.report.note_miss`` and ``table_extra`` replaced by no-ops): median wall and CPU time
  (CPU: the whole process, Grappler's threads included);
- the recording's own CPU time, measured directly (this thread): building the node table, and note_miss;
- the node table's size against the entry file's.

Each miss changes one small constant, so the key is new while a same-name entry (the first compile) stays
cached for the nearest-entry lookup; each timed entry is purged afterwards. Then, without TensorFlow's
part, the index lookups a miss makes, on an index of ``--index-rows`` synthetic graph entries: by name,
by graph, the fallback scan, and recording a miss.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _perturbable(graph_def):
    """A small float constant whose value can change each run (a new key, same structure)."""
    from tensorflow.core.framework import types_pb2

    for node in graph_def.node:
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is not None and tensor.dtype == types_pb2.DT_FLOAT and 0 < len(tensor.tensor_content) <= 4096:
            return tensor
    raise SystemExit("no small float constant to perturb")


def time_misses(kind: str, runs: int) -> dict:
    import models

    import graphcache.explain.report as report
    from graphcache import GraphCache
    from graphcache.compile import keys
    from graphcache.compile.graphs import GraphView, Signature
    from graphcache.explain import nodes

    model = models.freeze_keras(kind)
    tensor = _perturbable(model.graph_def)
    original = bytes(tensor.tensor_content)
    shipped = (report.note_miss, report.table_extra)
    off = (lambda *args, **kwargs: None, lambda fp: {})
    results: dict[str, dict[str, list[float]]] = {"on": {"wall": [], "cpu": []}, "off": {"wall": [], "cpu": []}}
    with tempfile.TemporaryDirectory() as root:
        cache = GraphCache(root)
        base = cache.compile(model.graph_def, model.fetches, model.feeds, name=kind)  # stays: the nearest entry
        cache.wait_for_writes()
        entry_size = cache.store.stat(base.key).size
        counter = 0
        for _ in range(runs):
            for mode in ("on", "off"):
                counter += 1
                values = np.frombuffer(original, np.float32) + np.float32(counter * 1e-3)
                tensor.tensor_content = values.tobytes()
                report.note_miss, report.table_extra = shipped if mode == "on" else off
                start, start_cpu = time.perf_counter(), time.process_time()
                compiled = cache.compile(model.graph_def, model.fetches, model.feeds, name=kind)
                cache.wait_for_writes()
                results[mode]["wall"].append(time.perf_counter() - start)
                results[mode]["cpu"].append(time.process_time() - start_cpu)
                assert not compiled.hit
                cache.purge([compiled.key])
        report.note_miss, report.table_extra = shipped
        # the recording's own cost, this thread's CPU time
        view = GraphView(model.graph_def, Signature.create(model.fetches, model.feeds))
        table_cpu, note_cpu = [], []
        for _ in range(max(3, runs)):
            fp = keys.compute(view, None, cache.identity, name=kind)
            start = time.thread_time()
            extra = report.table_extra(fp)
            table_cpu.append(time.thread_time() - start)
            start = time.thread_time()
            report.note_miss(cache, fp, kind, view.signature)
            note_cpu.append(time.thread_time() - start)
        fp_cpu = []
        for _ in range(max(3, runs)):
            start = time.thread_time()
            keys.compute(view, None, cache.identity, name=kind)
            fp_cpu.append(time.thread_time() - start)
    table_bytes = len(json.dumps(extra[nodes.EXTRA_KEY]))
    med = {mode: {k: statistics.median(v) for k, v in r.items()} for mode, r in results.items()}
    return {
        "model": kind, "nodes": extra[nodes.EXTRA_KEY]["nodes"], "entry_bytes": entry_size, "table_bytes": table_bytes,
        "miss_on_wall": med["on"]["wall"], "miss_off_wall": med["off"]["wall"],
        "miss_on_cpu": med["on"]["cpu"], "miss_off_cpu": med["off"]["cpu"],
        "table_cpu": statistics.median(table_cpu), "note_miss_cpu": statistics.median(note_cpu),
        "fingerprint_cpu": statistics.median(fp_cpu), "runs": runs, "raw": results,
    }


def time_index(rows: int) -> dict:
    """The index side of a miss on ``rows`` graph entries (no TensorFlow)."""
    from graphcache.core.index import misses
    from graphcache.core.index.database import CacheIndex, IndexRow

    def parts(i: int) -> dict[str, str]:
        return {p: f"{p[:3]}{i if p == 'graph' else i % 97:029d}" for p in misses.PARTS}  # 32 characters

    with tempfile.TemporaryDirectory() as root:
        index = CacheIndex(root)
        now = time.time()
        for i in range(rows):
            row = IndexRow(f"{i:032x}", f"model{i}", "graph", 1000, now, now, "v", "id", 0.0)
            misses.upsert_entry(index, row, parts(i))
        timings: dict[str, float] = {}
        probe = {"same name": ("model5", parts(rows + 1)), "same graph": ("new", {**parts(rows + 2), "graph": parts(7)["graph"]}),
                 "neither (scan)": ("new", parts(rows + 3))}
        for label, (name, wanted) in probe.items():
            samples = []
            for _ in range(50):
                start = time.perf_counter()
                misses.nearest(index, name, wanted, exclude="f" * 32)
                samples.append(time.perf_counter() - start)
            timings[label] = statistics.median(samples)
        samples = []
        for i in range(200):
            start = time.perf_counter()
            misses.record(index, misses.Miss(now, "m", f"{i:032x}", None, ("graph",)))
            samples.append(time.perf_counter() - start)
        timings["record a miss"] = statistics.median(samples)
        index.close()
    return {"rows": rows, "seconds": timings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet50")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--index-rows", type=int, default=10000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = {"models": [time_misses(kind, args.runs) for kind in args.models.split(",") if kind],
               "index": time_index(args.index_rows)}
    print(f"{'model':10} {'nodes':>6} {'table':>9} {'entry':>12} {'table/entry':>11} | miss wall on/off (s)  "
          f"miss CPU on/off (s)  | table CPU  note_miss CPU  (fingerprint CPU)")
    for m in figures["models"]:
        print(f"{m['model']:10} {m['nodes']:6d} {m['table_bytes']:9d} {m['entry_bytes']:12d} "
              f"{m['table_bytes'] / m['entry_bytes']:10.4%} | {m['miss_on_wall']:8.4f} / {m['miss_off_wall']:8.4f}  "
              f"{m['miss_on_cpu']:8.4f} / {m['miss_off_cpu']:8.4f}  | {m['table_cpu'] * 1e3:7.2f} ms "
              f"{m['note_miss_cpu'] * 1e3:9.2f} ms   ({m['fingerprint_cpu'] * 1e3:.1f} ms)")
    idx = figures["index"]
    print(f"index of {idx['rows']} graph entries: " + ", ".join(
        f"{label} {seconds * 1e3:.3f} ms" for label, seconds in idx["seconds"].items()))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
