"""Structured inputs (graphcache/traces/structure.py): a structure that differs between two processes only in what
a TraceType's proto leaves out or TensorFlow compares as equal: a dict's key order in the program text (in an
argument, in a tf.data element spec), a Mapping's class, a namedtuple's field order, a method of a namedtuple class
(as an argument, as a dataset's element). The traced function sees each, so each must be another key."""

from __future__ import annotations

from .model import MUST_HIT, STRUCTURE, Scenario, Variant

ITERATE = "tf.stack([tf.reduce_sum(v) * float(i + 1) for i, v in enumerate({}.values())])"
PAIR = '''
class Pair(collections.namedtuple("Pair", "x y")):
    def total(self):
        return self.x + @V@ * self.y
'''

SCENARIOS = [
    Scenario(
        "dict_key_order", STRUCTURE,
        program=f'''
import tensorflow as tf
a, b, c = tf.ones([2]), tf.fill([2], 2.0), tf.fill([2], 3.0)

@tf.function
def f(d):
    return {ITERATE.format("d")}

report(f(@V@))
''', a=Variant('{"a": a, "b": b, "c": c}'), b=Variant('{"c": c, "a": a, "b": b}'),
        why="a dict argument's key order in the program text (the trace iterates its values)"),
    Scenario(
        "dataset_dict_key_order", STRUCTURE,
        program=f'''
import tensorflow as tf
columns = {{"u": [[1.0, 2.0]], "v": [[3.0, 5.0]], "w": [[7.0, 11.0]]}}
ds = tf.data.Dataset.from_tensor_slices({{k: columns[k] for k in @V@}})

@tf.function
def f(iterator):
    return {ITERATE.format("next(iterator)")}

report(f(iter(ds)))
''', a=Variant('("u", "v", "w")'), b=Variant('("w", "u", "v")'),
        why="the key order of a tf.data element spec's dict (a protobuf map in the IteratorSpec's proto)"),
    Scenario(
        "dataset_dict_batch_key_order", STRUCTURE,
        program=f'''
import tensorflow as tf
columns = {{"u": [[1.0, 2.0]], "v": [[3.0, 5.0]], "w": [[7.0, 11.0]]}}
ds = tf.data.Dataset.from_tensor_slices({{k: columns[k] for k in @V@}})

@tf.function
def step(batch):
    return {ITERATE.format("batch")}

report([step(batch) for batch in ds])
''', a=Variant('("u", "v", "w")'), b=Variant('("w", "u", "v")'),
        why="for batch in ds: step(batch), the batch a dict in the dataset's key order"),
    Scenario(
        "namedtuple_swapped_fields", STRUCTURE,
        program='''
import collections
import tensorflow as tf
Point = collections.namedtuple("Point", "@V@")

@tf.function
def f(p):
    return p[0] * 2.0 + p[1]

report(f(Point(x=tf.ones([2]), y=tf.fill([2], 3.0))))
''', a=Variant("x y"), b=Variant("y x"), why="a namedtuple argument's field order"),
    Scenario(
        "namedtuple_method", STRUCTURE,
        program=f'''
import collections
import tensorflow as tf
{PAIR}

@tf.function
def f(p):
    return tf.reduce_sum(p.total())

report(f(Pair(tf.ones([2]), tf.ones([2]))))
''', a=Variant("2.0"), b=Variant("3.0"), why="a method of a namedtuple argument's class (its proto: name, fields)"),
    Scenario(
        "mapping_class", STRUCTURE,
        program='''
import collections
import tensorflow as tf

@tf.function
def f(d):
    return d["a"] * (2.0 if isinstance(d, collections.OrderedDict) else 1.0)

report(f(@V@([("a", tf.ones([2]))])))
''', a=Variant("dict"), b=Variant("collections.OrderedDict"),
        why="a Mapping argument's class (TensorFlow's Dict type compares a dict and an OrderedDict as equal)"),
    Scenario(
        "dataset_namedtuple_method", STRUCTURE,
        program=f'''
import collections
import tensorflow as tf
{PAIR}
ds = tf.data.Dataset.from_tensor_slices(Pair([[1.0, 2.0]], [[3.0, 4.0]]))

@tf.function
def f(iterator):
    return next(iterator).total()

report(f(iter(ds)))
''', a=Variant("2.0"), b=Variant("3.0"), why="a method of the namedtuple class of a tf.data element spec"),
]

SAME = Variant("2.0")
MUST_HIT_SCENARIOS = [
    Scenario(
        "hit_dataset_dict_iterator", MUST_HIT,
        program='''
import tensorflow as tf
names = ("alpha", "beta", "gamma", "delta", "eps", "zeta")
ds = tf.data.Dataset.from_tensor_slices({k: [[float(i), i + 0.5]] for i, k in enumerate(names)})

@tf.function
def f(iterator):
    return tf.stack([tf.reduce_sum(v) * @V@ for v in next(iterator).values()])

report(f(iter(ds)))
''', a=SAME, b=SAME, why="a function of an iterator over a dataset of dicts (its element spec holds a protobuf map)"),
    Scenario(
        "hit_keras_dict_fit", MUST_HIT,
        program='''
import numpy as np
import keras
keras.utils.set_random_seed(0)

a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b]))
model = keras.Model({"a": a, "b": b}, {"y1": keras.layers.Dense(1, name="y1")(hidden),
                                      "y2": keras.layers.Dense(2, name="y2")(hidden)})
model.compile(optimizer="adam", loss={"y1": "mse", "y2": "mae"})
rng = np.random.RandomState(0)
x = {"a": rng.rand(16, 4).astype("float32"), "b": rng.rand(16, 3).astype("float32")}
y = {"y1": rng.rand(16, 1).astype("float32") * @V@, "y2": rng.rand(16, 2).astype("float32")}
losses = model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False).history["loss"]
report([*losses, *model.evaluate(x, y, batch_size=8, verbose=0)])
''', a=SAME, b=SAME, why="fit and evaluate of a functional Keras model with dict inputs and outputs"),
]
