"""Objects passed as a tf.function's arguments (traces/keying.py ``Arguments``): ``train(model, x, y)`` with a
tf.Module or a Keras model, the way TensorFlow's guides write a training function. TensorFlow types such an
argument by a weak reference (equal only to itself, no serialization); the key walks the object instead, as
a global holding it would be walked (objects.py), at ``arg:<name>``. Each scenario changes what the function
reads through the argument between the variants; the must-hit check runs the module's loop unchanged twice.
"""

from __future__ import annotations

from .model import LIBRARY_STATE, MUST_HIT, UNWALKED, Scenario, Variant

MODULE = '''
import numpy as np
import tensorflow as tf


class Linear(tf.Module):
    def __init__(self, rate):
        super().__init__()
        self.w = tf.Variable(tf.fill([3, 1], 0.5))
        self.b = tf.Variable(tf.zeros([1]))
        self.rate = rate

    @tf.function
    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b * <BIAS>


@tf.function
def train(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
    dw, db = tape.gradient(loss, [model.w, model.b])
    model.w.assign_sub(model.rate * dw)
    model.b.assign_sub(model.rate * db)
    return loss


linear = Linear(<RATE>)
x = tf.constant(np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3))
y = tf.reduce_sum(x, axis=1, keepdims=True) * 2.0 + 1.0
report([float(train(linear, x, y)) for _ in range(3)] + linear.w.numpy().ravel().tolist())
'''


def module(rate: str = "0.1", bias: str = "1.0") -> str:
    return MODULE.replace("<RATE>", rate).replace("<BIAS>", bias)


KERAS = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)

generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="@V@", name="d"),
                              keras.layers.Dense(2, name="o")], name="g")


@tf.function
def generate(model, noise):
    return model(noise, training=False)


noise = tf.constant(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
report(generate(generator, noise))
'''

PLAIN_OBJECT = '''
import tensorflow as tf


class Config:
    def __init__(self, scale):
        self.scale = scale


@tf.function
def scaled(config, x):
    return x * config.scale


report(scaled(Config(@V@), tf.constant([1.0, 2.0])))
'''

# The same module read from a global (train(x, y) reads ``linear``): stale before the class walk keyed a
# tf.function __call__ (walk.py CLASS_CODE; the class walk skipped every dunder but plain functions).
GLOBAL = module(bias="@V@").replace("def train(model, x, y):", "def train(x, y):\n    model = linear").replace(
    "train(linear, x, y)", "train(x, y)")

# The module's __call__ called again at the top after train (TensorFlow serves it from the trace made inside
# train's): that nested trace is stored as its own entry and made again when train hits (traces/nested.py).
NESTED = module(bias="@V@").replace(
    "report([float(train(linear, x, y)) for _ in range(3)] + linear.w.numpy().ravel().tolist())",
    "losses = [float(train(linear, x, y)) for _ in range(3)]\n"
    "report(losses + linear(x).numpy().ravel().tolist() + [linear.__call__.experimental_get_tracing_count()])")

SCENARIOS = [
    Scenario("arg_module_attribute", UNWALKED, program=module(rate="@V@"), a=Variant("0.1"), b=Variant("0.05"),
             why="a tf.Module argument's attribute (its learning rate) read by the tf.function it is passed to"),
    Scenario("arg_module_method_code", UNWALKED, program=module(bias="@V@"), a=Variant("1.0"), b=Variant("0.5"),
             why="a constant in the code of a tf.Module argument's tf.function method, called by the function"),
    Scenario("global_module_method_code", UNWALKED, program=GLOBAL, a=Variant("1.0"), b=Variant("0.5"),
             why="a constant in a global tf.Module's tf.function __call__, which the tf.function calls"),
    Scenario("arg_keras_model_activation", LIBRARY_STATE, program=KERAS, a=Variant("relu"), b=Variant("tanh"),
             why="a Keras model argument's config (a layer's activation), as DCGAN's generate(model, seed)"),
    Scenario("arg_plain_object", UNWALKED, program=PLAIN_OBJECT, a=Variant("2.0"), b=Variant("3.0"),
             why="an attribute of a plain user object passed as an argument (refused: not an object the key walks)"),
    Scenario("arg_module_nested_then_top", UNWALKED, program=NESTED, a=Variant("1.0"), b=Variant("0.5"),
             why="a tf.Module's __call__ traced inside train(model, ...) and then called at the top: its nested trace"),
]

MUST_HIT_ARGUMENTS = [
    Scenario("hit_module_argument", MUST_HIT, program=module(), a=Variant("1.0"), b=Variant("1.0"),
             why="a tf.Module passed to the tf.function that trains it, train(model, x, y)"),
    Scenario("hit_module_nested_then_top", MUST_HIT, program=NESTED, a=Variant("1.0"), b=Variant("1.0"),
             why="train(model, ...) and the model's __call__ at the top, both hit in the first later process"),
]
