"""Keras ``model.fit`` / ``model.evaluate`` served from the trace cache (graphcache/traces/kerasfit.py), never stale.

As tests/test_traces_keras.py: fresh processes (tests.helpers.run_python) with ``GRAPHCACHE_TRACE_VERIFY=1``
(each hit traced anyway and compared: a stale hit would be an ERROR). A cold process stores each model's
train and test steps, a warm one hits them, and both fit and evaluate exactly as plain TensorFlow does
(losses and metrics per epoch, evaluate's results, weights and optimizer variables after fit, bitwise).
Each thing a train step reads, changed between processes, is a miss with plain TensorFlow's results: the
learning rate, a float in a learning-rate schedule, the loss, a metric added, a custom ``train_step``'s code,
a global a custom layer's ``call`` reads. Key and refusal checks run in this process.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from .helpers import run_python, trace_child_preamble

BASE = {"lr": 0.01, "decay": 0.9, "loss": "mse", "metrics": ["mae"], "step": "* 1.0", "flag": False}
CHANGED = {"lr": 0.02, "decay": 0.8, "loss": "mae", "metrics": ["mae", "mse"], "step": "* 0.5", "flag": True}
# Each of these models reads one thing CHANGED changes; "sub" (a subclassed model built by graphcache's
# symbolic build before its first trace) and "evalonly" (evaluated, never fit: its optimizer stays unbuilt) none.
VARIANT_MODELS = ("lr", "decay", "loss", "metrics", "step", "flag")
UNCHANGED_MODELS = ("sub", "evalonly")

CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf
import keras

V = {variant!r}
FLAG = V["flag"]
{capture}keras.utils.set_random_seed(7)


class Flagged(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, inputs):
        if FLAG:
            return inputs * self.w * 0.5
        return inputs * self.w


class Stepped(keras.Model):
    """A subclassed model with its own train_step (its code changes with V["step"])."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, activation="relu")
        self.own = Flagged()
        self.out = keras.layers.Dense(2)
        self.tracker = keras.metrics.Mean(name="own_loss")

    def call(self, x):
        return self.out(self.own(self.hidden(x)))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred) {step}
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        self.tracker.update_state(loss)
        return {{"own_loss": self.tracker.result()}}


class Sub(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, activation="relu")
        self.out = keras.layers.Dense(2)

    def call(self, x):
        return self.out(self.hidden(x) * 0.5)


def dense(units=3):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(2)])


def conv():
    inputs = keras.Input((4,))
    h = keras.layers.Reshape((4, 1))(inputs)
    h = keras.layers.Conv1D(3, 2, activation="relu")(h)
    h = keras.layers.Flatten()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def flagged():
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(2)(Flagged()(keras.layers.Dense(3)(inputs))))


models = {{
    "lr": (dense(), dict(optimizer=keras.optimizers.Adam(V["lr"]), loss="mse", metrics=["mae"])),
    "decay": (dense(), dict(optimizer=keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(
        0.05, 2, V["decay"])), loss="mse")),
    "loss": (conv(), dict(optimizer="adam", loss=V["loss"], metrics=["mae"])),
    "metrics": (dense(), dict(optimizer="adam", loss="mse", metrics=V["metrics"])),
    "step": (Stepped(), dict(optimizer="adam", loss="mse")),
    "flag": (flagged(), dict(optimizer="rmsprop", loss="mse", metrics=["mse"])),
    "sub": (Sub(), dict(optimizer="adam", loss="mse", metrics=["mae"])),  # not built before fit
    "evalonly": (dense(), dict(optimizer="adam", loss="mse", metrics=["mae"])),
}}
models["step"][0](np.zeros((1, 4), np.float32))  # built before fit
x = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(16, 4)
y = np.stack([np.sin(3 * x[:, 0]), x[:, 1] * x[:, 2]], axis=1).astype(np.float32)
out = {{}}
for name, (model, compiled) in models.items():
    model.compile(**compiled)
    result = {{}}
    if name != "evalonly":
        result["history"] = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0).history
    result["evaluate"] = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    result["weights"] = [w.tolist() for w in model.get_weights()]
    result["optimizer"] = [np.asarray(v).tolist() for v in model.optimizer.variables]
    result["optimizer_built"] = bool(model.optimizer.built)
    out[name] = result
if {use_cache}:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(traces=stats.traces, reasons=stats.trace_reasons, by_kind=stats.by_kind.get("tf_trace"))
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
print(json.dumps(out))
'''
MODELS = (*VARIANT_MODELS, *UNCHANGED_MODELS)
STEPS = 2 * len(MODELS) - 1  # a train and a test step each; "evalonly" only a test step


def child(cache_dir, variant: dict) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None,
                        step=variant["step"])
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"}, timeout=600)


def results(out: dict) -> dict:
    return {name: out[name] for name in MODELS}


VERIFIED = "verified against a fresh trace"


def both(first: tuple, second: tuple) -> tuple[dict, dict]:
    """Two children at once (a plain one never touches the cache): the suite runs on few cores, not one."""
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(child, *first), pool.submit(child, *second)]
        return running[0].result(), running[1].result()


def test_keras_fit_and_evaluate_warm_hits_and_every_change_misses(cache_dir):
    plain, cold = both((None, BASE), (cache_dir, BASE))
    assert not plain["evalonly"]["optimizer_built"] and len(plain["evalonly"]["optimizer"]) == 2
    assert results(cold) == results(plain) and not cold["errors"] and not cold["warnings"], cold["log"]
    # "step"'s own train_step builds its optimizer in its one trace (refused), as plain Keras does: that build is
    # stored (building.py), beside the other steps' traces.
    assert cold["traces"]["trace_hits"] == 0 and cold["traces"]["trace_misses"] == STEPS - 1, cold["log"]
    assert cold["reasons"].get("creates_variables") == 1, cold["reasons"]
    assert set(cold["reasons"]) <= {"library", "creates_variables"}, cold["reasons"]  # and tf.data's own functions
    assert cold["by_kind"]["entries"] == STEPS

    warm, plain_changed = both((cache_dir, BASE), (None, CHANGED))  # verified: every hit traced anyway, compared
    assert not warm["errors"] and not warm["warnings"], warm["log"]
    assert results(warm) == results(plain), "a hit fits and evaluates exactly as plain TensorFlow does"
    # "step"'s optimizer built first, as its first trace built it; its trace then stored (a miss).
    assert warm["traces"]["trace_hits"] == STEPS - 1 and sum(VERIFIED in m for m in warm["log"]) == STEPS - 1
    assert warm["traces"]["trace_misses"] == STEPS and sum("before its first trace" in m for m in warm["log"]) == 1

    # Each variant model's one dependency changed: misses with plain TensorFlow's results, no stale hit.
    changed = child(cache_dir, CHANGED)
    assert not changed["errors"] and not changed["warnings"], changed["log"]
    assert results(changed) == results(plain_changed)
    for name in VARIANT_MODELS:
        assert changed[name]["history"] != plain[name]["history"], name
    # Evaluate's test step reads the loss, the metrics and the model, not the optimizer of a Keras model class:
    # "lr" and "decay" hit there. (The counters are the cache's, over all three processes.)
    # "step"'s changed train_step builds its optimizer in its trace again: refused, not a miss.
    misses = 2 * len(VARIANT_MODELS) - 2
    assert changed["traces"]["trace_misses"] == STEPS + misses - 1, changed["log"]
    assert changed["traces"]["trace_hits"] == 2 * STEPS - 1 - misses


# -- the step's key, in this process ------------------------------------------------------------------------
FLAG = False
LOSS_SCALE = 1.0


def _step(model, method: str = "train_step"):
    """The FitStep of ``model``'s train or test function, its state built as the hook builds it."""
    import tensorflow as tf
    from tensorflow.core.function.polymorphism import function_type as function_type_lib

    from graphcache.traces import kerasfit

    if method == "train_step":
        model.make_train_function(force=True)
        function = model.train_function
    else:
        model.make_test_function(force=True)
        function = model.test_function
    cells = dict(zip(function.__code__.co_freevars, (cell.cell_contents for cell in function.__closure__),
                     strict=True))
    step = kerasfit.fit_step(cells["multi_step_on_iterator"].python_function)
    assert step is not None and step.model is model and step.method == method
    spec = tf.data.IteratorSpec((tf.TensorSpec([8, 4], tf.float32), tf.TensorSpec([8, 2], tf.float32)))
    parameter = function_type_lib.Parameter("iterator", function_type_lib.Parameter.POSITIONAL_OR_KEYWORD, False,
                                            spec)
    kerasfit.build_state(step, function_type_lib.FunctionType([parameter]))
    return step


def _key(model, method: str = "train_step") -> str:
    from graphcache.traces import kerasfit

    return kerasfit.walk_step(_step(model, method)).digest()


def _refused(model, method: str = "train_step") -> str:
    from graphcache.traces import kerasfit
    from graphcache.traces.walk import Uncacheable

    with pytest.raises(Uncacheable) as caught:
        kerasfit.walk_step(_step(model, method))
    return f"{caught.value.reason}: {caught.value.detail}"


def _model(layer=None, **compiled):
    import keras

    inputs = keras.Input((4,), name="x")
    h = keras.layers.Dense(3, name="d")(inputs)
    if layer is not None:
        h = layer(h)
    model = keras.Model(inputs, keras.layers.Dense(2, name="o")(h), name="m")
    model.compile(**{"optimizer": keras.optimizers.Adam(name="adam"), "loss": "mse", **compiled})
    return model


def scaled_mse(y, y_pred):
    import keras

    return keras.ops.mean((y - y_pred) ** 2) * LOSS_SCALE


def test_the_train_step_key_covers_optimizer_loss_metrics_and_user_code():
    import keras

    global LOSS_SCALE

    # Named: Keras numbers auto-named optimizers process-wide (their variables' paths), as it does layers.
    def adam(rate=0.01, **options):
        return keras.optimizers.Adam(rate, name="adam", **options)

    def sgd(decay=0.9):
        return keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.05, 2, decay), name="sgd")

    base = _key(_model(optimizer=adam(), metrics=["mae"]))
    assert _key(_model(optimizer=adam(), metrics=["mae"])) == base  # unchanged: the same key
    for changed in (_model(optimizer=adam(0.02), metrics=["mae"]),
                    _model(optimizer=adam(clipnorm=1.0), metrics=["mae"]),
                    _model(optimizer=keras.optimizers.AdamW(0.01, name="adam"), metrics=["mae"]),
                    _model(optimizer=adam(), loss="mae", metrics=["mae"]),
                    _model(optimizer=adam(), metrics=["mae", "mse"]),
                    _model(optimizer=adam(), metrics=["mae"], loss_weights=[0.5]),
                    _model(optimizer=adam(), metrics=["mae"], jit_compile=True)):
        assert _key(changed) != base
    assert _key(_model(optimizer=sgd())) == _key(_model(optimizer=sgd()))
    assert _key(_model(optimizer=sgd(0.8))) != _key(_model(optimizer=sgd()))  # a float in a schedule

    assert _key(_model(metrics=[_counting(1.0)])) == _key(_model(metrics=[_counting(1.0)]))
    assert _key(_model(metrics=[_counting(2.0)])) != _key(_model(metrics=[_counting(1.0)]))  # its code

    own = _key(_model(loss=scaled_mse))  # a user loss function: its code and the globals it reads
    LOSS_SCALE = 2.0
    try:
        assert _key(_model(loss=scaled_mse)) != own
    finally:
        LOSS_SCALE = 1.0


def _counting(weight: float):
    """A user metric with its own variable; ``weight`` is a constant of its code."""
    import keras

    class Counting(keras.metrics.Metric):
        def __init__(self, **kwargs):
            super().__init__(name="counting", **kwargs)
            self.seen = self.add_variable(shape=(), initializer="zeros", name="seen")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.seen.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], "float32"))

        def result(self):
            return self.seen

    if weight != 1.0:
        class Counting(Counting):  # noqa: F811 - the same name, other code
            def result(self):
                return self.seen * 2.0

    return Counting()


def _stepped(scale: float):
    """Two classes of the same name whose train_step differs by a constant (their code)."""
    import keras
    import tensorflow as tf

    class Stepped(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.out = keras.layers.Dense(2, name="o")
            self.tracker = keras.metrics.Mean(name="own_loss")

        def call(self, x):
            return self.out(x)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
            self.tracker.update_state(loss)
            return {"own_loss": self.tracker.result()}

    if scale != 1.0:
        class Stepped(Stepped):  # noqa: F811 - the same name, other code
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True)) * 0.5
                gradients = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
                self.tracker.update_state(loss)
                return {"own_loss": self.tracker.result()}

    model = Stepped(name="stepped")
    model.compile(optimizer=keras.optimizers.Adam(name="adam"), loss="mse")
    return model


def test_a_custom_train_step_and_a_custom_layer_are_keyed_by_their_code_and_globals():
    import keras

    global FLAG

    base = _key(_stepped(1.0))
    assert _key(_stepped(1.0)) == base
    assert _key(_stepped(0.5)) != base

    class Flagged(keras.layers.Layer):
        def call(self, x):
            return x * 0.5 if FLAG else x

    before = _key(_model(Flagged(name="f")))
    FLAG = True
    try:
        assert _key(_model(Flagged(name="f"))) != before
    finally:
        FLAG = False


def test_the_state_is_built_before_the_trace_and_evaluate_leaves_the_optimizer_alone():
    model = _model(metrics=["mae"])
    assert not model.optimizer.built
    _step(model, "test_step")
    assert not model.optimizer.built and model._compile_metrics.built
    assert [v.path for v in model.metrics_variables] == ["loss/total", "loss/count", "mean_absolute_error/total",
                                                           "mean_absolute_error/count"]
    step = _step(model)
    assert model.optimizer.built and len(model.optimizer.variables) == 2 + 2 * len(model.trainable_variables)
    from graphcache.traces import kerasfit

    bindings = kerasfit.walk_step(step).bindings
    assert [path.split(":")[0] for path in bindings] == ["keras"] * 4 + ["keras-metric"] * 4 + \
        ["keras-optimizer"] * 10


@pytest.mark.parametrize("kind", ["functional", "sequential", "dict outputs", "subclassed"])
def test_state_built_from_the_output_tensors_equals_keras_own_symbolic_build(kind):
    """kerasfit's shortcut (no symbolic call of the model) builds the same metric, loss and optimizer variables,
    with the same values, as Keras' _symbolic_build; it declines models it cannot describe so."""
    import keras
    import numpy as np
    import tensorflow as tf

    from graphcache.traces import kerasfit

    def build() -> keras.Model:
        keras.utils.set_random_seed(3)
        if kind == "sequential":
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
        elif kind == "subclassed":
            class Sub(keras.Model):
                def __init__(self):
                    super().__init__()
                    self.dense = keras.layers.Dense(2)

                def call(self, x):
                    return self.dense(x)
            model = Sub()
            model.build((None, 4))
        else:
            inputs = keras.Input((4,), name="x")
            hidden = keras.layers.Dense(3)(inputs)
            outputs = {"a": keras.layers.Dense(2, name="a")(hidden), "b": keras.layers.Dense(1, name="b")(hidden)} \
                if kind == "dict outputs" else keras.layers.Dense(2)(hidden)
            model = keras.Model(inputs, outputs)
        losses = {"a": "mse", "b": "mae"} if kind == "dict outputs" else "mse"
        metrics = {"a": ["mae"], "b": ["mse"]} if kind == "dict outputs" else ["mae", "accuracy"]
        model.compile(optimizer="adam", loss=losses, metrics=metrics)
        return model

    targets = {"a": tf.TensorSpec((None, 2)), "b": tf.TensorSpec((None, 1))} if kind == "dict outputs" \
        else tf.TensorSpec((None, 2))
    spec = (tf.TensorSpec((None, 4)), targets)
    shortcut, plain = build(), build()
    assert kerasfit._build_from_outputs(shortcut, spec) is (kind != "subclassed")
    if kind == "subclassed":
        return
    plain._symbolic_build(data_batch=spec)

    def state(model: keras.Model) -> list:
        # Metric paths exactly; the optimizer's by position (Keras numbers the layers and optimizers of the
        # second model built here: dense_2, adam_1)
        return [v.path for v in model.metrics_variables] + [
            (tuple(v.shape), v.dtype, np.asarray(v).tobytes())
            for v in list(model.metrics_variables) + list(model.optimizer.variables)]

    assert state(shortcut) == state(plain) and len(state(plain)) > 4
    assert [type(m).__name__ for m in shortcut.metrics] == [type(m).__name__ for m in plain.metrics]


def test_the_fit_step_key_refuses_what_it_cannot_cover():
    import keras

    class HandsSelfOn(keras.Model):
        def train_step(self, data):
            return helper(self, data)

    class CallableLoss:
        def __call__(self, y, y_pred):
            return y - y_pred

    assert "hands self to other code" in _refused(_hands_self_on(HandsSelfOn))
    assert "steps_per_execution" in _refused(_model(steps_per_execution=2))  # run_eagerly: no tf.function at all
    assert "CallableLoss" in _refused(_model(loss=CallableLoss()))


def _hands_self_on(cls):
    import keras

    inputs = keras.Input((4,))
    model = cls(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="adam", loss="mse")
    return model


def helper(model, data):
    return {}


# -- a broader sweep behind `slow`: attention, an LSTM, mixed precision, a keras.applications evaluate ------------
SWEEP = '''
import json, logging, sys
import numpy as np
import keras

messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append((record.levelname, record.getMessage()))
logging.getLogger("graphcache").addHandler(handler)
logging.getLogger("graphcache").setLevel(logging.INFO)
if {use_cache}:
    import graphcache
    cache = graphcache.GraphCache({cache_dir!r}, traces=True)
name = {name!r}
keras.utils.set_random_seed(0)
out = {{}}
if name in ("small_transformer", "lstm"):
    sys.path.insert(0, "benchmarks")
    from trace_bench import fit_data, fit_model
    model = fit_model(name)
    x, y = fit_data()
    out["history"] = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
elif name == "mixed_precision":  # a LossScaleOptimizer around Adam, float16 compute
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(2, dtype="float32")])
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(32, 8)
    y = np.stack([x.sum(1), x[:, 0] * x[:, 1]], 1).astype(np.float32)
    out["history"] = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
else:  # keras.applications: evaluate only
    model = getattr(keras.applications, name)(weights=None, input_shape=(64, 64, 3), classes=3)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.linspace(0.0, 1.0, 4 * 64 * 64 * 3, dtype=np.float32).reshape(4, 64, 64, 3)
    y = np.array([0, 1, 2, 1])
out["evaluate"] = model.evaluate(x, y, batch_size=8 if name != "small_transformer" else 16, verbose=0)
out["weights"] = float(sum(np.asarray(w, np.float64).sum() for w in model.get_weights()))
if {use_cache}:
    cache.wait_for_writes()
    out.update(traces=cache.stats().traces, reasons=cache.stats().trace_reasons)
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["refused"] = [m for level, m in messages if "not cached (keras)" in m]
print(json.dumps(out))
'''


def _sweep(cache_dir, name: str) -> dict:
    code = SWEEP.format(use_cache=cache_dir is not None, cache_dir=str(cache_dir or ""), name=name)
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"}, timeout=900)


def both_sweeps(first: tuple, second: tuple) -> tuple[dict, dict]:
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(_sweep, *first), pool.submit(_sweep, *second)]
        return running[0].result(), running[1].result()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["small_transformer", "lstm", "mixed_precision", "MobileNetV2"])
def test_keras_fit_sweep_hits_with_plain_results(cache_dir, name):
    plain, cold = both_sweeps((None, name), (cache_dir, name))
    steps = 1 if name == "MobileNetV2" else 2  # evaluate only, or fit and evaluate
    measured = [key for key in ("history", "evaluate", "weights") if key in plain]
    assert [cold[key] for key in measured] == [plain[key] for key in measured]
    assert not cold["errors"] and not cold["refused"], cold
    assert cold["traces"]["trace_misses"] == steps and set(cold["reasons"]) <= {"library"}, cold
    warm = _sweep(cache_dir, name)  # verified against a fresh trace
    assert [warm[key] for key in measured] == [plain[key] for key in measured]
    assert not warm["errors"], warm["errors"]
    assert warm["traces"]["trace_hits"] == steps, warm["traces"]
