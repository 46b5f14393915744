"""XLA first-call latency: cold, warm through graphcache, warm through TensorFlow's own persistent cache.

For each model (a BERT-base-sized encoder from benchmarks.models.bert_encoder, and Keras ResNet50), called
through ``tf.function(jit_compile=True)``, every variant runs in a FRESH process (TensorFlow reads its XLA
flags once per process; a warm process must not inherit the cold one's in-memory caches):

- ``cold``: graphcache manages the XLA cache (``GraphCache`` + ``enable_xla``), empty cache dir: the first
  call traces, XLA-compiles and persists; the executables are then stored as entries (``xla.sync``, timed
  on its own);
- ``warm graphcache``: the same cache dir, a new process: ``enable_xla`` verifies the directory against the
  entries (timed on its own), then the first call loads the executables;
- ``cold TF`` / ``warm TF``: the same two steps with plain ``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory``
  (no graphcache at all: no checks, no entries).

"first call" is the wall time of the first call, measured after the model is built, in two parts: "trace"
(Python tracing, ``get_concrete_function``: the same in every variant) and "XLA call" (XLA compile or load,
then run: what a persistent cache can save). "steady" is a later call. "enable" is ``import graphcache`` +
``GraphCache(dir)`` + ``enable_xla`` (graphcache's import counted there; nothing of graphcache is loaded
before it, asserted). Medians over ``--runs`` (each run uses new, empty directories).

    python benchmarks/xla_bench.py                 # BERT-base (12 layers) and ResNet50, 3 runs
    python benchmarks/xla_bench.py --quick         # BERT with 2 layers and ResNet50, 1 run (~3 min on 2 cores)
    python benchmarks/xla_bench.py --models bert --layers 4 --runs 5 --json out.json
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

VARIANTS = ("cold", "warm_graphcache", "cold_tf", "warm_tf")
LABELS = {"cold": "cold (graphcache)", "warm_graphcache": "warm, graphcache", "cold_tf": "cold (plain TF)",
          "warm_tf": "warm, TF's own dir"}


# -- the child ----------------------------------------------------------------------------------------------------
def child_run(model: str, mode: str, directory: str, layers: int = 12, seq_len: int = 128, batch: int = 1
              ) -> dict[str, Any]:
    """(child) Build ``model``, call it under jit_compile twice; ``mode`` is ``graphcache`` or ``tf``."""
    timings: dict[str, Any] = {}
    start = time.perf_counter()
    if mode == "tf":
        os.environ["TF_XLA_FLAGS"] = f"--tf_xla_persistent_cache_directory={directory}"
    import numpy as np
    import tensorflow as tf

    timings["import_tf"] = time.perf_counter() - start
    xc = None
    if mode == "graphcache":
        common.assert_graphcache_not_imported("the graphcache child, before its enable timer")
        start = time.perf_counter()
        import graphcache  # inside the enable timer: graphcache's import is its cost to the user

        cache = graphcache.GraphCache(directory)
        xc = graphcache.enable_xla(cache)
        timings["enable"] = time.perf_counter() - start
        if xc is None:
            raise RuntimeError("enable_xla did not bind TensorFlow")
        timings["verified_files"] = xc.last_report.verified
    import keras

    start = time.perf_counter()
    keras.utils.set_random_seed(1234)
    if model == "bert":
        from models import bert_encoder

        net = bert_encoder(layers=layers, seq_len=seq_len)
        x = np.random.RandomState(0).randint(0, 30522, size=(batch, seq_len)).astype(np.int32)
    elif model == "resnet50":
        net = keras.applications.ResNet50(weights=None)
        x = np.random.RandomState(0).rand(batch, 224, 224, 3).astype(np.float32)
    else:
        raise ValueError(f"unknown model {model!r}")
    fn = tf.function(lambda inputs: net(inputs, training=False), jit_compile=True)
    timings["build"] = time.perf_counter() - start

    start = time.perf_counter()
    fn.get_concrete_function(x)  # Python tracing: the same work in every variant
    timings["trace"] = time.perf_counter() - start
    start = time.perf_counter()
    out = fn(x)  # XLA: compile (cold) or load (warm), then run
    y = out.numpy()
    timings["xla_first_call"] = time.perf_counter() - start
    timings["device"] = out.device.rpartition("device:")[2] or out.device  # e.g. CPU:0 or GPU:0
    timings["first_call"] = timings["trace"] + timings["xla_first_call"]
    start = time.perf_counter()
    fn(x).numpy()
    timings["steady"] = time.perf_counter() - start
    if xc is not None:
        from graphcache import xla

        start = time.perf_counter()
        report = xla.sync(cache)
        timings["sync"] = time.perf_counter() - start
        timings["ingested"] = report.ingested if report else 0
    files = [p for p in Path(xc.directory if xc else directory).glob("*.pb")]
    timings["xla_files"] = len(files)
    timings["xla_bytes"] = sum(p.stat().st_size for p in files)
    timings["checksum"] = float(np.asarray(y, dtype=np.float64).sum())
    timings["sample"] = np.asarray(y).ravel()[:64].astype(float).tolist()
    return timings


# -- the parent ---------------------------------------------------------------------------------------------------
def run_model(model: str, runs: int, work: Path, layers: int, seq_len: int, log: Any) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    env = common.child_env({"TF_XLA_FLAGS": None, "GRAPHCACHE_XLA": None, "TF_CPP_MIN_LOG_LEVEL": "3"},
                           drop_prefixes=("GRAPHCACHE_",))
    for run in range(runs):
        gc_dir, tf_dir = work / f"{model}-gc-{run}", work / f"{model}-tf-{run}"
        for path in (gc_dir, tf_dir):
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        for variant, mode, directory in (("cold", "graphcache", gc_dir), ("warm_graphcache", "graphcache", gc_dir),
                                         ("cold_tf", "tf", tf_dir), ("warm_tf", "tf", tf_dir)):
            result = common.run_function("xla_bench", "child_run", env=env, model=model, mode=mode,
                                         directory=str(directory), layers=layers, seq_len=seq_len)
            results[variant].append(result)
            log(f"  {model} run {run + 1}/{runs} {LABELS[variant]:<20} trace {result['trace']:6.2f}s"
                f" + XLA call {result['xla_first_call']:6.2f}s (enable {result.get('enable', 0):.3f}s,"
                f" sync {result.get('sync', 0):.3f}s, "
                f"{result['xla_files']} files, {result['xla_bytes'] / 2**20:.1f} MiB)")
    return results


def summarize(model: str, results: dict[str, list[dict]]) -> dict[str, Any]:
    med = {variant: common.medians(rows) for variant, rows in results.items()}
    reference = results["cold"][0]["sample"]
    equal = all(
        max(abs(a - b) for a, b in zip(row["sample"], reference, strict=True)) <= 1e-4 * (1 + max(map(abs, reference)))
        for rows in results.values() for row in rows)
    new_in_warm = [row["ingested"] for row in results["warm_graphcache"]]
    devices = sorted({row.get("device", "?") for rows in results.values() for row in rows})
    return {"model": model, "medians": med, "outputs_equal": equal, "warm_graphcache_new_entries": new_in_warm,
            "devices": devices}


def table(summaries: list[dict[str, Any]]) -> str:
    lines = [f"{'model':<12} {'variant':<20} {'first call':>10} {'= trace':>8} {'+ XLA call':>10} {'vs cold':>8}"
             f" {'steady':>8} {'enable':>8} {'sync':>8}"]
    for summary in summaries:
        med = summary["medians"]
        cold = med["cold"].get("xla_first_call")
        for variant in VARIANTS:
            m = med[variant]
            lines.append(f"{summary['model']:<12} {LABELS[variant]:<20} {common.fmt_seconds(m.get('first_call'), 10)}"
                         f" {common.fmt_seconds(m.get('trace'), 8)} {common.fmt_seconds(m.get('xla_first_call'), 10)}"
                         f" {common.fmt_ratio(common.ratio(m.get('xla_first_call'), cold)):>8}"
                         f" {common.fmt_seconds(m.get('steady'), 8)} {common.fmt_seconds(m.get('enable'), 8)}"
                         f" {common.fmt_seconds(m.get('sync'), 8)}")
        m = med["cold"]
        lines.append(f"{'':<12} executables: {int(m.get('xla_files', 0))} files, {m.get('xla_bytes', 0) / 2**20:.1f} MiB;"
                     f" outputs equal across variants: {summary['outputs_equal']};"
                     f" new entries in warm graphcache runs: {summary['warm_graphcache_new_entries']};"
                     f" ran on: {', '.join(summary.get('devices', []))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bert,resnet50", help="comma-separated: bert, resnet50")
    parser.add_argument("--layers", type=int, default=None, help="BERT encoder layers (default 12; 2 with --quick)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--runs", type=int, default=None, help="fresh-process runs per variant (default 3; 1 quick)")
    parser.add_argument("--quick", action="store_true", help="BERT with 2 layers, 1 run (~3 minutes on 2 cores)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the cache dirs (printed)")
    args = parser.parse_args(argv)
    layers = args.layers if args.layers is not None else (2 if args.quick else 12)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    models = [m.strip() for m in args.models.split(",") if m.strip()]

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    common.ensure_bytecode(log)
    work = Path(tempfile.mkdtemp(prefix="xla-bench-"))
    started = time.perf_counter()
    summaries, raw = [], {}
    try:
        for model in models:
            label = f"bert ({layers} layers, seq {args.seq_len})" if model == "bert" else model
            log(f"{label}: {runs} run(s) x {len(VARIANTS)} fresh processes")
            raw[model] = run_model(model, runs, work, layers, args.seq_len, log)
            summaries.append(summarize(model if model != "bert" else f"bert-{layers}L", raw[model]))
    finally:
        if args.keep:
            log(f"cache dirs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"XLA first call, fresh processes, medians of {runs} run(s); {common.describe_machine()}")
    print("vs cold: the XLA call (compile or load + run) against graphcache's cold one")
    print(table(summaries))
    print(f"(total {time.perf_counter() - started:.0f}s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": common.machine_info(), "runs": runs, "layers": layers,
                                         "summaries": summaries, "raw": raw}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
