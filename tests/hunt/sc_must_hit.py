"""What must still hit: an unchanged program run twice is a trace hit in its second process, with plain
TensorFlow's result. A key that refuses or misses everything would pass the hunt; these keep it useful."""

from __future__ import annotations

from .model import MUST_HIT, Installed, Scenario, Variant

SAME = Variant("2.0")

SCENARIOS = [
    Scenario(
        "hit_global_and_closure", MUST_HIT,
        program='''
import tensorflow as tf
SCALE = @V@

def make(c):
    @tf.function
    def f(x):
        return tf.reduce_sum(x * c) * SCALE
    return f

report(make(1.5)(tf.ones([4])))
''', a=SAME, b=SAME, why="a plain tf.function over a global and a closure"),
    Scenario(
        "hit_module_method", MUST_HIT,
        program='''
import tensorflow as tf

class Model(tf.Module):
    def __init__(self, scale):
        super().__init__()
        self.w = tf.Variable(tf.fill([4, 4], 0.25))
        self.scale = scale

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(tf.matmul(x, self.w)) * self.scale

report(Model(@V@)(tf.ones([4, 4])))
''', a=SAME, b=SAME, why="a tf.Module method"),
    Scenario(
        "hit_namespace_package_helper", MUST_HIT,
        files={"proj/ops.py": "SCALE = @V@\n\ndef scale(x):\n    return x * SCALE\n"},
        program='''
import tensorflow as tf
from proj.ops import scale

@tf.function
def f(x):
    return tf.reduce_sum(scale(x))

report(f(tf.ones([4])))
''', a=SAME, b=SAME, why="a helper in a project folder without __init__.py"),
    Scenario(
        "hit_installed_package_helper", MUST_HIT,
        installed=(Installed("userpkg", "1.0", {"__init__.py": '__version__ = "1.0"\nSCALE = @V@\n\n'
                                                                 "def scale(x):\n    return x * SCALE\n"}),),
        program='''
import tensorflow as tf
import userpkg

@tf.function
def f(x):
    return tf.reduce_sum(userpkg.scale(x))

report(f(tf.ones([4])))
''', a=SAME, b=SAME, why="a helper in the user's package installed non-editable"),
    Scenario(
        "hit_keras_predict", MUST_HIT,
        program='''
import numpy as np
import keras
keras.utils.set_random_seed(0)

inputs = keras.Input((4,))
hidden = keras.layers.Dense(8, activation="relu")(inputs)
model = keras.Model(inputs, keras.layers.Dense(2)(hidden))
report(model.predict(np.ones((3, 4), np.float32) * @V@, verbose=0))
''', a=SAME, b=SAME, why="model.predict of a small functional Keras model"),
]
