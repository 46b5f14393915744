"""TF2 functions' first calls: cold, warm through graphcache, TensorFlow's own file cache, Grappler off.

Workloads (each variant of each run in a FRESH process, medians over ``--runs``):

- ``deep8k``: a tf.function of ~8,000 nodes (a deep stack of slices, concats and arithmetic on an 8x8
  tensor). Grappler takes about 1 s of CPU on it (4 s measured on a loaded 2-core machine), so whether
  TensorFlow's own file cache writes it (3 s threshold) depends on the machine: when it wrote nothing,
  its warm run is given the file it would have written (graphcache's entry with the function's name;
  byte-identical to TensorFlow's when TensorFlow does write, which the run checks), so the comparison
  always times TensorFlow's read path;
- ``resnet50``: Keras ResNet50 (weights=None), the first ``predict`` (batch 1);
- ``transformer_fit``: a small Keras transformer (2 blocks), the first ``fit`` step (one batch);
- ``saved_model``: ``tf.saved_model.load`` of an exported Keras CNN, then its first ``serve`` call;
- ``sizes`` (not in the default set): where caching stops paying. For functions of 5 to ~1,400 nodes, the
  median first call over 12 distinct functions of each size, in one process per variant (``plain``, ``cold``,
  ``warm`` only): a hit costs a lookup, a payload check and a file, a miss adds the canonical key and the
  graph collection to the compile.

Variants:

- ``plain``: TensorFlow alone;
- ``cold`` / ``warm``: ``GraphCache(dir, functions=True)``, an empty dir, then the same dir in a new process;
- ``tf_cold`` / ``tf_warm`` (deep8k only): TensorFlow's own file cache (``TF_GRAPH_CACHING=dir``, no
  graphcache): it writes only functions whose optimization took 3 s or more, and keys files by function
  name and node count;
- ``grappler_off``: TensorFlow alone with ``disable_meta_optimizer`` (what instantiating costs without
  Grappler; the graph that runs is not optimized).

Phases: ``trace`` (Python tracing, deep8k only: ``get_concrete_function``), ``first`` (the first call:
for Keras workloads this includes Keras' own tracing of its step functions), ``fn calls`` (the first calls
of the workload's functions, timed at ``AtomicFunction.call_flat``: instantiation plus the first run; what
graphcache can shorten), ``steady`` (a later call), ``load`` (``tf.saved_model.load``), ``enable``
(``import graphcache`` + opening the GraphCache: graphcache's import is counted there, and no graphcache
module is loaded before it, asserted; TensorFlow's import is outside every timer).

    python benchmarks/functions_bench.py                  # every workload, 3 runs
    python benchmarks/functions_bench.py --quick          # every workload, 1 run (indicative figures)
    python benchmarks/functions_bench.py --workloads deep8k --runs 5 --json out.json
    python benchmarks/functions_bench.py --workloads sizes
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
def _deep(tf: Any, blocks: int, timings: dict[str, Any], steady: bool = True) -> Any:
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
    if steady:
        start = time.perf_counter()
        concrete(x).numpy()
        timings["steady"] = time.perf_counter() - start
    return out


def _resnet50(np: Any, timings: dict[str, Any], steady: bool = True) -> Any:
    import keras

    keras.utils.set_random_seed(1234)
    model = keras.applications.ResNet50(weights=None)
    x = np.random.RandomState(0).rand(1, 224, 224, 3).astype(np.float32)
    start = time.perf_counter()
    out = model.predict(x, verbose=0)
    timings["first"] = time.perf_counter() - start
    if steady:
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


def _transformer_fit(np: Any, timings: dict[str, Any], steady: bool = True) -> Any:
    import keras

    keras.utils.set_random_seed(1234)
    model = transformer(keras)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.RandomState(0)
    x, y = rng.randint(0, 1000, size=(16, 32)).astype(np.int32), rng.randint(0, 2, size=(16,))
    start = time.perf_counter()
    first = model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    timings["first"] = time.perf_counter() - start
    if steady:
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


def _saved_model(tf: Any, np: Any, path: str, timings: dict[str, Any], steady: bool = True) -> Any:
    x = np.random.RandomState(0).rand(2, 64, 64, 3).astype(np.float32)
    start = time.perf_counter()
    loaded = tf.saved_model.load(path)
    timings["load"] = time.perf_counter() - start
    start = time.perf_counter()
    out = loaded.serve(x).numpy()
    timings["first"] = time.perf_counter() - start
    if steady:
        start = time.perf_counter()
        loaded.serve(x).numpy()
        timings["steady"] = time.perf_counter() - start
    return out


def keras_application(name: str, step: str, np: Any) -> Any:
    """The first ``predict`` or ``evaluate`` of keras.applications' ``name`` (weights=None, 96x96 inputs, 10
    classes, batch 8), as a new user's first call of a model: its output."""
    import keras

    keras.utils.set_random_seed(1234)
    model = getattr(keras.applications, name)(weights=None, input_shape=(96, 96, 3), classes=10)
    x = np.random.RandomState(0).rand(8, 96, 96, 3).astype("float32")
    if step == "predict":
        return model.predict(x, verbose=0)
    model.compile(loss="categorical_crossentropy", metrics=["accuracy"])
    return model.evaluate(x, np.eye(10, dtype="float32")[np.arange(8) % 10], verbose=0)


def call_workload(workload: str, tf: Any, np: Any, timings: dict[str, Any], *, saved_model: str = "",
                 blocks: int = DEEP_BLOCKS, steady: bool = True) -> Any:
    """Run ``workload`` (WORKLOADS, or ``keras:<application>:predict|evaluate``) up to its first result, and a
    second (steady) call unless ``steady`` is False (not for keras: ones); its timings go to ``timings``.
    Returns its output."""
    if workload.startswith("keras:"):
        _, name, step = workload.split(":")
        return keras_application(name, step, np)
    if workload == "deep8k":
        return _deep(tf, blocks, timings, steady)
    if workload == "resnet50":
        return _resnet50(np, timings, steady)
    if workload == "transformer_fit":
        return _transformer_fit(np, timings, steady)
    if workload == "saved_model":
        return _saved_model(tf, np, saved_model, timings, steady)
    raise ValueError(f"unknown workload {workload!r}")


SIZES = (0, 1, 3, 10, 30, 100)  # blocks of 14 nodes: 5 to 1,405 nodes
PER_SIZE = 12


def child_sizes(variant: str, directory: str) -> dict[str, Any]:
    """(child) The median first call (ms) of PER_SIZE distinct functions per size, by node count."""
    import statistics

    common.warm_up()
    import tensorflow as tf

    cache = None
    if variant in ("cold", "warm"):
        import graphcache

        cache = graphcache.GraphCache(directory, functions=True)

    def make(blocks: int, k: int) -> Any:
        @tf.function
        def f(x):
            y = x
            for _ in range(blocks):
                y = tf.concat([y[:, 1:], y[:, :1]], axis=1) * 0.5 + 0.1
            return tf.reduce_sum(y) + float(k)
        return f

    x = tf.ones([8, 8])
    tf.function(lambda a: a + 1)(x)  # the process's first function call pays one-time costs: not measured
    medians: dict[str, Any] = {}
    for blocks in SIZES:
        times = []
        for k in range(PER_SIZE):  # k changes a constant: distinct functions, distinct entries
            concrete = make(blocks, k).get_concrete_function(x)
            start = time.perf_counter()
            concrete(x).numpy()
            times.append(time.perf_counter() - start)
        medians[str(len(concrete.function_def.node_def))] = statistics.median(times) * 1000
    if cache is not None:
        cache.wait_for_writes()
    return medians


def run_sizes(runs: int, work: Path, log: Any) -> str:
    env = common.child_env({"TF_GRAPH_CACHING": None, "TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
    rows: dict[str, list[dict]] = {"plain": [], "cold": [], "warm": []}
    for run in range(runs):
        directory = work / f"sizes-{run}"
        directory.mkdir(parents=True)
        for variant in rows:
            rows[variant].append(common.run_function("functions_bench", "child_sizes", env=env, variant=variant,
                                                     directory=str(directory)))
            log(f"  sizes run {run + 1}/{runs} {variant}: " + ", ".join(
                f"{n} nodes {ms:.1f}ms" for n, ms in rows[variant][-1].items()))
    med = {variant: common.medians(rows[variant]) for variant in rows}
    lines = [f"small functions: median first call (ms) of {PER_SIZE} distinct functions per size, medians of {runs}"
             " run(s)", f"{'nodes':>7} {'plain TF':>9} {'cold (miss)':>12} {'warm (hit)':>11} {'miss extra':>11}"
             f" {'hit saves':>10} {'pays back after':>16}"]
    for nodes in sorted(med["plain"], key=int):
        plain, cold, warm = (med[v].get(nodes) for v in ("plain", "cold", "warm"))
        extra, saves = cold - plain, plain - warm
        payback = f"{max(1.0, extra / saves):.1f} runs" if saves > 0 else "never"
        lines.append(f"{nodes:>7} {plain:>9.1f} {cold:>12.1f} {warm:>11.1f} {extra:>+11.1f} {saves:>+10.1f} {payback:>16}")
    return "\n".join(lines)


def _time_first_calls() -> dict[str, float]:
    """Time every function's first eager call (AtomicFunction.call_flat, graphcache's hook included): the
    instantiation (optimizing, or reading the cached graph) plus the first run. The rest of a workload's
    first call is tracing and Python."""
    from tensorflow.python.eager import context
    from tensorflow.python.eager.polymorphic_function import atomic_function

    original = atomic_function.AtomicFunction.call_flat
    seen: set[bytes] = set()
    totals = {"seconds": 0.0, "count": 0}

    def call_flat(atomic: Any, *args: Any) -> Any:
        if atomic.name in seen or not context.executing_eagerly():
            return original(atomic, *args)
        seen.add(atomic.name)
        start = time.perf_counter()
        try:
            return original(atomic, *args)
        finally:
            totals["seconds"] += time.perf_counter() - start
            totals["count"] += 1

    atomic_function.AtomicFunction.call_flat = call_flat
    return totals


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
        common.assert_graphcache_not_imported(f"the {variant} child, before its timer")
        start = time.perf_counter()
        import graphcache  # inside the timer: graphcache's import is its cost to the user

        cache = graphcache.GraphCache(directory, functions=True)
        timings["enable"] = time.perf_counter() - start
    if variant == "grappler_off":
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    first_calls = _time_first_calls()  # wraps graphcache's hook too: its cost is counted
    out = call_workload(workload, tf, np, timings, saved_model=saved_model, blocks=blocks)
    timings["functions_first"] = first_calls["seconds"]
    timings["functions"] = first_calls["count"]
    flat = np.asarray(out, dtype=np.float64).ravel()
    timings["sample"] = flat[:32].tolist()
    if cache is not None:
        cache.wait_for_writes()
        stats = cache.stats()
        timings.update(stats.functions)
        timings["stored_bytes"] = stats.bytes
    elif variant.startswith("tf_"):
        files = [p for p in Path(directory).iterdir() if p.is_file()]
        timings["tf_files"] = len(files)
        timings["stored_bytes"] = sum(p.stat().st_size for p in files)
    return timings


# -- the parent ---------------------------------------------------------------------------------------------------
_ENTRY_TOOL = """
import json, sys
from pathlib import Path
import graphcache
from graphcache.functions import optimized
from tensorflow.core.framework import optimized_function_graph_pb2 as ofg
cache = graphcache.GraphCache(sys.argv[1])
tf_dir = Path(sys.argv[2])
(row,) = [r for r in cache.entries() if r.kind == "tf_function"]
header, payload = cache.read_entry(row.key)
files = [p for p in tf_dir.iterdir() if p.is_file()]
if sys.argv[3] == "place":  # TensorFlow wrote nothing: give its warm run the file it would have written
    name = optimized.tf_file_name(header.name, header.extra["nodes"])
    (tf_dir / name).write_bytes(optimized.tf_file_bytes(header.name, payload))
    print(json.dumps({"result": name}))
else:
    mine = ofg.OptimizedFunctionGraph.FromString(bytes(payload))
    theirs = ofg.OptimizedFunctionGraph.FromString(files[0].read_bytes())
    same = mine.function_graph.SerializeToString(deterministic=True) == \\
        theirs.function_graph.SerializeToString(deterministic=True)
    fields = [f for f in ("node_name_to_control_ret", "ret_types", "num_return_nodes", "source")
              if getattr(mine, f) != getattr(theirs, f)]
    print(json.dumps({"result": f"function_graph identical: {same}; other fields differing: {fields or 'none'}"
                               " (name and optimization_time_usecs aside)"}))
"""


def entry_tool(action: str, gc_dir: Path, tf_dir: Path) -> str:
    """Compare graphcache's entry with the file TensorFlow wrote, or place that file when it wrote none."""
    env = common.child_env({"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
    try:
        return common.run_python(["-c", _ENTRY_TOOL, str(gc_dir), str(tf_dir), action], env=env)["result"]
    except common.ChildError as exc:
        return f"{action} failed: {exc}"


def variants_of(workload: str) -> tuple[str, ...]:
    """TensorFlow's own file cache writes only optimizations over 3 s: run it on the deep function only."""
    return VARIANTS if workload == "deep8k" else ("plain", "cold", "warm", "grappler_off")


def run_workload(workload: str, runs: int, work: Path, saved_model: str, blocks: int, log: Any
                 ) -> tuple[dict[str, list[dict]], list[str]]:
    results: dict[str, list[dict]] = {variant: [] for variant in variants_of(workload)}
    env = common.child_env({"TF_GRAPH_CACHING": None, "TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",))
    notes: list[str] = []
    for run in range(runs):
        gc_dir, tf_dir = work / f"{workload}-gc-{run}", work / f"{workload}-tf-{run}"
        for path in (gc_dir, tf_dir):
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        for variant in results:
            if variant == "tf_warm":
                if results["tf_cold"][-1]["tf_files"]:
                    if run == 0:
                        notes.append("graphcache's entry vs the file TensorFlow wrote: "
                                     + entry_tool("compare", gc_dir, tf_dir))
                else:
                    placed = entry_tool("place", gc_dir, tf_dir)
                    notes.append(f"run {run + 1}: TensorFlow wrote no file (its optimization took under its 3 s"
                                 f" threshold); its warm run read the file it would have written ({placed}: the"
                                 " stored proto with its name), so 'warm, TF file cache' times TensorFlow's read path")
            directory = gc_dir if variant in ("cold", "warm") else tf_dir
            result = common.run_function("functions_bench", "child_run", env=env, workload=workload,
                                         variant=variant, directory=str(directory), saved_model=saved_model,
                                         blocks=blocks)
            results[variant].append(result)
            extra = "".join(f" {k} {result[k]:.2f}s" for k in ("trace", "load", "enable") if k in result)
            log(f"  {workload} run {run + 1}/{runs} {LABELS[variant]:<20} first {result['first']:6.2f}s"
                f" (functions' first calls {result['functions_first']:6.2f}s, {result['functions']})"
                f" steady {result['steady']:6.3f}s{extra}"
                + (f" hits {result['function_hits']} compiles {result['function_compiles']}"
                   if "function_hits" in result else "")
                + (f" TF files {result['tf_files']}" if "tf_files" in result else ""))
    return results, notes


def summarize(workload: str, results: dict[str, list[dict]], notes: list[str]) -> dict[str, Any]:
    med = {variant: common.medians(rows) for variant, rows in results.items() if rows}
    reference = results["plain"][0]["sample"]
    scale = 1e-4 * (1 + max(map(abs, reference)))
    equal = {variant: all(max((abs(a - b) for a, b in zip(row["sample"], reference, strict=True)), default=0.0)
                          <= scale for row in rows)
             for variant, rows in results.items() if variant not in ("plain", "grappler_off")}
    return {"workload": workload, "medians": med, "outputs_equal_plain": equal, "notes": notes}


def _s(value: float | None) -> str:
    return common.fmt_seconds(value, 0).strip()


def table(summaries: list[dict[str, Any]]) -> str:
    lines = [f"{'workload':<16} {'variant':<20} {'first call':>10} {'= fn calls':>10} {'+ rest':>8} {'vs plain':>8}"
             f" {'steady':>8} {'trace':>8} {'load':>8} {'enable':>8} {'hits':>5} {'stored':>8}"]
    for summary in summaries:
        med = summary["medians"]
        plain = med["plain"].get("functions_first")
        for variant in VARIANTS:
            if variant not in med:
                continue
            m = med[variant]
            rest = None if m.get("first") is None else m["first"] - m.get("functions_first", 0.0)
            stored = m.get("stored_bytes")
            lines.append(f"{summary['workload']:<16} {LABELS[variant]:<20} {common.fmt_seconds(m.get('first'), 10)}"
                         f" {common.fmt_seconds(m.get('functions_first'), 10)} {common.fmt_seconds(rest, 8)}"
                         f" {common.fmt_ratio(common.ratio(m.get('functions_first'), plain)):>8}"
                         f" {common.fmt_seconds(m.get('steady'), 8)} {common.fmt_seconds(m.get('trace'), 8)}"
                         f" {common.fmt_seconds(m.get('load'), 8)} {common.fmt_seconds(m.get('enable'), 8)}"
                         f" {int(m['function_hits']) if 'function_hits' in m else '':>5}"
                         f" {f'{stored / 1024:.0f}KiB' if stored else '':>8}")
        warm, cold = med["warm"].get("functions_first"), plain
        saved = None if cold is None or warm is None else cold - warm
        trace = med["plain"].get("trace")
        rest = med["plain"]["first"] - (cold or 0.0)
        lines.append(f"{'':<16} saved: {_s(saved)} of {_s(cold)} in {int(med['plain'].get('functions', 0))} function"
                     f" first call(s); left: those calls warm ({_s(warm)}: reading the graph, partitioning, kernels,"
                     f" the first run)" + (f", tracing ({_s(trace)})" if trace else "")
                     + (f", the rest of the first call ({_s(rest)}: Keras' tracing and Python)" if rest > 0.05 else ""))
        ratios = [f"warm / Grappler off = {common.fmt_ratio(common.ratio(warm, med['grappler_off'].get('functions_first')))}"]
        if "tf_warm" in med:
            ratios.insert(0, f"warm / TF file cache warm = "
                             f"{common.fmt_ratio(common.ratio(warm, med['tf_warm'].get('functions_first')))}")
        lines.append(f"{'':<16} {', '.join(ratios)}; outputs equal to plain TF: {summary['outputs_equal_plain']}")
        for note in summary["notes"]:
            lines.append(f"{'':<16} {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}, sizes")
    parser.add_argument("--runs", type=int, default=None, help="fresh-process runs per variant (default 3; 1 quick)")
    parser.add_argument("--quick", action="store_true", help="1 run of every workload (indicative figures)")
    parser.add_argument("--blocks", type=int, default=DEEP_BLOCKS, help="deep8k's depth (570 blocks = 7,983 nodes)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    common.ensure_bytecode(log)
    work = Path(tempfile.mkdtemp(prefix="functions-bench-"))
    started = time.perf_counter()
    summaries, raw, sizes = [], {}, ""
    try:
        if "sizes" in workloads:
            log(f"sizes: {runs} run(s) x 3 fresh processes")
            sizes = run_sizes(runs, work, log)
            workloads = [w for w in workloads if w != "sizes"]
        saved_model = ""
        if "saved_model" in workloads:
            saved_model = str(work / "exported")
            common.run_function("functions_bench", "child_export", env=common.child_env(
                {"TF_CPP_MIN_LOG_LEVEL": "3"}, drop_prefixes=("GRAPHCACHE_",)), path=saved_model)
        for workload in workloads:
            log(f"{workload}: {runs} run(s) x {len(variants_of(workload))} fresh processes")
            raw[workload], notes = run_workload(workload, runs, work, saved_model, args.blocks, log)
            summaries.append(summarize(workload, raw[workload], notes))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"TF2 function first calls, fresh processes, medians of {runs} run(s); {common.describe_machine()}")
    print("fn calls: the first calls of the workload's functions (instantiation, i.e. optimizing or reading the"
          " cached graph, plus the first run); vs plain: fn calls against plain TensorFlow's")
    if summaries:
        print(table(summaries))
    if sizes:
        print(sizes)
    print(f"(total {time.perf_counter() - started:.0f}s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": common.machine_info(), "runs": runs, "summaries": summaries,
                                         "sizes": sizes, "raw": raw}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
