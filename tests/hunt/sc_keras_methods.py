"""A ``@tf.function`` method of a Keras model or layer subclass (TensorFlow's text generation tutorial's
``OneStep(tf.keras.Model)`` and its ``generate_one_step``): keyed as a Keras object read by a trace is (its
classes, configs, what it holds, its variables; objects.py) plus the method's own ``self.<name>`` reads. What
such a key must hold: a plain attribute the method reads, an eager tensor it holds, a layer of the model it
calls, an attribute read through a chain, and the variables library code hands it (``trainable_variables``)."""

from __future__ import annotations

from .model import KERAS_MODEL, MUST_HIT, Scenario, Variant

HEADER = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)
X = np.arange(8, dtype="float32").reshape(2, 4) / 10.0


def inner(activation="relu"):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, activation=activation, kernel_initializer="ones", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", name="out")(hidden))
'''

STEP = '''
class Step(keras.Model):
    def __init__(self, model, temperature):
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.mask = tf.constant([0.0, MASKED])

    @tf.function
    def step(self, x):
        return self.model(x) / self.temperature + self.mask
'''

SCENARIOS = [
    Scenario("keras_method_self_scalar", KERAS_MODEL, program=HEADER + "MASKED = 0.0\n" + STEP + '''
stepper = Step(inner(), @V@)  # tf.function holds its object weakly: kept alive, as the tutorial does
report(stepper.step(tf.constant(X)))
''', a=Variant("1.0"), b=Variant("0.5"), why="a plain attribute a Keras model's tf.function method reads off self"),
    Scenario("keras_method_held_tensor", KERAS_MODEL, program=HEADER + "MASKED = @V@\n" + STEP + '''
stepper = Step(inner(), 1.0)
report(stepper.step(tf.constant(X)))
''', a=Variant("0.0"), b=Variant("-1.0"), why="an eager tensor a Keras model holds and its method adds"),
    Scenario("keras_method_inner_layer", KERAS_MODEL, program=HEADER + "MASKED = 0.0\n" + STEP + '''
stepper = Step(inner("@V@"), 1.0)
report(stepper.step(tf.constant(X - 0.5)))
''', a=Variant("relu"), b=Variant("tanh"), why="a layer's config in the model the method calls through self"),
    Scenario("keras_method_chain", KERAS_MODEL, program=HEADER + '''
class Scale(keras.layers.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x


class Holder(keras.Model):
    def __init__(self, factor):
        super().__init__()
        self.scale = Scale(factor)

    @tf.function
    def step(self, x):
        return x * self.scale.factor


holder = Holder(@V@)
report(holder.step(tf.constant(X)))
''', a=Variant("2.0"), b=Variant("3.0"), why="an attribute read through a chain (self.scale.factor) off a sublayer"),
    Scenario("keras_method_library_attribute", KERAS_MODEL, program=HEADER + '''
class Norms(keras.Model):
    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function
    def total(self):
        return tf.add_n([tf.reduce_sum(v) for v in self.model.trainable_variables])


model = inner()
model.get_layer("hidden").trainable = @V@
norms = Norms(model)
report(norms.total())
''', a=Variant("True"), b=Variant("False"), why="a library property (trainable_variables) read off the model"),
    Scenario("keras_layer_method_scalar", KERAS_MODEL, program=HEADER + '''
class Shift(keras.layers.Layer):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    @tf.function
    def shifted(self, x):
        return x + self.offset


shift = Shift(@V@)
report(shift.shifted(tf.constant(X)))
''', a=Variant("1.0"), b=Variant("2.0"), why="a plain attribute a Keras layer's tf.function method reads"),
]

MUST_HIT_KERAS_METHODS = [
    Scenario("hit_keras_model_method", MUST_HIT, program=HEADER + "MASKED = 0.0\n" + STEP + '''
stepper = Step(inner(), @V@)
report([stepper.step(tf.constant(X)), stepper.step(tf.constant(X + 1.0))])
''', a=Variant("2.0"), b=Variant("2.0"), why="a Keras model's tf.function method (the text generation tutorial's shape)"),
]
