"""Objects of user classes that a Keras layer or model holds and Keras' own code calls inside a trace: a
regularizer (in the loss ``evaluate`` and ``fit`` compute), a constraint (after each ``fit`` update), a callable
object as an activation, a loss and a metric object passed to ``compile``. Their config (what ``get_config``
says, if anything) is in the layer's config by name and values; what their methods compute is their code, which
the config does not hold. What such a key must hold: the code of the class and the state the methods read."""

from __future__ import annotations

from .model import KERAS_MODEL, MUST_HIT, Scenario, Variant

HEADER = '''
import numpy as np
import keras
keras.utils.set_random_seed(0)
X = np.arange(8, dtype="float32").reshape(2, 4) / 10.0
Y = np.array([[1.0, 0.0], [0.0, 1.0]], dtype="float32")
'''

REGULARIZER = HEADER + '''
class Penalty(keras.regularizers.Regularizer):
    def __call__(self, x):
        return @V@ * keras.ops.sum(keras.ops.abs(x))


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", kernel_regularizer=Penalty())(inputs))
model.compile(optimizer="sgd", loss="mse")
report(model.evaluate(X, Y, verbose=0))
'''

CONFIGURED = HEADER + '''
class Penalty(keras.regularizers.Regularizer):
    def __call__(self, x):
        return @V@ * keras.ops.sum(keras.ops.abs(x))

    def get_config(self):
        return {}


inputs = keras.Input((4,))
dense = keras.layers.Dense(2, kernel_initializer="ones", activity_regularizer=Penalty(), bias_regularizer=Penalty())
model = keras.Model(inputs, dense(inputs))
model.compile(optimizer="sgd", loss="mse")
report(model.evaluate(X, Y, verbose=0))
'''

SCENARIOS = [
    Scenario("keras_user_regularizer_code", KERAS_MODEL, program=REGULARIZER, a=Variant("0.5"), b=Variant("2.0"),
             why="a user regularizer class's code (no config: Keras serializes it by class name only)"),
    Scenario("keras_user_regularizer_state", KERAS_MODEL, program=HEADER + '''
class Penalty(keras.regularizers.Regularizer):
    def __init__(self):
        self.factor = @V@

    def __call__(self, x):
        return self.factor * keras.ops.sum(keras.ops.abs(x))


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", kernel_regularizer=Penalty())(inputs))
model.compile(optimizer="sgd", loss="mse")
report(model.evaluate(X, Y, verbose=0))
''', a=Variant("0.5"), b=Variant("2.0"), why="a user regularizer's attribute its get_config does not name"),
    Scenario("keras_user_regularizer_configured", KERAS_MODEL, program=CONFIGURED, a=Variant("0.5"), b=Variant("2.0"),
             why="a user regularizer with a get_config (as Keras' docs ask): its code"),
    Scenario("keras_user_weight_constraint", KERAS_MODEL, program=HEADER + '''
class Scale(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones",
                                 constraint=keras.constraints.MaxNorm(@V@, axis=0))

    def call(self, x):
        return x * self.w


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones")(Scale()(inputs)))
model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
history = model.fit(X, Y, epochs=2, batch_size=2, verbose=0, shuffle=False)
report(history.history["loss"] + model.get_weights()[0].ravel().tolist())
''', a=Variant("1.0"), b=Variant("0.5"), why="a constraint a user layer's build attaches to its weight (not in a config)"),
    Scenario("keras_user_constraint_code", KERAS_MODEL, program=HEADER + '''
class Clip(keras.constraints.Constraint):
    def __call__(self, w):
        return keras.ops.clip(w, -@V@, @V@)


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", kernel_constraint=Clip())(inputs))
model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
history = model.fit(X, Y, epochs=2, batch_size=2, verbose=0, shuffle=False)
report(history.history["loss"] + model.get_weights()[0].ravel().tolist())
''', a=Variant("0.9"), b=Variant("0.7"), why="a user constraint class's code, applied after each fit update"),
    Scenario("keras_callable_activation", KERAS_MODEL, program=HEADER + '''
class Scaled:
    def __call__(self, x):
        return x * @V@


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones", activation=Scaled())(inputs))
report(model.predict(X, verbose=0))
''', a=Variant("2.0"), b=Variant("3.0"), why="a callable object as a layer's activation (its __call__'s code)"),
    Scenario("keras_user_loss_object", KERAS_MODEL, program=HEADER + '''
class Weighted(keras.losses.Loss):
    def call(self, y_true, y_pred):
        return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1) * @V@


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones")(inputs))
model.compile(optimizer="sgd", loss=Weighted())
report(model.evaluate(X, Y, verbose=0))
''', a=Variant("1.0"), b=Variant("4.0"), why="a user loss class's code (its config is Keras' base config)"),
    Scenario("keras_user_metric_object", KERAS_MODEL, program=HEADER + '''
class Scaled(keras.metrics.Mean):
    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(keras.ops.sum(y_pred, axis=-1) * @V@, sample_weight)


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones")(inputs))
model.compile(optimizer="sgd", loss="mse", metrics=[Scaled(name="scaled")])
report(model.evaluate(X, Y, verbose=0))
''', a=Variant("1.0"), b=Variant("3.0"), why="a user metric class's update_state code"),
]

MUST_HIT_KERAS_OBJECTS = [
    Scenario("hit_keras_user_regularizer", MUST_HIT, program=CONFIGURED, a=Variant("0.5"), b=Variant("0.5"),
             why="an unchanged model with a user regularizer (with a get_config) hits in a later process"),
]

SCENARIOS += [
    Scenario("keras_user_optimizer_update", KERAS_MODEL, program=HEADER + '''
class Damped(keras.optimizers.SGD):
    def update_step(self, gradient, variable, learning_rate):
        super().update_step(gradient * @V@, variable, learning_rate)


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones")(inputs))
model.compile(optimizer=Damped(0.5), loss="mse")
history = model.fit(X, Y, epochs=2, batch_size=2, verbose=0, shuffle=False)
report(history.history["loss"] + model.get_weights()[0].ravel().tolist())
''', a=Variant("1.0"), b=Variant("0.25"), why="a user optimizer class's update_step code, under fit"),
    Scenario("keras_metric_function_global", KERAS_MODEL, program=HEADER + '''
SCALE = @V@


def scaled_error(y_true, y_pred):
    return keras.ops.mean(keras.ops.abs(y_true - y_pred)) * SCALE


inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones")(inputs))
model.compile(optimizer="sgd", loss="mse", metrics=[scaled_error])
report(model.evaluate(X, Y, verbose=0))
''', a=Variant("1.0"), b=Variant("5.0"), why="a metric given as a plain function that reads a module global"),
    Scenario("keras_activation_set_after", KERAS_MODEL, program=HEADER + '''
class Shifted:
    def __call__(self, x):
        return x + @V@

    def get_config(self):
        return {}


dense = keras.layers.Dense(2, kernel_initializer="ones")
inputs = keras.Input((4,))
model = keras.Model(inputs, dense(inputs))
dense.activation = Shifted()
report(model.predict(X, verbose=0))
''', a=Variant("1.0"), b=Variant("2.0"), why="a callable object assigned as a built layer's activation"),
]
