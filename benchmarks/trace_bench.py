"""tf.function traces (graphcache/traces/): the first call of a deep function, plain vs served from the cache.

Workload: ``deep8k``, the tf.function of functions_bench.py (a deep stack of slices, concats and arithmetic on
an 8x8 tensor, ~8,000 nodes) plus a matmul with a captured tf.Variable. Each variant of each run in a FRESH
process, medians over ``--runs``. The default run times three workloads one after another: the deep
function, ``--keras ResNet50`` and ``--fit small_transformer`` (the issue's three figures):

- ``plain``: TensorFlow alone;
- ``cold`` / ``warm``: ``GraphCache(dir, traces=True)``, an empty dir, then the same dir in a new process
  (the hit rebuilds the ConcreteFunction from the stored library: no Python tracing);
- ``cold_all`` / ``warm_all``: ``GraphCache(dir, traces=True, functions=True)``: on the warm run both the
  trace and the optimization of the first call come from the cache.

``--keras NAME`` measures a Keras model's first ``predict`` instead (``keras.applications.NAME`` with
``weights=None`` and a fixed seed, one 224x224 image, built before every timer): Keras' predict step served
from the cache keyed by its model (graphcache/traces/kerasstep.py). ``--keras-step evaluate`` (or ``fit``)
times its first ``evaluate`` (or its first ``fit`` step: one batch) instead, compiled with Adam,
categorical cross-entropy and accuracy before the timer (graphcache/traces/kerasfit.py).

``--fit NAME`` measures the first ``fit`` instead (``small_transformer``: token and position embeddings, a user
layer, one attention block, a pooled classifier; ``lstm``: an embedding, an LSTM, a classifier; compiled with
Adam and a metric, built before every timer): Keras' train step served from the cache keyed by its model and
compile state (graphcache/traces/kerasfit.py). ``first`` is then the first train step (``fit`` until the
first batch ends), ``epoch`` the first epoch (8 batches) and ``steady`` the second.

Phases: ``first`` (the first ``deep(x)``: trace or restore, instantiation, the first run), ``key`` (the
trace key: walk + parts, inside ``first``), ``read`` (the entry read, checked and decoded, inside ``first``),
``restore`` (rebuilding the ConcreteFunction on a hit, inside
``first``), ``steady`` (a later call), ``enable`` (``import graphcache`` + opening the GraphCache; TensorFlow's
import is outside every timer). Outputs are checked equal to plain TensorFlow's.

    python benchmarks/trace_bench.py                    # the default run: deep, --keras ResNet50, --fit small_transformer
    python benchmarks/trace_bench.py --runs 1 --blocks 100 --json out.json
    python benchmarks/trace_bench.py --keras MobileNetV2  # or ResNet50, ...
    python benchmarks/trace_bench.py --keras ResNet50V2 --keras-step evaluate  # or fit
    python benchmarks/trace_bench.py --fit small_transformer  # or lstm
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

VARIANTS = ("plain", "cold", "warm", "cold_all", "warm_all")
# Whether the phase timers (_time_phases) still count: only inside the first call. A later trace (the node
# count's get_concrete_function traces predict's step for another input structure) is not the first call's.
_counting = {"phases": True}
DEEP_BLOCKS = 570  # -> ~8,000 nodes
PHASES = ("first", "key", "read", "restore", "steady", "enable")
FIT_PHASES = ("first", "epoch", "key", "read", "restore", "steady", "enable")
FIT_MODELS = ("small_transformer", "lstm")
FIT_BATCHES, FIT_BATCH, FIT_LENGTH, FIT_VOCAB = 8, 16, 32, 1000
# The default run: the deep function, Keras ResNet50's first predict, the small transformer's first fit step
# ((keras_model, fit_model) each; "" for neither: the deep function).
DEFAULT_WORKLOADS = (("", ""), ("ResNet50", ""), ("", "small_transformer"))


def child_run(variant: str, directory: str, blocks: int, keras_model: str = "", fit_model: str = "",
              keras_step: str = "predict") -> dict[str, Any]:
    """(child) One fresh process: the first and a later call of the deep function (or the first and a later
    ``predict`` of ``keras_model``) under ``variant``."""
    tf = common.warm_up()
    import numpy as np

    timings: dict[str, Any] = {"key": 0.0, "read": 0.0, "restore": 0.0}
    cache = None
    if variant != "plain":
        start = time.perf_counter()
        import graphcache

        cache = graphcache.GraphCache(directory, traces=True, functions=variant.endswith("_all"))
        timings["enable"] = time.perf_counter() - start
        _time_phases(timings)
    if keras_model:
        return _keras_run(keras_model, timings, cache, keras_step)
    if fit_model:
        return _fit_run(fit_model, timings, cache)
    w = tf.Variable(np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8))

    @tf.function
    def deep(x):
        y = x
        for _ in range(blocks):
            y = tf.concat([y[:, 1:], y[:, :1]], axis=1) * 0.5 + 0.1
        return tf.reduce_sum(tf.matmul(y, w))

    x = tf.reshape(tf.range(64, dtype=tf.float32) / 64.0, [8, 8])
    start = time.perf_counter()
    out = float(deep(x).numpy())
    timings["first"] = time.perf_counter() - start
    _counting["phases"] = False
    start = time.perf_counter()
    deep(x).numpy()
    timings["steady"] = time.perf_counter() - start
    timings["nodes"] = len(deep.get_concrete_function(x).function_def.node_def)
    if cache is not None:
        cache.wait_for_writes()
        stats = cache.stats()
        timings.update(trace_hits=stats.traces["trace_hits"], function_hits=stats.functions["function_hits"])
    return {"out": out, "timings": timings}


def _keras_run(name: str, timings: dict[str, Any], cache: Any, step: str = "predict") -> dict[str, Any]:
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(224, 224, 3))
    x = np.linspace(0.0, 1.0, 224 * 224 * 3, dtype=np.float32).reshape(1, 224, 224, 3)
    y = np.eye(1000, dtype=np.float32)[[7]]
    if step != "predict":
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])

    def call() -> Any:
        if step == "evaluate":
            return model.evaluate(x, y, verbose=0)
        if step == "fit":
            return model.fit(x, y, epochs=1, verbose=0).history["loss"]
        return model.predict(x, verbose=0)

    start = time.perf_counter()
    out = call()
    timings["first"] = time.perf_counter() - start
    _counting["phases"] = False
    start = time.perf_counter()
    call()
    timings["steady"] = time.perf_counter() - start
    if step == "predict":
        timings["nodes"] = len(model.predict_function.get_concrete_function([(x,)]).function_def.node_def)
    if cache is not None:
        cache.wait_for_writes()
        stats = cache.stats()
        timings.update(trace_hits=stats.traces["trace_hits"], function_hits=stats.functions["function_hits"])
    return {"out": float(np.asarray(out, np.float64).sum()), "timings": timings}


def fit_model(name: str) -> Any:
    """A compiled ``--fit`` model (FIT_MODELS), built; tests/test_traces_fit.py's slow sweep fits it too."""
    import keras

    class TokenAndPosition(keras.layers.Layer):  # user code in the model: walked by the key
        def __init__(self, vocab: int, length: int, dim: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.tokens = keras.layers.Embedding(vocab, dim)
            self.positions = keras.layers.Embedding(length, dim)

        def call(self, x: Any) -> Any:
            return self.tokens(x) + self.positions(keras.ops.arange(keras.ops.shape(x)[-1]))

    inputs = keras.Input((FIT_LENGTH,), dtype="int32")
    if name == "lstm":
        h = keras.layers.LSTM(64)(keras.layers.Embedding(FIT_VOCAB, 32)(inputs))
    else:
        h = TokenAndPosition(FIT_VOCAB, FIT_LENGTH, 64)(inputs)
        attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=32, dropout=0.1)(h, h)
        h = keras.layers.LayerNormalization()(h + keras.layers.Dropout(0.1)(attended))
        ff = keras.layers.Dense(64)(keras.layers.Dense(128, activation="relu")(h))
        h = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h + ff))
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(h))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def fit_data() -> tuple[Any, Any]:
    """``--fit``'s data: FIT_BATCHES batches of token ids and binary labels."""
    import numpy as np

    count = FIT_BATCHES * FIT_BATCH
    x = (np.arange(count * FIT_LENGTH, dtype=np.int64).reshape(count, FIT_LENGTH) * 7919 % FIT_VOCAB).astype("int32")
    return x, (x[:, 0] % 2).astype("int32")


def _fit_run(name: str, timings: dict[str, Any], cache: Any) -> dict[str, Any]:
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = fit_model(name)
    x, y = fit_data()
    marks: dict[str, float] = {}

    class Marks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            marks.setdefault("first", time.perf_counter())
            _counting["phases"] = False

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            marks[f"epoch{epoch}"] = time.perf_counter()

    start = time.perf_counter()
    history = model.fit(x, y, batch_size=FIT_BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[Marks()])
    timings.update(first=marks["first"] - start, epoch=marks["epoch0"] - start,
                   steady=marks["epoch1"] - marks["epoch0"])
    if cache is not None:
        cache.wait_for_writes()
        stats = cache.stats()
        timings.update(trace_hits=stats.traces["trace_hits"], function_hits=stats.functions["function_hits"])
    weights = float(sum(np.asarray(w, np.float64).sum() for w in model.get_weights()))
    return {"out": json.dumps([history.history, weights]), "timings": timings}


def _time_phases(timings: dict[str, Any]) -> None:
    """Time the key, the entry's read and the restore inside the first call (wrapping what the hook calls)."""
    from graphcache.traces import hook, keying, stored

    for module, name, phase in ((keying, "compute", "key"), (hook.TraceCache, "_lookup", "read"),
                                (stored, "restore", "restore")):
        original = getattr(module, name)

        def timed(*args: Any, _original: Any = original, _phase: str = phase, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                if _counting["phases"]:
                    timings[_phase] += time.perf_counter() - start

        setattr(module, name, timed)


def run(runs: int, blocks: int, log: Any = print, keras_model: str = "", fit_model: str = "",
        keras_step: str = "predict") -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for index in range(runs):
        dirs = {kind: tempfile.mkdtemp(prefix=f"trace-bench-{kind}-") for kind in ("traces", "all")}
        try:
            for variant in VARIANTS:
                directory = dirs["all" if variant.endswith("_all") else "traces"]
                result = common.run_function("trace_bench", "child_run", variant=variant, directory=directory,
                                             blocks=blocks, keras_model=keras_model, fit_model=fit_model,
                                             keras_step=keras_step)
                results[variant].append(result)
                log(f"run {index + 1}/{runs} {variant:9s} first {result['timings']['first']:.3f}s")
        finally:
            for directory in dirs.values():
                shutil.rmtree(directory, ignore_errors=True)
    outputs = {result["out"] for rows in results.values() for result in rows}
    assert len(outputs) == 1, f"outputs differ between variants: {outputs}"
    summary = {variant: common.medians([row["timings"] for row in rows]) for variant, rows in results.items()}
    return {"blocks": blocks, "keras": keras_model, "keras_step": keras_step, "fit": fit_model, "runs": runs,
            "medians": summary,
            "machine": common.machine_info()}


def table(result: dict[str, Any]) -> str:
    phases = FIT_PHASES if result.get("fit") else PHASES
    rows = [["variant", *phases, "vs plain"]]
    plain = result["medians"]["plain"].get("first")
    for variant, figures in result["medians"].items():
        rows.append([variant, *(common.fmt_seconds(figures.get(phase)) for phase in phases),
                     common.fmt_ratio(common.ratio(figures.get("first"), plain))])
    if result.get("fit"):
        return f"Keras {result['fit']} first fit step, medians of {result['runs']} fresh processes\n" + \
            common.text_table(rows)
    nodes = int(result["medians"]["plain"].get("nodes", 0))
    step = {"predict": "predict", "evaluate": "evaluate", "fit": "fit step"}[result.get("keras_step", "predict")]
    what = f"Keras {result['keras']} first {step}" if result.get("keras") else "deep function"
    size = f", {nodes} nodes" if nodes else ""
    return f"{what}{size}, medians of {result['runs']} fresh processes\n" + common.text_table(rows)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # stdout is the tables (run_all quotes it)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=DEEP_BLOCKS)
    parser.add_argument("--keras", default="", help="a keras.applications model: time its first predict instead")
    parser.add_argument("--keras-step", default="predict", choices=("predict", "evaluate", "fit"),
                        help="with --keras: time its first evaluate or first fit step instead of predict")
    parser.add_argument("--fit", default="", choices=("", *FIT_MODELS), help="time a Keras model's first fit instead")
    parser.add_argument("--json", type=Path)
    common.add_out_argument(parser, "trace_bench")
    args = parser.parse_args()
    with common.teed_stdout(args.out, args.append):
        if args.keras or args.fit:
            result = run(args.runs, args.blocks, log=progress, keras_model=args.keras, fit_model=args.fit,
                         keras_step=args.keras_step)
            print(table(result))
        else:  # the default run: the three workloads, each in its own fresh processes
            results = [run(args.runs, args.blocks, log=progress, keras_model=keras, fit_model=fit)
                       for keras, fit in DEFAULT_WORKLOADS]
            print("\n\n".join(table(one) for one in results))
            result = {"workloads": results}
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
