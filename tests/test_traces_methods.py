"""tf.function methods (``@tf.function def __call__(self, x)`` on a tf.Module) served from the trace cache.

As tests/test_traces.py: real TensorFlow in fresh processes (tests.helpers.run_python), every one with
``GRAPHCACHE_TRACE_VERIFY=1`` (each hit is traced anyway and compared: a stale hit would be an ERROR). A cold
process stores, a warm one hits with plain TensorFlow's results, and each thing a method's trace reads off its
object (a float attribute, a variable's shape, the method's code, a helper method's code, a nested module's
attribute), changed between the processes, is a miss with plain's result. Two instances of one class share a
key and each binds its own variables (the variables' values are not in the key: a later process with other
values hits and must compute with them). The instance walk's rules are checked in this process.
"""

from __future__ import annotations

import types

import pytest

from .helpers import run_python, trace_child_preamble

BASE = {"scale": 0.5, "var_shape": [2, 3], "own": "+ 1.0", "helper": "y * 0.25 + self.bias", "offset": 1.5,
        "a": 1.0, "b": 2.0}
CHANGED = {"scale": 0.75, "var_shape": [4, 3], "own": "- 1.0", "helper": "y * 0.25 - self.bias", "offset": 2.5,
           "a": 3.0, "b": 5.0}
# Each reads one thing CHANGED changes (pair_a and pair_b read only variables' values: not in the key).
VARIANT_CASES = ("scaled", "shaped", "own_code", "with_helper", "outer")
# pair_a_rows: pair_a's method traced again for another shape; lazy: its retrace, after its first trace made a variable
CACHED = (*VARIANT_CASES, "pair_a", "pair_a_rows", "pair_b", "lazy")

CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf

V = {variant!r}
{capture}


class Scaled(tf.Module):
    def __init__(self, scale):
        super().__init__()
        self.w = tf.Variable(np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(4, 4))
        self.scale = scale

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(tf.matmul(x, self.w)) * self.scale


class Shaped(tf.Module):
    def __init__(self, shape):
        super().__init__()
        self.v = tf.Variable(tf.ones(shape))

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(self.v) + tf.reduce_sum(x)


class OwnCode(tf.Module):
    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(x) {own}


class WithHelper(tf.Module):
    def __init__(self):
        super().__init__()
        self.bias = tf.Variable(0.25)

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(self.helper(x))

    def helper(self, y):
        return {helper}


class Inner(tf.Module):
    def __init__(self, offset):
        super().__init__()
        self.k = tf.Variable(tf.fill([4], 0.5))
        self.offset = offset

    def __call__(self, x):
        return x * self.k + self.offset


class Outer(tf.Module):
    def __init__(self, offset):
        super().__init__()
        self.inner = Inner(offset)

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(self.inner(x))


class Pair(tf.Module):
    def __init__(self, value):
        super().__init__()
        self.w = tf.Variable(tf.fill([4, 4], value))

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(tf.matmul(x, self.w))


class Thing:
    def __init__(self):
        self.factor = 3.0


class HoldsObject(tf.Module):
    def __init__(self):
        super().__init__()
        self.thing = Thing()

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(x) * self.thing.factor


class Writes(tf.Module):
    @tf.function
    def __call__(self, x):
        self.calls = 1  # a side effect of tracing: a hit would skip it
        return tf.reduce_sum(x) + 1.0


class Lazy(tf.Module):
    def __init__(self):
        super().__init__()
        self.state = {{}}

    @tf.function
    def __call__(self, x):
        if "v" not in self.state:
            self.state["v"] = tf.Variable(3.0)  # made by the first trace
        return tf.reduce_sum(x) * self.state["v"]


before = cache.stats() if {use_cache} else None
x = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) / 16.0)
row = tf.constant(np.linspace(0.0, 1.0, 4, dtype=np.float32))
values = {{
    "scaled": Scaled(V["scale"])(x),
    "shaped": Shaped(V["var_shape"])(x),
    "own_code": OwnCode()(x),
    "with_helper": WithHelper()(x),
    "outer": Outer(V["offset"])(row),
}}
pair_a = Pair(V["a"])
values["pair_a"] = pair_a(x)
values["pair_a_rows"] = pair_a(x[:2])  # a second trace of the bound method (autograph has converted it by now)
if {use_cache}:
    cache.wait_for_writes()  # pair_a's entry is there: pair_b (same key) hits it in this process too
values["pair_b"] = Pair(V["b"])(x)
values["holds_object"] = HoldsObject()(x)
writes = Writes()
values["writes"] = writes(x)
values["lazy"] = Lazy()(x)
out = {{"values": {{name: value.numpy().tolist() for name, value in values.items()}}, "calls": writes.calls}}
if {use_cache}:
    cache.wait_for_writes()
    after = cache.stats()
    out["traces"] = {{name: after.traces[name] - before.traces[name] for name in after.traces}}
    out["reasons"] = {{name: count - before.trace_reasons.get(name, 0) for name, count in after.trace_reasons.items()
                      if count != before.trace_reasons.get(name, 0)}}
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
print(json.dumps(out))
'''


def child(cache_dir, variant: dict) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None,
                        own=variant["own"], helper=variant["helper"])
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"})


def _logged(run: dict, text: str) -> list[str]:
    return [message for message in run["log"] if text in message]


def test_a_method_warm_hits_binds_each_instance_and_every_change_misses(cache_dir):
    plain = child(None, BASE)
    cold = child(cache_dir, BASE)
    assert cold["values"] == plain["values"] and not cold["errors"] and not cold["warnings"], cold
    # pair_b hits pair_a's entry in the same process; lazy's first trace made a variable, its retrace is stored
    assert cold["traces"] == {"trace_hits": 1, "trace_misses": len(CACHED) - 1, "trace_uncacheable": 3}
    assert cold["reasons"] == {"method": 1, "writes_state": 1, "creates_variables": 1}
    assert _logged(cold, "not cached (method): self.thing: ") and _logged(cold, "assigns self.calls")
    assert cold["calls"] == 1

    warm = child(cache_dir, BASE)  # every hit traced anyway and compared
    assert warm["values"] == plain["values"], "a hit returns exactly what plain TensorFlow returns"
    assert not warm["errors"] and not warm["warnings"], (warm["errors"], warm["warnings"])
    assert warm["traces"] == {"trace_hits": len(CACHED), "trace_misses": 0, "trace_uncacheable": 3}
    assert len(_logged(warm, "verified against a fresh trace")) == len(CACHED)
    assert warm["reasons"] == cold["reasons"] and warm["calls"] == 1

    # Each class's one dependency changed: misses with plain TensorFlow's results, no stale hit. The pairs'
    # variables hold other values (not in the key): they hit, and compute with this process's variables.
    plain_changed = child(None, CHANGED)
    changed = child(cache_dir, CHANGED)
    assert not changed["errors"] and not changed["warnings"], (changed["errors"], changed["warnings"])
    assert changed["values"] == plain_changed["values"]
    for name in VARIANT_CASES:
        assert changed["values"][name] != plain["values"][name], name
    assert changed["values"]["pair_a"] != changed["values"]["pair_b"] != plain["values"]["pair_b"]
    assert changed["traces"] == {"trace_hits": 4, "trace_misses": len(VARIANT_CASES), "trace_uncacheable": 3}
    for cls in ("Scaled", "Shaped", "OwnCode", "WithHelper", "Outer"):
        assert _logged(changed, f"trace miss __call__ ({cls}): differs from the stored trace"), cls


KERAS_CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf
import keras
{preamble}
keras.utils.set_random_seed(0)


def inner():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, activation="relu", kernel_initializer="ones", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", name="out")(hidden))


class OneStep(keras.Model):  # TensorFlow's text generation tutorial's shape
    def __init__(self, model, temperature):
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.mask = tf.constant([0.0, -1.0])

    @tf.function
    def step(self, x):
        return self.model(x) / self.temperature + self.mask


stepper = OneStep(inner(), {temperature})
x = tf.constant(np.arange(8, dtype="float32").reshape(2, 4) / 10.0)
out = {{"values": [stepper.step(x).numpy().tolist(), stepper.step(x + 1.0).numpy().tolist()]}}
if {cached}:
    cache.wait_for_writes()
    out.update(stats=cache.stats().traces, errors=[m for level, m in messages if level == "ERROR"])
print(json.dumps(out))
'''


def _keras_method_child(cache_dir, temperature: float) -> dict:
    code = KERAS_CHILD.format(preamble=trace_child_preamble(cache_dir), temperature=temperature,
                              cached=cache_dir is not None)
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"})


def test_a_keras_model_method_hits_in_a_later_process_and_an_attribute_it_reads_changed_misses(cache_dir):
    plain = _keras_method_child(None, 2.0)
    cold = _keras_method_child(cache_dir, 2.0)
    assert cold["values"] == plain["values"] and not cold["errors"]
    assert cold["stats"]["trace_misses"] == 1 and cold["stats"]["trace_uncacheable"] == 0  # refused as a method before
    warm = _keras_method_child(cache_dir, 2.0)  # verified: each hit traced anyway and compared
    assert warm["values"] == plain["values"] and not warm["errors"]
    assert warm["stats"] == {**cold["stats"], "trace_hits": 1}  # the cache dir's counts, over its processes
    changed = _keras_method_child(cache_dir, 4.0)
    assert changed["values"] == _keras_method_child(None, 4.0)["values"] != plain["values"]
    assert changed["stats"] == {**warm["stats"], "trace_misses": 2}


# -- the instance walk, in this process -----------------------------------------------------------------------
def _method(obj, name: str = "__call__"):
    from graphcache.traces import instance

    attr = getattr(type(obj), name)
    function = attr.python_function if hasattr(attr, "python_function") else attr
    return instance.bound_method(types.MethodType(function, obj))


def _key(obj, name: str = "__call__") -> tuple[str, dict]:
    from graphcache.traces import instance

    walk = instance.walk_method(_method(obj, name))
    return walk.digest(), walk.bindings


def _refused(obj, name: str = "__call__") -> tuple[str, str]:
    from graphcache.traces.walk import Uncacheable

    with pytest.raises(Uncacheable) as caught:
        _key(obj, name)
    return caught.value.reason, caught.value.detail


def _modules():
    """Classes for the walk tests (made here: tensorflow is imported by the test, not at collection)."""
    import tensorflow as tf

    class Sub(tf.Module):
        def __init__(self, offset, size=3):
            super().__init__()
            self.k = tf.Variable(tf.ones([size]))
            self.offset = offset

    class Base(tf.Module):
        def base_part(self, x):
            return x * self.base_scale

    class Model(Base):
        def __init__(self, scale=2.0, size=3, offset=0.5, unused=None):
            super().__init__()
            self.w = tf.Variable(tf.ones([size]))
            self.scale = scale
            self.base_scale = 1.0
            self.sub = Sub(offset)
            self.layers = [Sub(offset), {"v": tf.Variable(1.0)}]
            self.unused = unused

        @tf.function
        def __call__(self, x):
            return self.helper(x) + self.doubled + super().base_part(x) + self.sub.k * self.sub.offset

        def helper(self, x):
            return x * self.w * self.scale + self.layers[1]["v"]

        @property
        def doubled(self):
            return self.scale * 2

    return Model, Sub


def test_the_method_key_reads_self_through_helpers_properties_super_and_nested_modules():
    import tensorflow as tf

    Model, _ = _modules()
    first, bindings = _key(Model())
    second, other = _key(Model())
    assert first == second  # two instances, same values and shapes: one key
    assert {"self.w", "self.sub.k", "self.layers[1]['v']"} <= set(bindings) and bindings["self.w"] is not other["self.w"]
    assert _key(Model(scale=3.0))[0] != first  # a float read by a helper and a property
    assert _key(Model(size=4))[0] != first  # a variable's shape
    assert _key(Model(offset=0.75))[0] != first  # a nested module's attribute
    assert _key(Model(unused=object()))[0] == first  # an attribute no reached code reads: not in the key
    changed = Model()
    changed.layers[0].offset = 9.0  # a module in a list: its whole state is keyed
    assert _key(changed)[0] != first
    changed = Model()
    changed.base_scale = 5.0  # read by a base-class method reached through super()
    assert _key(changed)[0] != first
    scoped = _scoped_module(tf)
    digest, bindings = _key(scoped("a"))
    assert set(bindings) >= {"self.w"} and _key(scoped("a"))[0] == digest != _key(scoped("b"))[0]  # its name scope


def _scoped_module(tf):
    class Scoped(tf.Module):
        def __init__(self, name):
            super().__init__(name=name)
            self.w = tf.Variable(1.0)

        @tf.function
        def __call__(self, x):
            with self.name_scope:  # a library attribute: the object's whole state is keyed
                return x * tf.add_n(self.trainable_variables)

    return Scoped


def test_the_method_key_refuses_what_it_cannot_prove():
    import tensorflow as tf

    Model, _ = _modules()

    class Thing:
        factor = 2.0

    class Writes(tf.Module):
        def __call__(self, x):
            self.last = x
            return x

    class HandsOn(tf.Module):
        def __call__(self, x):
            return describe(self) * x

    class Rebinds(tf.Module):
        def __init__(self):
            super().__init__()
            self.other = Model()

        def __call__(self, x):
            self = self.other
            return x * self.scale

    class Dynamic(tf.Module):
        def __getattr__(self, name):
            return 1.0

        def __call__(self, x):
            return x * self.anything

    class ReadsDict:
        def __call__(self, x):
            return x * len(self.__dict__)

    class VarArgs(tf.Module):
        def __call__(self, x):
            return self.helper(x)

        def helper(*args):  # self is args[0]
            return args[1] * args[0].scale

    class KeepsSuper(Model):
        def helper(self, x):
            parent = super()  # what is read off it later is not followed
            return parent.helper(x)

    class Plain:
        __slots__ = ("scale",)

        def __call__(self, x):
            return x * self.scale

    holds = Model()
    holds.scale = Thing()
    assert _refused(holds)[0] == "method" and "self.scale" in _refused(holds)[1]  # a plain user object
    reason, detail = _refused(Writes())
    assert reason == "writes_state" and detail.endswith("Writes.__call__ assigns self.last (it may run in the trace)")
    assert "hands self to other code" in _refused(HandsOn())[1]
    assert _refused(Rebinds())[0] == "writes_state"
    assert "defines __getattr__" in _refused(Dynamic())[1]
    assert "self.__dict__ is a getset_descriptor" in _refused(ReadsDict())[1]
    assert "__slots__" in _refused(Plain())[1]
    assert "takes self in *args" in _refused(VarArgs())[1]
    assert "uses super() other than as super().name" in _refused(KeepsSuper())[1]
    import keras

    class KerasLayer(keras.layers.Layer):  # not by this walk: objects.walk_method keys a Keras object's method
        @tf.function
        def __call__(self, x):
            return x * 2.0

    assert "derives from keras" in _refused(KerasLayer())[1]
    sub_with_object = Model()
    sub_with_object.sub.helper = Thing()  # any attribute of a nested module is keyed: this one cannot be
    assert _refused(sub_with_object)[0] == "method"


def describe(obj) -> float:
    return 1.0


def test_user_function_recognises_a_decorated_method_and_refuses_a_class_method():
    import tensorflow as tf
    from tensorflow.python.eager.polymorphic_function import tf_method_target

    from graphcache.traces import instance
    from graphcache.traces.walk import Uncacheable

    Model, _ = _modules()
    model = Model()
    function = Model.__call__.python_function
    target = types.MethodType(function, tf_method_target.TfMethodTarget(__import__("weakref").ref(model), function))
    method = instance.bound_method(target)
    assert method.instance is model and method.function is function
    with pytest.raises(Uncacheable) as caught:
        instance.bound_method(types.MethodType(function, Model))
    assert caught.value.reason == "method"
    with pytest.raises(Uncacheable) as caught:
        instance.bound_method(types.MethodType(tf.Module.__init__, model))
    assert caught.value.reason == "library"
