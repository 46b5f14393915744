"""Keras functional and sequential models under ``predict``: keyed by each layer's own config and the model's
graph of layer calls (graphcache/traces/topology.py) rather than the model's whole ``get_config()``. What that
graph must hold: the wiring between layers, a call's keyword arguments, the attributes of an operation that is
not a layer (``keras.ops.cumsum(x, axis=...)``), the layers of a model nested in another (transfer learning's
shape), a sequential model's layer order."""

from __future__ import annotations

from .model import KERAS_MODEL, MUST_HIT, Scenario, Variant

HEADER = '''
import numpy as np
import keras
keras.utils.set_random_seed(0)
X = np.arange(32, dtype="float32").reshape(2, 4, 4) / 10.0
'''

SCENARIOS = [
    Scenario("keras_operation_attribute", KERAS_MODEL, program=HEADER + '''
inputs = keras.Input((4, 4))
model = keras.Model(inputs, keras.layers.Dense(3, kernel_initializer="ones")(keras.ops.cumsum(inputs, axis=@V@)))
report(model.predict(X, verbose=0))
''', a=Variant("1"), b=Variant("2"), why="an operation that is not a layer: its axis is its own attribute, not an argument"),
    Scenario("keras_wiring_order", KERAS_MODEL, program=HEADER + '''
first = keras.layers.Dense(4, kernel_initializer="ones", name="first")
second = keras.layers.Dense(4, kernel_initializer="identity", bias_initializer="ones", name="second")
layers = {"first": first, "second": second}
inputs = keras.Input((4,))
h = inputs
for name in @V@:
    h = layers[name](h)
model = keras.Model(inputs, h)
report(model.predict(X[:, 0], verbose=0))
''', a=Variant('("first", "second")'), b=Variant('("second", "first")'),
             why="the same layers (names, configs) wired in another order"),
    Scenario("keras_call_keyword", KERAS_MODEL, program=HEADER + '''
inputs = keras.Input((4, 4))
attended = keras.layers.Attention(name="attention")([inputs, inputs], use_causal_mask=@V@)
model = keras.Model(inputs, attended)
report(model.predict(X, verbose=0))
''', a=Variant("True"), b=Variant("False"), why="a layer called with a keyword argument (a causal mask or none)"),
    Scenario("keras_nested_model_layer", KERAS_MODEL, program=HEADER + '''
base_in = keras.Input((4,))
base = keras.Model(base_in, keras.layers.Dense(4, activation="@V@", kernel_initializer="ones", name="inner")(base_in),
                   name="base")
inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", name="head")(base(inputs - 1.0)))
report(model.predict(X[:, 0], verbose=0))
''', a=Variant("relu"), b=Variant("tanh"), why="a layer of a model nested in another (a pretrained base's shape)"),
    Scenario("keras_sequential_order", KERAS_MODEL, program=HEADER + '''
layers = {"scale": keras.layers.Rescaling(2.0, name="scale"), "shift": keras.layers.Rescaling(1.0, offset=1.0,
                                                                                              name="shift")}
model = keras.Sequential([keras.Input((4,))] + [layers[name] for name in @V@])
report(model.predict(X[:, 0], verbose=0))
''', a=Variant('("scale", "shift")'), b=Variant('("shift", "scale")'), why="a sequential model's layers in another order"),
]

FIT_HEADER = HEADER + '''
Y = np.array([[1.0, 0.0], [0.0, 1.0]], dtype="float32")


def small():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, kernel_initializer="ones", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", name="out")(hidden))
'''

SCENARIOS += [
    Scenario("keras_loss_reads_global", KERAS_MODEL, program=FIT_HEADER + '''
SCALE = @V@


def scaled_mse(y_true, y_pred):
    return keras.ops.mean(keras.ops.square(y_true - y_pred)) * SCALE


model = small()
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=scaled_mse)
report(model.evaluate(X[:, 0], Y, verbose=0))
''', a=Variant("1.0"), b=Variant("3.0"), why="a user loss function reading a module global, under evaluate"),
    Scenario("keras_metric_class", KERAS_MODEL, program=FIT_HEADER + '''
model = small()
model.compile(optimizer="sgd", loss="mse", metrics=[keras.metrics.@V@(name="m")])
report(model.evaluate(X[:, 0], Y, verbose=0))
''', a=Variant("MeanSquaredError"), b=Variant("MeanAbsoluteError"), why="another metric class under one name"),
    Scenario("keras_fit_learning_rate", KERAS_MODEL, program=FIT_HEADER + '''
model = small()
model.compile(optimizer=keras.optimizers.SGD(learning_rate=@V@), loss="mse")
history = model.fit(X[:, 0], Y, epochs=2, batch_size=2, verbose=0, shuffle=False)
report(history.history["loss"] + model.predict(X[:, 0], verbose=0).ravel().tolist())
''', a=Variant("0.01"), b=Variant("0.05"), why="the optimizer's learning rate, under fit (and predict after it)"),
    Scenario("keras_regularizer_factor", KERAS_MODEL, program=HEADER + '''
inputs = keras.Input((4,))
out = keras.layers.Dense(2, kernel_initializer="ones", kernel_regularizer=keras.regularizers.L2(@V@))(inputs)
model = keras.Model(inputs, out)
model.compile(optimizer="sgd", loss="mse")
report(model.evaluate(X[:, 0], np.zeros((2, 2), "float32"), verbose=0))
''', a=Variant("0.01"), b=Variant("0.1"), why="a layer's regularizer factor: in the loss evaluate computes"),
    Scenario("keras_train_step_reads_global", KERAS_MODEL, program=FIT_HEADER + '''
import tensorflow as tf

CLIP = @V@


class Clipped(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = [tf.clip_by_value(g, -CLIP, CLIP) for g in tape.gradient(loss, self.trainable_variables)]
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


inputs = keras.Input((4,))
model = Clipped(inputs, keras.layers.Dense(2, kernel_initializer="ones", name="out")(inputs))
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
model.fit(X[:, 0] * 10.0, Y, epochs=2, batch_size=2, verbose=0, shuffle=False)
report([float(weight.sum()) for weight in model.get_weights()])
''', a=Variant("0.01"), b=Variant("1.0"), why="a custom train_step reading a module global (the gradient clip)"),
]

MUST_HIT_KERAS = [
    Scenario("hit_keras_operations_model", MUST_HIT, program=HEADER + '''
tokens = keras.Input((8,), dtype="int32")
h = keras.layers.Embedding(50, 16, name="tokens")(tokens)
h = h + keras.layers.Embedding(8, 16, name="positions")(keras.ops.arange(8))
h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="attention")(h, h)
model = keras.Model(tokens, keras.layers.Dense(2, name="head")(keras.ops.mean(h, axis=@V@)))
report(model.predict(np.arange(16).reshape(2, 8) % 50, verbose=0))
''', a=Variant("1"), b=Variant("1"), why="a functional model with keras.ops between its layers (a transformer's shape)"),
]
