"""TF2 functions' first calls: cold, warm through graphcache, TensorFlow's own file cache, Grappler off.

Workloads (each variant of each run in a FRESH process, medians over ``--runs``):

- ``deep8k``: a tf.function of ~8,000 nodes (a deep stack of slices, concats and arithmetic on an 8x8
  tensor): Grappler takes ~4 s on it, over TensorFlow's 3 s threshold, so TensorFlow's own file cache
  writes it too;
- ``resnet50``: Keras ResNet50 (weights=None), the first ``predict`` (batch 1);
- ``transformer_fit``: a small Keras transformer (2 blocks), the first ``fit`` step (one batch);
- ``saved_model``: ``tf.saved_model.load`` of an exported Keras CNN, then its first ``serve`` call.

Variants:

- ``plain``: TensorFlow alone;
- ``cold`` / ``warm``: ``GraphCache(dir, functions=True)``, an empty dir, then the same dir in a new process;
- ``tf_cold`` / ``tf_warm``: TensorFlow's own file cache (``TF_GRAPH_CACHING=dir``, no graphcache): it
  writes only functions whose optimization took 3 s or more, and keys files by function name and node count;
- ``grappler_off``: TensorFlow alone with ``disable_meta_optimizer`` (what instantiating costs without
  Grappler; the graph that runs is not optimized).

Phases: ``trace`` (Python tracing, deep8k only: ``get_concrete_function``), ``first`` (the first call:
for Keras workloads this includes Keras' own tracing of its step function), ``steady`` (a later call),
``load`` (saved_model: ``tf.saved_model.load``), ``enable`` (opening the GraphCache).

    python benchmarks/functions_bench.py                  # every workload, 3 runs
    python benchmarks/functions_bench.py --quick          # every workload, 1 run (indicative figures)
    python benchmarks/functions_bench.py --workloads deep8k --runs 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

WORKLOADS = ("deep8k", "resnet50", "transformer_fit", "saved_model")
VARIANTS = ("plain", "cold", "warm", "tf_cold", "tf_warm", "grappler_off")
LABELS = {"plain": "plain TF", "cold": "cold, graphcache", "warm": "warm, graphcache", "tf_cold": "cold, TF file cache",
          "tf_warm": "warm, TF file cache", "grappler_off": "Grappler off"}
DEEP_BLOCKS = 570  # -> 7,983 nodes


# -- workloads (run in the child) ---------------------------------------------------------------------------------
def _deep(tf: Any, blocks: int, timings: dict[str, Any]) -> Any:
    @tf.function
    def deep(x):
        y = x
        for _ in range(blocks):
            y = tf.concat([y[:, 1:], y[:, :1]], axis=1) * 0.5 + 0.1
        return tf.reduce_sum(y)

    x = tf.reshape(tf.range(64, dtype=tf.float32) / 64.0, [8, 8])
    start = time.perf_counter()
    concrete = deep.get_concrete_function(x)
    timings["trace"] = time.perf_counter() - start
    timings["nodes"] = len(concrete.function_def.node_def)
    start = time.perf_counter()
    out = concrete(x).numpy()
    timings["first"] = time.perf_counter() - start
    start = time.perf_counter()
    concrete(x).numpy()
    timings["steady"] = time.perf_counter() - start
    return out


def _resnet50(np: Any, timings: dict[str, Any]) -> Any:
    import keras

    keras.utils.set_random_seed(1234)
    model = keras.applications.ResNet50(weights=None)
    x = np.random.RandomState(0).rand(1, 224, 224, 3).astype(np.float32)
    start = time.perf_counter()
    out = model.predict(x, verbose=0)
    timings["first"] = time.perf_counter() - start
    start = time.perf_counter()
    model.predict(x, verbose=0)
    timings["steady"] = time.perf_counter() - start
    return out


def transformer(keras: Any, vocab: int = 1000, seq_len: int = 32, width: int = 64, blocks: int = 2) -> Any:
    """A small transformer classifier (token + position embedding, ``blocks`` encoder blocks)."""
    tokens = keras.Input((seq_len,), dtype="int32")
    h = keras.layers.Embedding(vocab, width)(tokens)
    h = h + keras.layers.Embedding(seq_len, width)(keras.ops.arange(seq_len))
    for _ in range(blocks):
        attended = keras.layers.MultiHeadAttention(num_heads=4, key_dim=width // 4)(h, h)
        h = keras.layers.LayerNormalization()(h + attended)
        dense = keras.layers.Dense(width)(keras.layers.Dense(width * 4, activation="gelu")(h))
        h = keras.layers.LayerNormalization()(h + dense)
    out = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))
    return keras.Model(tokens, out)


def _transformer_fit(np: Any, timings: dict[str, Any]) -> Any:
    import keras

    keras.utils.set_random_seed(1234)
    model = transformer(keras)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.RandomState(0)
    x, y = rng.randint(0, 1000, size=(16, 32)).astype(np.int32), rng.randint(0, 2, size=(16,))
    start = time.perf_counter()
    first = model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    timings["first"] = time.perf_counter() - start
    start = time.perf_counter()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    timings["steady"] = time.perf_counter() - start
    return np.asarray(first.history["loss"] + [float(np.sum(model.get_weights()[-1]))])


def child_export(path: str) -> dict[str, Any]:
    """(child) Export a small Keras CNN as a SavedModel at ``path`` (done once, before the runs)."""
    import keras

    keras.utils.set_random_seed(1234)
    model = keras.Sequential([keras.Input((64, 64, 3))] + [
        layer for _ in range(4) for layer in (keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                                              keras.layers.BatchNormalization())] + [
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    model.export(path, verbose=False)
    return {"path": path}


def _saved_model(tf: Any, np: Any, path: str, timings: dict[str, Any]) -> Any:
    x = np.random.RandomState(0).rand(2, 64, 64, 3).astype(np.float32)
    start = time.perf_counter()
    loaded = tf.saved_model.load(path)
    timings["load"] = time.perf_counter() - start
    start = time.perf_counter()
    out = loaded.serve(x).numpy()
    timings["first"] = time.perf_counter() - start
    start = time.perf_counter()
    loaded.serve(x).numpy()
    timings["steady"] = time.perf_counter() - start
    return out


def child_run(workload: str, variant: str, directory: str, saved_model: str = "", blocks: int = DEEP_BLOCKS
              ) -> dict[str, Any]:
    """(child) One workload under one variant; returns its timings and a sample of its output."""
    if variant in ("tf_cold", "tf_warm"):
        os.environ["TF_GRAPH_CACHING"] = directory
    common.warm_up()
    import numpy as np
    import tensorflow as tf

    timings: dict[str, Any] = {}
    cache = None
    if variant in ("cold", "warm"):
        import graphcache

        start = time.perf_counter()
        cache = graphcache.GraphCache(directory, functions=True)
        timings["enable"] = time.perf_counter() - start
    if variant == "grappler_off":
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    if workload == "deep8k":
        out = _deep(tf, blocks, timings)
    elif workload == "resnet50":
        out = _resnet50(np, timings)
    elif workload == "transformer_fit":
        out = _transformer_fit(np, timings)
    elif workload == "saved_model":
        out = _saved_model(tf, np, saved_model, timings)
    else:
        raise ValueError(f"unknown workload {workload!r}")
    flat = np.asarray(out, dtype=np.float64).ravel()
    timings["sample"] = flat[:32].tolist()
    if cache is not None:
        cache.wait_for_writes()
        stats = cache.stats()
        timings.update(stats.functions)
        timings["entries"] = stats.entries
        timings["entry_bytes"] = stats.bytes
    elif variant.startswith("tf_"):
        files = [p for p in Path(directory).iterdir() if p.is_file()]
        timings["tf_files"] = len(files)
        timings["entry_bytes"] = sum(p.stat().st_size for p in files)
    return timings


# -- the parent ---------------------------------------------------------------------------------------------------
def compare_with_tf(gc_dir: Path, tf_dir: Path) -> str:
    """Whether graphcache's stored function graph is byte-identical to the one TensorFlow wrote itself."""
    code = f"""
import json
from pathlib import Path
import graphcache
from tensorflow.core.framework import optimized_function_graph_pb2 as ofg
cache = graphcache.GraphCache({str(gc_dir)!r})
ours = [r for r in cache.entries() if r.kind == "tf_function"]
files = [p for p in Path({str(tf_dir)!r}).iterdir() if p.is_file()]
if len(ours) != 1 or len(files) != 1:
    print(json.dumps({{"result": f"{{len(ours)}} graphcache entries, {{len(files)}} TensorFlow files: not compared"}}))
else:
    _, payload = cache.read_entry(ours[0].key)
    mine = ofg.OptimizedFunctionGraph.FromString(bytes(payload))
    theirs = ofg.OptimizedFunctionGraph.FromString(files[0].read_bytes())
    same_graph = mine.function_graph.SerializeToString(deterministic=True) == \\
        theirs.function_graph.SerializeToString(deterministic=True)
    fields = [f for f in ("node_name_to_control_ret", "ret_types", "num_return_nodes", "source")
              if getattr(mine, f) != getattr(theirs, f)]
    print(json.dumps({{"result": f"function_graph identical: {{same_graph}}; other fields differing: {{fields or 'none'}}"
                      f" (besides name and optimization_time_usecs)"}}))
"""
    env = common.child_env({"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
    try:
        return common.run_snippet(code, env=env)["result"]
    except common.ChildError as exc:
        return f"comparison failed: {exc}"


def run_workload(workload: str, runs: int, work: Path, saved_model: str, blocks: int, log: Any
                 ) -> tuple[dict[str, list[dict]], str]:
    results: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    env = common.child_env({"TF_GRAPH_CACHING": None, "TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
    comparison = ""
    for run in range(runs):
        gc_dir, tf_dir = work / f"{workload}-gc-{run}", work / f"{workload}-tf-{run}"
        for path in (gc_dir, tf_dir):
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        for variant in VARIANTS:
            directory = gc_dir if variant in ("cold", "warm") else tf_dir
            result = common.run_function("functions_bench", "child_run", env=env, workload=workload,
                                         variant=variant, directory=str(directory), saved_model=saved_model,
                                         blocks=blocks)
            results[variant].append(result)
            extra = "".join(f" {k} {result[k]:.2f}s" for k in ("trace", "load", "enable") if k in result)
            log(f"  {workload} run {run + 1}/{runs} {LABELS[variant]:<20} first {result['first']:6.2f}s"
                f" steady {result['steady']:6.3f}s{extra}"
                + (f" hits {result['function_hits']} compiles {result['function_compiles']}"
                   if "function_hits" in result else "")
                + (f" TF files {result['tf_files']}" if "tf_files" in result else ""))
        if run == 0 and workload == "deep8k":
            comparison = compare_with_tf(gc_dir, tf_dir)
    return results, comparison


def summarize(workload: str, results: dict[str, list[dict]], comparison: str) -> dict[str, Any]:
    med = {variant: common.medians(rows) for variant, rows in results.items() if rows}
    reference = results["plain"][0]["sample"]
    scale = 1e-4 * (1 + max(map(abs, reference)))
    equal = {variant: all(max((abs(a - b) for a, b in zip(row["sample"], reference, strict=True)), default=0.0)
                          <= scale for row in rows)
             for variant, rows in results.items() if variant != "grappler_off"}
    return {"workload": workload, "medians": med, "outputs_equal_plain": equal, "tf_comparison": comparison}


def table(summaries: list[dict[str, Any]]) -> str:
    lines = [f"{'workload':<16} {'variant':<20} {'first call':>10} {'vs plain':>8} {'steady':>8} {'trace':>8}"
             f" {'load':>8} {'enable':>8} {'hits':>5} {'stored':>7}"]
    for summary in summaries:
        med = summary["medians"]
        plain = med["plain"].get("first")
        for variant in VARIANTS:
            m = med.get(variant, {})
            stored = m.get("entry_bytes")
            lines.append(f"{summary['workload']:<16} {LABELS[variant]:<20} {common.fmt_seconds(m.get('first'), 10)}"
                         f" {common.fmt_ratio(common.ratio(m.get('first'), plain)):>8}"
                         f" {common.fmt_seconds(m.get('steady'), 8)} {common.fmt_seconds(m.get('trace'), 8)}"
                         f" {common.fmt_seconds(m.get('load'), 8)} {common.fmt_seconds(m.get('enable'), 8)}"
                         f" {int(m['function_hits']) if 'function_hits' in m else '':>5}"
                         f" {f'{stored / 2**20:.1f}M' if stored else '':>7}")
        warm, cold, tf_warm, off = (med.get(v, {}).get("first") for v in ("warm", "plain", "tf_warm", "grappler_off"))
        saved = None if cold is None or warm is None else cold - warm
        lines.append(f"{'':<16} saved by graphcache: {common.fmt_seconds(saved, 0).strip()}"
                     f" of the first call; left: the warm first call ({common.fmt_seconds(warm, 0).strip()}: reading"
                     f" the graph, partitioning, creating kernels, running)"
                     + (f" + tracing ({common.fmt_seconds(med['plain'].get('trace'), 0).strip()})"
                        if med["plain"].get("trace") else " (Keras' tracing of its step function included)"))
        lines.append(f"{'':<16} warm / TF file cache warm = {common.fmt_ratio(common.ratio(warm, tf_warm))},"
                     f" warm / Grappler off = {common.fmt_ratio(common.ratio(warm, off))};"
                     f" outputs equal to plain TF: {summary['outputs_equal_plain']}")
        if summary["tf_comparison"]:
            lines.append(f"{'':<16} graphcache's entry vs TensorFlow's own file: {summary['tf_comparison']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}")
    parser.add_argument("--runs", type=int, default=None, help="fresh-process runs per variant (default 3; 1 quick)")
    parser.add_argument("--quick", action="store_true", help="1 run of every workload (indicative figures)")
    parser.add_argument("--blocks", type=int, default=DEEP_BLOCKS, help="deep8k's depth (570 blocks = 7,983 nodes)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    work = Path(tempfile.mkdtemp(prefix="functions-bench-"))
    started = time.perf_counter()
    summaries, raw = [], {}
    try:
        saved_model = ""
        if "saved_model" in workloads:
            saved_model = str(work / "exported")
            common.run_function("functions_bench", "child_export", env=common.child_env(
                {"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",)), path=saved_model)
        for workload in workloads:
            log(f"{workload}: {runs} run(s) x {len(VARIANTS)} fresh processes")
            raw[workload], comparison = run_workload(workload, runs, work, saved_model, args.blocks, log)
            summaries.append(summarize(workload, raw[workload], comparison))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"TF2 function first calls, fresh processes, medians of {runs} run(s); {common.describe_machine()}")
    print(table(summaries))
    print(f"(total {time.perf_counter() - started:.0f}s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": common.machine_info(), "runs": runs, "summaries": summaries,
                                         "raw": raw}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
