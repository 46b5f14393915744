"""Keras ``model.predict`` served from the trace cache (graphcache/traces/kerasstep.py), never a stale trace.

As tests/test_traces.py: fresh processes (tests.helpers.run_python), most with ``GRAPHCACHE_TRACE_VERIFY=1``
(each hit traced anyway and compared: a stale hit would be an ERROR). A cold process stores each model's
predict trace, a warm one hits and predicts bitwise what plain TensorFlow predicts, and each thing a
model's trace reads, changed between processes, is a miss with plain TensorFlow's result: a layer's
activation, a custom layer's ``call`` code, a module global its ``call`` reads, a weight's shape. Whether
a layer's Python ran is seen by a profile hook. The refusals are checked in this process.
"""

from __future__ import annotations

import functools
import types

import pytest

from .helpers import run_python, trace_child_preamble

BASE = {"activation": "relu", "own": "+ 0.25", "flag": False, "units": 5}
CHANGED = {"activation": "tanh", "own": "- 0.25", "flag": True, "units": 6}
# Each model reads one thing CHANGED changes; "sub" (a subclassed model), "lazy" (one that builds its
# layers inside its first predict), "noise" (random numbers from a SeedGenerator, whose state variable the
# trace captures and advances) and "jit" (compiled with jit_compile: Keras nests an XLA tf.function) read none.
VARIANT_MODELS = ("activation", "own", "flag", "units")
UNCHANGED_MODELS = ("sub", "lazy", "noise", "jit")
MODELS = (*VARIANT_MODELS, *UNCHANGED_MODELS)

CHILD = '''
import json, logging, sys, warnings
import numpy as np
import tensorflow as tf
import keras

V = {variant!r}
FLAG = V["flag"]
{capture}keras.utils.set_random_seed(7)


class Offset(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, inputs):
        return inputs * self.w {own}


class Flagged(keras.layers.Layer):
    def __init__(self, factor=0.5, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs):
        if FLAG:
            return inputs * self.factor
        return inputs

    def get_config(self):
        return {{**super().get_config(), "factor": self.factor}}


class Noisy(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seeds = keras.random.SeedGenerator(3)

    def call(self, inputs):
        return inputs + keras.random.normal(keras.ops.shape(inputs), stddev=0.1, seed=self.seeds)


class Sub(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, activation="relu")
        self.out = keras.layers.Dense(2)

    def call(self, x):
        return self.out(self.hidden(x) * 0.5)


def functional(*middle):
    inputs = keras.Input((4,))
    h = keras.layers.Dense(V["units"] if "units" in middle else 5,
                           activation=V["activation"] if "activation" in middle else "relu")(inputs)
    if "own" in middle:
        h = Offset()(h)
    if "flag" in middle:
        h = Flagged()(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))


models = {{name: functional(name) for name in ("activation", "own", "flag", "units")}}
models["sub"] = Sub()
models["sub"](np.zeros((1, 4), np.float32))  # built before predict
models["lazy"] = Sub()  # built by its first predict, inside the trace
models["noise"] = keras.Sequential([keras.Input((4,)), Noisy(), keras.layers.Dense(2)])
models["jit"] = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(2)])
models["jit"].compile(loss="mse", jit_compile=True)

ran = {{"Offset.call": 0, "Flagged.call": 0, "Sub.call": 0, "Noisy.call": 0}}
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_qualname in ran:
        ran[frame.f_code.co_qualname] += 1

x = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)
values, runs = {{}}, {{}}
for name, model in models.items():
    before = dict(ran)
    sys.setprofile(profile)
    values[name] = model.predict(x, batch_size=3 if name == "activation" else 8, verbose=0).tolist()
    sys.setprofile(None)
    runs[name] = sum(ran.values()) - sum(before.values())
values["again"] = models["own"].predict(x, batch_size=8, verbose=0).tolist()
values["noise again"] = models["noise"].predict(x, batch_size=8, verbose=0).tolist()  # the next random numbers
out = {{"values": values, "runs": runs, "called": bool(models["sub"]._called)}}
if {use_cache}:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(traces=stats.traces, reasons=stats.trace_reasons, by_kind=stats.by_kind.get("tf_trace"))
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
print(json.dumps(out))
'''


def child(cache_dir, variant: dict, *, verify: bool = True) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None,
                        own=variant["own"])
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1" if verify else "0"})


VERIFIED = "verified against a fresh trace"
STORED = len(MODELS) + 1  # "activation" predicts in batches of 3 and 2: a second, generalized trace


def test_keras_predict_warm_hits_and_every_change_misses(cache_dir):
    plain = child(None, BASE)
    cold = child(cache_dir, BASE)
    assert cold["values"] == plain["values"] and not cold["errors"] and not cold["warnings"], cold
    assert cold["traces"]["trace_hits"] == 0 and cold["traces"]["trace_misses"] == STORED, cold["traces"]
    assert cold["reasons"]["keras"] == 1, cold["reasons"]  # "lazy"'s first trace builds it: refused, traced again
    assert cold["by_kind"]["entries"] == STORED

    warm = child(cache_dir, BASE)  # verified: every hit is traced anyway and compared
    assert warm["values"] == plain["values"] and not warm["errors"] and not warm["warnings"], warm
    assert warm["traces"]["trace_hits"] == STORED and sum(VERIFIED in m for m in warm["log"]) == STORED

    fast = child(cache_dir, BASE, verify=False)
    assert fast["values"] == plain["values"], "a hit predicts exactly what plain TensorFlow predicts"
    assert fast["values"]["again"] == plain["values"]["own"]
    assert fast["values"]["noise again"] != fast["values"]["noise"]  # the restored trace advances the seed state
    assert all(fast["runs"][name] == 0 for name in ("own", "flag", "sub", "noise")), fast["runs"]  # no Python tracing
    assert fast["runs"]["lazy"] >= 1  # its refused first trace runs (and builds it); the retrace is a hit
    assert fast["traces"]["trace_hits"] == 2 * STORED and fast["reasons"]["keras"] == 3
    assert fast["called"]

    # Each variant model's one dependency changed: misses with plain TensorFlow's results, no stale hit.
    plain_changed = child(None, CHANGED)
    changed = child(cache_dir, CHANGED)
    assert not changed["errors"] and not changed["warnings"], changed
    assert changed["values"] == plain_changed["values"]
    for name in VARIANT_MODELS:
        assert changed["values"][name] != plain["values"][name], name
    assert changed["runs"]["own"] >= 1 and changed["runs"]["flag"] >= 1
    assert changed["traces"]["trace_misses"] == STORED + len(VARIANT_MODELS) + 1  # + activation's second trace
    assert changed["traces"]["trace_hits"] == 2 * STORED + len(UNCHANGED_MODELS)  # they hit (and were verified)
    assert changed["by_kind"]["entries"] == STORED + len(VARIANT_MODELS) + 1


# -- the model's key, in this process ------------------------------------------------------------------------
LAMBDA_SCALE = 2.0


def _step(model):
    from graphcache.traces import kerasstep

    model.make_predict_function(force=True)
    step = kerasstep.predict_step(getattr(model.predict_function, "python_function", model.predict_function))
    assert step is not None and step.model is model
    return step


def _key(model) -> tuple[str, dict]:
    from graphcache.traces import kerasstep

    walk = kerasstep.walk_step(_step(model))
    return walk.digest(), walk.bindings


def _refused(model) -> str:
    from graphcache.traces import kerasstep
    from graphcache.traces.walk import Uncacheable

    with pytest.raises(Uncacheable) as caught:
        kerasstep.walk_step(_step(model))
    return f"{caught.value.reason}: {caught.value.detail}"


def _functional(*layers, shape=(4,)):
    import keras

    inputs = keras.Input(shape)
    h = inputs
    for layer in layers:
        h = layer(h)
    return keras.Model(inputs, h)


def test_the_model_key_covers_configs_code_and_weights_and_binds_variables_by_path():
    import keras

    model = _functional(keras.layers.Dense(3, activation="relu", name="d"), keras.layers.Rescaling(0.5, name="r"))
    digest, bindings = _key(model)
    assert list(bindings) == [f"keras:{i}:{v.path}" for i, v in enumerate(model.variables)]
    assert all(bindings[path] is v._value for path, v in zip(bindings, model.variables, strict=True))
    same = keras.Model.from_config(model.get_config())  # the same names, configs and weight shapes
    assert _key(same)[0] == digest
    for changed in (_functional(keras.layers.Dense(3, activation="tanh", name="d"), keras.layers.Rescaling(0.5, name="r")),
                    _functional(keras.layers.Dense(3, activation="relu", name="d"), keras.layers.Rescaling(0.25, name="r")),
                    _functional(keras.layers.Dense(4, activation="relu", name="d"), keras.layers.Rescaling(0.5, name="r")),
                    _functional(keras.layers.Dense(3, activation="relu", name="d", use_bias=False),
                                keras.layers.Rescaling(0.5, name="r"))):
        assert _key(changed)[0] != digest
    model.get_layer("d").trainable = False
    assert _key(model)[0] != digest


def _wired(order: str, *, kwargs: dict | None = None, outputs: str = "single"):
    """One set of layers (same names and configs) wired in ``order``; its model's predict key."""
    import keras

    inputs = keras.Input((4,), name="x")
    layers = {name: keras.layers.Dense(4, name=name) for name in "ab"}
    h = inputs
    for name in order:
        h = layers[name](h)
    drop = keras.layers.BatchNormalization(name="bn")
    h = drop(h, **(kwargs or {}))
    out = {"single": h, "list": [h, inputs], "dict": {"y": h, "x": inputs}, "dict_reversed": {"x": inputs, "y": h}}
    return keras.Model(inputs, out[outputs], name="wired")


def _cumsum(axis: int):
    """``keras.ops.cumsum(x, axis=axis)`` as a model (an operation that is not a layer; named, as a fresh process
    would name it)."""
    import keras
    from keras.src.ops.numpy import Cumsum

    inputs = keras.Input((4, 4), name="x")
    return keras.Model(inputs, Cumsum(axis=axis, name="cumsum")(inputs), name="cumsum_model")


def test_a_functional_models_graph_of_layer_calls_is_in_its_key():
    """Keras' functional model is keyed by each layer's config and its own graph of calls (topology.py), not by its
    whole get_config(): the wiring, a call's arguments, the outputs' structure and the attributes of an operation
    that is not a layer each change the key; a shared layer's calls in another model do not."""
    import keras

    from graphcache.traces import topology

    digest = _key(_wired("ab"))[0]
    assert _key(_wired("ab"))[0] == digest
    for changed in (_wired("ba"), _wired("ab", kwargs={"training": True}), _wired("ab", outputs="list")):
        assert _key(changed)[0] != digest
    assert _key(_wired("ab", outputs="dict"))[0] != _key(_wired("ab", outputs="dict_reversed"))[0]
    assert _key(_cumsum(1))[0] == _key(_cumsum(1))[0] != _key(_cumsum(2))[0]  # an operation's own attribute
    shared = keras.layers.Dense(4, name="shared")
    first = keras.Input((4,))
    keras.Model(first, shared(first))  # a node of another model comes first
    used_second = keras.Input((4,), name="x")
    model = keras.Model(used_second, shared(used_second))
    fresh = keras.Input((4,), name="x")
    alone = keras.Model(fresh, keras.layers.Dense(4, name="shared")(fresh))
    assert topology.graph_config(model)[3:] == topology.graph_config(alone)[3:]  # the model names differ


def test_a_lambda_layer_is_keyed_by_its_function_and_what_it_reads():
    import keras

    global LAMBDA_SCALE
    model = _functional(keras.layers.Lambda(lambda t: t * LAMBDA_SCALE, name="scale"))
    before = _key(model)[0]
    LAMBDA_SCALE = 3.0
    try:
        assert _key(model)[0] != before
    finally:
        LAMBDA_SCALE = 2.0


ACTIVATION_SCALE = 0.5


def scaled(t):
    return t * ACTIVATION_SCALE


def test_a_user_activation_is_keyed_by_its_code_and_globals_not_its_name():
    """A user function as a layer's activation is in the layer's config by name only."""
    import keras

    global ACTIVATION_SCALE

    class Built(keras.layers.Layer):  # Keras keeps a wrapped `build` on each instance: walked, not refused
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

        def call(self, x):
            return x * self.w

    model = _functional(keras.layers.Dense(2, activation=scaled, name="d"), Built())
    before = _key(model)[0]
    ACTIVATION_SCALE = 0.25
    try:
        assert _key(model)[0] != before
    finally:
        ACTIVATION_SCALE = 0.5
    assert _key(model)[0] == before
    held = keras.layers.Dense(2)
    held.activation = functools.partial(scaled)
    assert "partial" in _refused(_functional(held))  # by get_config, or by what the layer holds


def test_the_model_key_refuses_what_it_cannot_cover():
    import keras

    class Writes(keras.layers.Layer):
        def call(self, x):
            self.last = x
            return x

    class HoldsObject(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.helper = types.SimpleNamespace(scale=2.0)

        def call(self, x):
            return x * self.helper.scale

    class HandsSelfOn(keras.layers.Layer):
        def call(self, x):
            return describe(self, x)

    assert _refused(_functional(Writes())).startswith("writes_state: ")
    assert "self.helper" in _refused(_functional(HoldsObject()))
    assert "hands self to other code" in _refused(_functional(HandsSelfOn()))
    eager = _functional(keras.layers.Dense(2))
    eager.compile(run_eagerly=True)
    assert "runs eagerly" in _refused(eager)
    several = _functional(keras.layers.Dense(2))
    several.compile(steps_per_execution=2)
    assert "steps_per_execution" in _refused(several)
    assert "not built" in _refused(Sub())


def describe(layer, x):
    return x


def test_keras_models_read_by_a_user_tf_function_are_keyed_by_the_objects_rule():
    """``model(x)`` inside the user's own tf.function: walk.py's plain rules refuse the model; the walk a key is made
    of keys it with objects.py's rule (tests/test_traces_loops.py), its variables bound by path."""
    import keras
    import tensorflow as tf

    from graphcache.traces import keying
    from graphcache.traces.walk import Uncacheable, Walk

    model = _functional(keras.layers.Dense(2))

    @tf.function
    def run(x):
        return model(x)

    with pytest.raises(Uncacheable) as caught:
        Walk().function(run.python_function, "")
    assert caught.value.reason == "value"
    bindings = keying.walk_root(run.python_function).bindings
    assert list(bindings) == [f"c:model/keras:{i}:{v.path}" for i, v in enumerate(model.variables)]


def _sub_class():
    import keras

    class Sub(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(2)

        def call(self, x):
            return self.hidden(x)

    return Sub


def Sub():  # noqa: N802 - a model class, made when first asked for (keras is imported lazily here)
    return _sub_class()()


# -- keras.applications: a small one by default, a sweep behind `slow` ------------------------------------------
APPLICATION = '''
import json, logging
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
keras.utils.set_random_seed(0)
model = getattr(keras.applications, {name!r})(weights=None, input_shape=({size}, {size}, 3))
x = np.linspace(0.0, 1.0, 2 * {size} * {size} * 3, dtype=np.float32).reshape(2, {size}, {size}, 3)
out = {{"y": model.predict(x, verbose=0).tolist()}}
if {use_cache}:
    cache.wait_for_writes()
    out.update(traces=cache.stats().traces, reasons=cache.stats().trace_reasons)
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["refused"] = [m for level, m in messages if "not cached (keras)" in m]
print(json.dumps(out))
'''
# EfficientNetB0's swish is a tf.custom_gradient: allowed in a predict step (never differentiated).
SWEEP = ("MobileNetV2", "ResNet50", "DenseNet121", "EfficientNetB0", "InceptionV3", "NASNetMobile", "ConvNeXtTiny")


def _application(cache_dir, name: str, size: int) -> dict:
    code = APPLICATION.format(use_cache=cache_dir is not None, cache_dir=str(cache_dir or ""), name=name, size=size)
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"}, timeout=900)


@pytest.mark.parametrize("name", ["MobileNetV3Small", *(pytest.param(name, marks=pytest.mark.slow) for name in SWEEP)])
def test_keras_applications_predict_hits_with_plain_outputs(cache_dir, name):
    size = {"InceptionV3": 75, "NASNetMobile": 224}.get(name, 96 if name == "MobileNetV3Small" else 64)
    plain = _application(None, name, size)
    cold = _application(cache_dir, name, size)
    assert cold["y"] == plain["y"] and not cold["errors"] and not cold["refused"], cold
    assert cold["traces"]["trace_misses"] == 1 and set(cold["reasons"]) <= {"library"}, cold
    warm = _application(cache_dir, name, size)  # verified against a fresh trace
    assert warm["y"] == plain["y"] and not warm["errors"], warm["errors"]
    assert warm["traces"]["trace_hits"] == 1, warm["traces"]


def test_custom_gradients_are_refused_unless_the_trace_is_forward_only():
    """A plain tf.function may be differentiated (the gradient is registered in the tracing process only);
    Keras' predict step never is, so swish's custom gradient does not keep EfficientNet out."""
    import tensorflow as tf

    from graphcache.traces import stored
    from graphcache.traces.walk import Uncacheable

    @tf.function
    def swished(x):
        return tf.nn.silu(x)

    concrete = swished.get_concrete_function(tf.TensorSpec([2], tf.float32))
    library = stored.library_of(concrete.function_def.signature.name)
    with pytest.raises(Uncacheable) as caught:
        stored.check_graph(library)
    assert caught.value.reason == "graph" and "custom gradient" in caught.value.detail
    stored.check_graph(library, forward_only=True)
