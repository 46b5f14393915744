"""Objects passed as a tf.function's arguments (``train(model, x, y)``), and the code of a class's dunder methods.

TensorFlow types an object argument (a tf.Module, a Keras model) by a weak reference: equal only to itself,
with no serialization, so such a trace was refused (``signature``). The key now walks the object as a global
holding it is walked (traces/keying.py ``Arguments``, objects.py's rules) at ``arg:<name>``. The corpus' DCGAN
(``generate(generator, seed)``) and tf.Module loop (``train(model, dataset)``) hit with it.

The class walk skipped every dunder attribute but plain functions, so a ``@tf.function def __call__`` (a
``Function`` object) of a tf.Module reached by a trace was not keyed: changing its code between two processes
served the first one's trace (the hunt's ``global_module_method_code``, stale before the fix).

Real TensorFlow in fresh processes, every hit traced anyway and compared (``GRAPHCACHE_TRACE_VERIFY=1``). The
module whose tf.function ``__call__`` is read is called forward only: a nested tf.function under a GradientTape
makes forward and backward functions whose names (tracing counters) sit in string attributes the verify's
canonical hash does not rename, so a hit's verify in a process that traced another number of functions first
reports a difference that is only those counters (seen on the corpus' tf_module_loop; left to the verify).
"""

from __future__ import annotations

from .helpers import run_python, trace_child_preamble

CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf
import keras

V = {variant!r}
{capture}
keras.utils.set_random_seed(0)
before = cache.stats() if "cache" in globals() else None


class Linear(tf.Module):
    def __init__(self, rate):
        super().__init__()
        self.w = tf.Variable(tf.fill([3, 1], 0.5))
        self.b = tf.Variable(tf.zeros([1]))
        self.rate = rate

    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b


class Biased(tf.Module):
    def __init__(self):
        super().__init__()
        self.b = tf.Variable(tf.ones([1]))

    @tf.function
    def __call__(self, x):
        return x + self.b * BIAS


class Config:
    def __init__(self, scale):
        self.scale = scale


BIAS = V["bias"]


@tf.function
def train(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
    dw, db = tape.gradient(loss, [model.w, model.b])
    model.w.assign_sub(model.rate * dw)
    model.b.assign_sub(model.rate * db)
    return loss


@tf.function
def predict(model, x):
    return model(x) * 2.0


@tf.function
def generate(model, noise):
    return model(noise, training=False)


@tf.function
def scaled(config, x):
    return x * config.scale


generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation=V["activation"]),
                              keras.layers.Dense(2)])
linear = Linear(V["rate"])
x = tf.constant(np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3))
y = tf.reduce_sum(x, axis=1, keepdims=True) * 2.0 + 1.0
values = {{"train": [float(train(linear, x, y)) for _ in range(3)] + linear.w.numpy().ravel().tolist(),
          "generate": generate(generator, tf.ones([2, 4])).numpy().tolist(),
          "predict": predict(Biased(), tf.constant([1.0, 2.0])).numpy().tolist(),
          "scaled": scaled(Config(2.0), tf.constant([1.0, 2.0])).numpy().tolist()}}
out = {{"values": values, "errors": [m for level, m in messages if level == "ERROR"]}}
if "cache" in globals():
    cache.wait_for_writes()
    stats = cache.stats()
    out["traces"] = {{k: stats.traces[k] - before.traces[k] for k in ("trace_hits", "trace_misses")}}
    out["reasons"] = {{k: n - before.trace_reasons.get(k, 0) for k, n in stats.trace_reasons.items()
                      if n - before.trace_reasons.get(k, 0)}}
print(json.dumps(out))
'''

BASE = {"rate": 0.1, "bias": 1.0, "activation": "relu"}


def child(cache_dir, variant: dict) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir))
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"})


def test_object_arguments_hit_and_each_thing_read_through_them_is_keyed(cache_dir):
    plain = child(None, BASE)
    cold = child(cache_dir, BASE)
    assert cold["values"] == plain["values"] and not cold["errors"], cold
    assert cold["traces"] == {"trace_hits": 0, "trace_misses": 3}
    assert cold["reasons"] == {"value": 1}  # scaled(Config(...)): a plain object's attributes are not walked

    warm = child(cache_dir, BASE)
    assert warm["values"] == plain["values"] and not warm["errors"], warm
    assert warm["traces"] == {"trace_hits": 3, "trace_misses": 0}

    # The argument module's attribute (train), the code an argument's tf.function __call__ runs (a global it
    # reads: predict), the Keras argument's config (generate), each read by one function, all changed in one
    # process: each function misses, with plain TensorFlow's result.
    variant = {"rate": 0.05, "bias": 0.5, "activation": "tanh"}
    plain_changed = child(None, variant)
    changed = child(cache_dir, variant)
    assert changed["values"] == plain_changed["values"] and not changed["errors"], changed
    for name in ("train", "predict", "generate"):
        assert plain_changed["values"][name] != plain["values"][name], name
    assert changed["traces"] == {"trace_hits": 0, "trace_misses": 3}


def test_the_class_walk_keys_a_tf_function_dunder_and_other_code_dunders():
    import tensorflow as tf

    from graphcache.traces.walk import Walk

    def classes(constant: float):
        class Scaled(tf.Module):
            @tf.function
            def __call__(self, x):
                return x * constant

        class Made:
            @staticmethod
            def __new__(cls):
                return object.__new__(cls) if constant else None

        class Sized:
            @property
            def __len__(self):
                return lambda: int(constant)

        return Scaled, Made, Sized

    def digest(cls) -> str:
        walk = Walk()
        walk.value(cls, "g:cls")
        return walk.digest()

    for first, second in zip(classes(1.0), classes(2.0), strict=True):
        assert digest(first) != digest(second), first.__qualname__  # the closure's constant, through the dunder
    for first, again in zip(classes(1.0), classes(1.0), strict=True):
        assert digest(first) == digest(again), first.__qualname__
