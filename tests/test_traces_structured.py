"""Trace keys of structured inputs (graphcache/traces/structure.py): the same in every process, another for any change.

The end-to-end test runs one program in fresh processes (tests.helpers.run_python) under three hash seeds (0, 1 and
random): tf.functions taking a dict, a nested tuple/list, a namedtuple, a namedtuple subclass with a method, a
dict or an OrderedDict, a batch of a ``tf.data.Dataset`` of dicts (``for batch in ds: step(batch)``) and an
iterator over it (its IteratorSpec: the element spec's dict is a protobuf map, serialized in an order of the
process's own), and a functional Keras model with dict inputs and outputs (fit, evaluate, predict). The first
process stores every trace; the two later ones hit every one of them, with plain TensorFlow's results, and add no
entry. Then a variant changes each function's structure (another key order, another nesting, swapped namedtuple
fields, another method, an OrderedDict, another element order): each of those misses and returns plain
TensorFlow's result; the Keras steps, unchanged, hit. The canonical form and the walk of structure classes are
checked in this process.
"""

from __future__ import annotations

import collections
import typing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from .helpers import run_python, trace_child_preamble

BASE = {"dict_keys": ["a", "b", "c"], "nested": "((t1, t2), [t3, (t1, 2)])", "point_fields": "x y",
        "pair_scale": "2.0", "mapping": "dict", "ds_keys": ["u", "v", "w", "z"]}
CHANGED = {"dict_keys": ["c", "a", "b"], "nested": "((t1, t2), [t3, t1, 2])", "point_fields": "y x",
           "pair_scale": "3.0", "mapping": "collections.OrderedDict", "ds_keys": ["w", "u", "z", "v"]}
FUNCTIONS = ("dict_arg", "nested_arg", "point_arg", "pair_arg", "mapping_arg", "batch_step", "consume", "pairs")
KERAS = {"multi_step_on_iterator (functional)": 2, "one_step_on_data_distributed (functional)": 1}  # fit+evaluate

CHILD = '''
import collections, json, logging, sys, warnings
import numpy as np
import tensorflow as tf
import keras

V = {variant!r}
{capture}keras.utils.set_random_seed(3)
rng = np.random.RandomState(0)
t1, t2, t3 = (tf.constant(rng.rand(4).astype("float32")) for _ in range(3))


def weighted(values):
    return tf.add_n([tf.reduce_sum(v) * float(i + 1) for i, v in enumerate(values)])


@tf.function
def dict_arg(d):
    return weighted(d.values())


@tf.function
def nested_arg(s):
    (a, b), rest = s
    return tf.reduce_sum(a) + 2.0 * tf.reduce_sum(b) + float(len(rest)) * tf.reduce_sum(tf.nest.flatten(rest)[0])


Point = collections.namedtuple("Point", V["point_fields"])


@tf.function
def point_arg(p):
    return tf.reduce_sum(p[0] * 2.0 + p[1])


class Pair(collections.namedtuple("Pair", "x y")):
    def total(self):
        return self.x + {pair_scale} * self.y


@tf.function
def pair_arg(p):
    return tf.reduce_sum(p.total())


@tf.function
def mapping_arg(d):
    return tf.reduce_sum(d["a"]) * (2.0 if isinstance(d, collections.OrderedDict) else 1.0)


@tf.function
def batch_step(batch):
    return weighted(batch.values())


@tf.function
def consume(iterator):
    return weighted(next(iterator).values())


@tf.function
def pairs(iterator):
    return tf.reduce_sum(next(iterator).total())


columns = {{k: rng.rand(6, 2).astype("float32") for k in ("u", "v", "w", "z")}}
ds = tf.data.Dataset.from_tensor_slices({{k: columns[k] for k in V["ds_keys"]}}).batch(2)
pair_ds = tf.data.Dataset.from_tensor_slices(Pair(columns["u"], columns["v"])).batch(3)
values = {{
    "dict_arg": float(dict_arg({{k: {{"a": t1, "b": t2, "c": t3}}[k] for k in V["dict_keys"]}})),
    "nested_arg": float(nested_arg({nested})),
    "point_arg": float(point_arg(Point(x=t1, y=t2))),
    "pair_arg": float(pair_arg(Pair(t1, t2))),
    "mapping_arg": float(mapping_arg({mapping}([("a", t1), ("b", t2)]))),
    "batch_step": [float(batch_step(batch)) for batch in ds],
    "consume": float(consume(iter(ds))),
    "pairs": float(pairs(iter(pair_ds))),
}}

a = keras.Input(shape=(4,), name="a")
b = keras.Input(shape=(3,), name="b")
hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b]))
model = keras.Model({{"a": a, "b": b}}, {{"y1": keras.layers.Dense(1, name="y1")(hidden),
                                        "y2": keras.layers.Dense(2, name="y2")(hidden)}})
model.compile(optimizer="adam", loss={{"y1": "mse", "y2": "mae"}}, metrics={{"y2": ["mae"]}})
x = {{"a": rng.rand(32, 4).astype("float32"), "b": rng.rand(32, 3).astype("float32")}}
y = {{"y1": rng.rand(32, 1).astype("float32"), "y2": rng.rand(32, 2).astype("float32")}}
values["fit"] = model.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False).history
values["evaluate"] = model.evaluate(x, y, batch_size=8, verbose=0)
predicted = model.predict(x, batch_size=8, verbose=0)
values["predict"] = {{k: predicted[k].tolist() for k in sorted(predicted)}}
values["weights"] = [w.tolist() for w in model.get_weights()]
out = {{"values": values}}
if {use_cache}:
    cache.wait_for_writes()
    out["entries"] = sorted(r.key for r in cache.entries() if r.kind == "tf_trace")
    out["outcomes"] = outcomes = {{}}
    for level, message in messages:
        for word in ("hit", "stored"):
            if message.startswith(f"graphcache trace {{word}} "):
                outcomes.setdefault(message.split(f"trace {{word}} ")[1].split(" key=")[0], []).append(word)
        if "is not cached" in message and not message.startswith("graphcache: the trace of Dataset_"):
            outcomes.setdefault(message.split("the trace of ")[1].split(" is not")[0], []).append(message)
    out["errors"] = [m for level, m in messages if level == "ERROR"]
    out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
print(json.dumps(out))
'''


def child(cache_dir: Path | None, variant: dict, *, seed: str | None, verify: bool = False) -> dict:
    """One process; ``seed`` is its PYTHONHASHSEED (None: random)."""
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None,
                        nested=variant["nested"], pair_scale=variant["pair_scale"], mapping=variant["mapping"])
    return run_python(code, env={"PYTHONHASHSEED": seed, "GRAPHCACHE_TRACE_VERIFY": "1" if verify else "0"})


def expect(run: dict, functions: str, keras: str) -> None:
    """Every function's trace had ``functions`` as its outcome, each Keras step ``keras``; no error, no warning."""
    wanted = {**{name: [functions] for name in FUNCTIONS}, **{name: [keras] * n for name, n in KERAS.items()}}
    assert run["outcomes"] == wanted, run["outcomes"]
    assert not run["errors"] and not run["warnings"], (run["errors"], run["warnings"])


def test_structured_inputs_hit_in_every_process_and_every_change_misses(cache_dir):
    with ThreadPoolExecutor(2) as pool:
        plain, plain_changed = pool.map(lambda variant: child(None, variant, seed="0"), (BASE, CHANGED))
    assert all(plain["values"][name] != plain_changed["values"][name] for name in FUNCTIONS)  # the variants differ

    cold = child(cache_dir, BASE, seed="0")
    expect(cold, "stored", "stored")
    assert cold["values"] == plain["values"] and len(cold["entries"]) == len(FUNCTIONS) + sum(KERAS.values())

    # Another hash seed, and a random one: the same keys (each hit verified against a fresh trace in the first).
    for seed, verify in (("1", True), (None, False)):
        warm = child(cache_dir, BASE, seed=seed, verify=verify)
        expect(warm, "hit", "hit")
        assert warm["values"] == plain["values"], "a hit returns exactly what plain TensorFlow returns"
        assert warm["entries"] == cold["entries"], "no growth"

    # Each function's structure changed: a miss with plain TensorFlow's result; the unchanged Keras steps hit.
    changed = child(cache_dir, CHANGED, seed="2")
    expect(changed, "stored", "hit")
    assert changed["values"] == plain_changed["values"]
    assert len(changed["entries"]) == len(cold["entries"]) + len(FUNCTIONS)


# -- the canonical form and the structure walk, in this process -------------------------------------------------
def signature(fn, *args) -> str:
    import tensorflow as tf
    from tensorflow.core.function.polymorphism import function_type as function_type_lib

    from graphcache.traces import keying

    concrete = tf.function(fn).get_concrete_function(*args)
    options = SimpleNamespace(polymorphic_type=function_type_lib.FunctionType([]), default_values={})
    return keying.signature_part(concrete.function_type, options)[0]


def first_value(d):
    return next(iter(d.values())) * 1.0


def test_a_map_in_a_proto_is_canonical_whatever_order_it_was_filled_in():
    from tensorflow.core.protobuf import struct_pb2

    from graphcache.traces import structure

    def filled(order: tuple[str, ...], last: str = "w") -> struct_pb2.StructuredValue:
        value = struct_pb2.StructuredValue()
        for key in order:
            value.dict_value.fields[key].string_value = last if key == "w" else key
        return value

    assert structure.canonical(filled(("u", "v", "w"))) == structure.canonical(filled(("w", "u", "v")))
    assert structure.canonical(filled(("u", "v", "w"))) != structure.canonical(filled(("w", "u", "v"), last="x"))


def test_key_order_and_mapping_class_are_in_the_signature():
    import tensorflow as tf

    one, two = tf.ones([2]), tf.zeros([2])
    base = signature(first_value, {"a": one, "b": two})
    assert signature(first_value, {"a": one, "b": two}) == base
    assert signature(first_value, {"b": two, "a": one}) != base  # the function sees its keys in this order
    assert signature(first_value, collections.OrderedDict([("a", one), ("b", two)])) != base

    def element(iterator):
        return first_value(next(iterator))

    columns = {"u": [1.0, 2.0], "v": [3.0, 4.0]}
    forward = tf.data.Dataset.from_tensor_slices(columns)
    backward = tf.data.Dataset.from_tensor_slices({"v": columns["v"], "u": columns["u"]})
    assert signature(element, iter(forward)) == signature(element, iter(forward))
    assert signature(element, iter(forward)) != signature(element, iter(backward))  # the element spec's order


def test_namedtuple_classes_are_keyed_by_fields_defaults_and_methods():
    import tensorflow as tf

    def scaled(p):
        return p.total() * 2.0

    def make(scale: float, name: str = "Pair", defaults: tuple = ()) -> type:
        namespace = {"collections": collections, "SCALE": scale, "__name__": "pairs"}
        exec(f"class {name}(collections.namedtuple('{name}', 'x y', defaults={defaults!r})):\n"  # noqa: S102
             "    def total(self):\n        return self.x + SCALE * self.y\n", namespace)
        return namespace[name]

    one, two = tf.ones([2]), tf.zeros([2])
    base = signature(scaled, make(2.0)(one, two))
    assert signature(scaled, make(2.0)(one, two)) == base  # another class object, the same class
    assert signature(scaled, make(3.0)(one, two)) != base  # a global its method reads
    assert signature(scaled, make(2.0, defaults=(1.0,))(one, two)) != base
    assert signature(scaled, make(2.0, name="Other")(one, two)) != base

    class Typed(typing.NamedTuple):
        x: typing.Any
        y: typing.Any = 0.0

        def total(self):
            return self.x - self.y

    assert signature(scaled, Typed(one, two))  # a typing.NamedTuple with a method: keyed, not refused


def test_a_structure_class_the_walk_refuses_refuses_the_trace():
    import tensorflow as tf

    from graphcache.traces.walk import Uncacheable

    class Noisy(dict):
        def __getitem__(self, key):
            print("read", key)  # a side effect a hit would skip
            return super().__getitem__(key)

    with pytest.raises(Uncacheable) as refused:
        signature(first_value, Noisy(a=tf.ones([2])))
    assert refused.value.reason == "builtin"

    def doubled(self):  # runs in the trace: a key that named the spec only would miss a change of it
        return self.v * 2.0

    # Registered by its __name__, so TensorFlow serializes its spec (by that name); annotations as objects.
    registered = type("Registered", (tf.experimental.ExtensionType,),
                      {"__name__": "graphcache_test.Registered", "__annotations__": {"v": tf.Tensor},
                       "doubled": doubled, "__module__": __name__})  # type() under ABCMeta would say "abc"
    with pytest.raises(Uncacheable):
        signature(lambda value: value.doubled(), registered(v=tf.ones([2])))


def test_made_by_namedtuple_names_only_what_namedtuple_made():
    from graphcache.traces.namedtuples import made_by_namedtuple

    plain = collections.namedtuple("Plain", "x y")
    assert {"x", "y", "_make", "__new__", "_replace"} <= made_by_namedtuple(plain)

    class Typed(typing.NamedTuple):
        x: int

        def __repr__(self):
            return "mine"

        def double(self):
            return self.x * 2

    made = made_by_namedtuple(Typed)
    assert "x" in made and "_make" in made and "double" not in made and "__repr__" not in made
    assert made_by_namedtuple(type("Sub", (plain,), {})) == frozenset()  # a subclass: its base is the namedtuple
    assert made_by_namedtuple(tuple) == frozenset()
