"""SavedModel cold start: TensorFlow's SavedModel load vs graphcache.load_saved_model on a hit.

Each measurement is a fresh process (TensorFlow imported before the timer, as in cold_warm.py; graphcache's
own import inside the warm and miss timers, and no graphcache module loaded before them, asserted):

- cold  = ``tf.saved_model.load(dir).signatures["serving_default"]`` + first call (TensorFlow restores the
  variables, traces the signature's function, Grappler compiles it on the first call);
- warm  = ``from graphcache import GraphCache, load_saved_model`` + ``GraphCache(dir)`` + ``load_saved_model(dir)``
  on a cache that holds the alias and the compiled graph
  (hash the SavedModel's files, read the alias and the graph, import) + first call: no SavedModel load,
  no freeze, no compile;
- miss  = ``graphcache.load_saved_model(dir)`` on an empty cache (load + freeze + compile + write) + first call.

The model is Keras ResNet50 (weights=None) saved with ``tf.saved_model.save``, built once under
benchmarks/_work. Prints medians and warm/cold, miss/cold.

    python benchmarks/saved_model_bench.py [--runs 5] [--model resnet50|mobilenetv2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

INPUT_SHAPE = (1, 224, 224, 3)


def saved_model_dir(model: str) -> Path:
    return common.WORK_DIR / "saved_models" / model


def child_build(model: str) -> dict:
    """(child) Build the Keras model with weights=None and save it as a SavedModel."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1234)
    net = {"resnet50": keras.applications.ResNet50, "mobilenetv2": keras.applications.MobileNetV2}[model](
        weights=None)

    @tf.function(input_signature=[tf.TensorSpec(INPUT_SHAPE, tf.float32, name="images")])
    def serve(images):
        return {"probs": net(images, training=False)}

    module = tf.Module()
    module.net = net
    module.serve = serve
    target = saved_model_dir(model)
    tf.saved_model.save(module, str(target), signatures={"serving_default": serve})
    return {"path": str(target)}


def _input():
    import numpy as np

    return np.random.RandomState(0).rand(*INPUT_SHAPE).astype(np.float32)


def child_cold(path: str) -> dict:
    """(child) TensorFlow's own path: load the SavedModel, call the signature once."""
    tf = common.warm_up()
    x = _input()
    start = time.perf_counter()
    fn = tf.saved_model.load(path).signatures["serving_default"]
    loaded = time.perf_counter()
    out = fn(images=tf.constant(x))["probs"].numpy()
    end = time.perf_counter()
    common.assert_graphcache_not_imported("the cold child")
    return {"total": end - start, "load": loaded - start, "first_call": end - loaded, "sum": float(out.sum())}


def child_graphcache(path: str, cache_dir: str) -> dict:
    """(child) graphcache.load_saved_model on ``cache_dir`` (a hit or a miss), call once."""
    common.warm_up()
    x = _input()
    common.assert_graphcache_not_imported("the graphcache child, before its timer")
    start = time.perf_counter()
    from graphcache import GraphCache, load_saved_model  # inside the timer: graphcache's import is its cost

    imported = time.perf_counter()
    cache = GraphCache(cache_dir)
    fn = load_saved_model(path, cache=cache)
    loaded = time.perf_counter()
    out = fn(images=x)["probs"]
    end = time.perf_counter()
    cache.flush()
    return {"total": end - start, "graphcache_import": imported - start, "load": loaded - start,
            "first_call": end - loaded, "hit": fn.hit, "sum": float(out.sum())}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "mobilenetv2"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    path = saved_model_dir(args.model)
    common.ensure_bytecode(lambda message: print(message, file=sys.stderr))
    if not (path / "saved_model.pb").exists():
        print(f"[saved_model] building {args.model} SavedModel under {path} ...", file=sys.stderr)
        common.run_function("saved_model_bench", "child_build", model=args.model)
    rows: dict[str, list[dict]] = {"cold": [], "warm": [], "miss": []}
    work = Path(tempfile.mkdtemp(prefix="gc-sm-", dir=common.WORK_DIR))
    try:
        warm_dir = work / "warm"
        warm_dir.mkdir()
        prime = common.run_function("saved_model_bench", "child_graphcache", path=str(path), cache_dir=str(warm_dir))
        assert not prime["hit"], "the warm cache was expected to start empty"
        for run in range(args.runs):
            miss_dir = work / f"miss{run}"
            miss_dir.mkdir()
            order = ["cold", "warm", "miss"]
            for variant in order[run % 3:] + order[: run % 3]:  # rotate the order: no variant always first
                if variant == "cold":
                    rows["cold"].append(common.run_function("saved_model_bench", "child_cold", path=str(path)))
                else:
                    target = warm_dir if variant == "warm" else miss_dir
                    rows[variant].append(common.run_function("saved_model_bench", "child_graphcache",
                                                             path=str(path), cache_dir=str(target)))
            print(f"[saved_model {args.model} round {run + 1}/{args.runs}] "
                  + "  ".join(f"{v} {rows[v][-1]['total']:.3f}s" for v in rows), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert all(r["hit"] for r in rows["warm"]) and not any(r["hit"] for r in rows["miss"])
    med = {variant: common.medians(values) for variant, values in rows.items()}
    sums = {round(r["sum"], 3) for values in rows.values() for r in values}
    result = {"model": args.model, "runs": args.runs, "medians": med,
              "warm_over_cold": common.ratio(med["warm"]["total"], med["cold"]["total"]),
              "miss_over_cold": common.ratio(med["miss"]["total"], med["cold"]["total"]),
              "outputs_agree": len(sums) == 1, "machine": common.machine_info()}
    print(f"SavedModel cold start, {args.model} (medians of {args.runs} fresh processes, seconds)")
    print("  load: tf.saved_model.load (cold); graphcache's import + GraphCache(dir) + load_saved_model (warm, miss),")
    print("  of which 'gc import' is graphcache's import; TensorFlow's import is outside every timer")
    print(f"  {'variant':8} {'total':>8} {'load':>8} {'gc import':>9} {'1st call':>9}")
    for variant in ("cold", "warm", "miss"):
        m = med[variant]
        gc_import = f"{m['graphcache_import']:9.3f}" if "graphcache_import" in m else f"{'-':>9}"
        print(f"  {variant:8} {m['total']:8.3f} {m['load']:8.3f} {gc_import} {m['first_call']:9.3f}")
    print(f"  warm/cold {result['warm_over_cold']:.2f}x   miss/cold {result['miss_over_cold']:.2f}x   "
          f"outputs agree: {result['outputs_agree']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
