"""State an installed (site-packages) library reads: the script sets it, the library reads it while the
function is traced, and the key names the library by its version only."""

from __future__ import annotations

from .model import LIBRARY_STATE, Installed, Scenario, Variant

A, B = Variant("2.0"), Variant("3.0")

# A small library as pip would install it; "@V@" in it is rendered per variant (an edit of the library).
MYLIB = '''\
import os

__version__ = "1.0"
SCALE = 1.0
_state = {"offset": 0.0}


def scale(x):
    return x * SCALE


def make_scaler(k):
    def scaler(x):
        return x * k
    return scaler


def configure(offset):
    _state["offset"] = offset


def shift(x):
    return x + _state["offset"]


def env_scale(x):
    return x * float(os.environ["MYLIB_SCALE"])


def transform(x):
    return x * @V@ + 1.0


def make_loss(k):
    def loss(y_true, y_pred):
        return k * (y_true - y_pred) ** 2
    return loss
'''


def mylib(text: str = MYLIB) -> tuple[Installed, ...]:
    return (Installed("mylib", "1.0", {"__init__.py": text}),)


SCENARIOS = [
    Scenario("library_module_attribute_patched", LIBRARY_STATE, program='''
import numpy as np
import tensorflow as tf
import keras
if @V@:  # Keras' TensorFlow backend calls tf.nn.relu when it traces a relu layer
    original_relu = tf.nn.relu
    tf.nn.relu = lambda features, name=None: original_relu(features, name) * 2.0
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="relu", kernel_initializer="ones")])
report(model.predict(np.ones((1, 3), "float32"), verbose=0))
''', a=Variant("False"), b=Variant("True"), why="a function the program set on a trusted library's module "
                                                  "(tf.nn.relu), called by untouched library code while tracing"),
    Scenario("library_module_dict_patched", LIBRARY_STATE, program='''
import numpy as np
import tensorflow as tf
import keras
if @V@:  # written into the module's __dict__: no __setattr__ runs
    original_relu = tf.nn.relu
    vars(tf.nn)["relu"] = lambda features, name=None: original_relu(features, name) * 2.0
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="relu", kernel_initializer="ones")])
report(model.predict(np.ones((1, 3), "float32"), verbose=0))
''', a=Variant("False"), b=Variant("True"), why="a function the program wrote into a trusted library module's "
                                                  "__dict__ (tf.nn.relu), called by untouched library code"),
    Scenario("init_scope_variable_value", LIBRARY_STATE, program='''
import tensorflow as tf
v = tf.Variable(@V@)

@tf.function
def f(x):
    with tf.init_scope():  # eager inside the trace: the variable's value now is baked into the graph
        scale = float(v.numpy())
    return x * scale

report(f(tf.constant(1.0)))
''', a=Variant("1.0"), b=Variant("2.0"), why="a variable's value read eagerly while tracing (init_scope)"),
    Scenario("init_scope_variable_assign", LIBRARY_STATE, program='''
import tensorflow as tf
v = tf.Variable(0.0)

@tf.function
def f(x):
    with tf.init_scope():  # runs once, at trace time: a hit would skip it
        v.assign(@V@)
    return x + 1.0

report([f(tf.constant(1.0)), v])
''', a=Variant("1.0"), b=Variant("2.0"), why="a variable assigned eagerly while tracing: a hit would not assign it"),
    Scenario(
        "lib_module_attribute", LIBRARY_STATE, installed=mylib(),
        program='''
import tensorflow as tf
import mylib
mylib.SCALE = @V@

@tf.function
def f(x):
    return tf.reduce_sum(mylib.scale(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="mylib.SCALE set by the script, read by mylib.scale at trace time"),
    Scenario(
        "lib_factory_closure", LIBRARY_STATE, installed=mylib(),
        program='''
import tensorflow as tf
import mylib
act = mylib.make_scaler(@V@)

@tf.function
def f(x):
    return tf.reduce_sum(act(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="a closure a library factory returns: named by module and qualname, its cell not keyed"),
    Scenario(
        "lib_configure_call", LIBRARY_STATE, installed=mylib(),
        program='''
import tensorflow as tf
import mylib
mylib.configure(@V@)

@tf.function
def f(x):
    return tf.reduce_sum(mylib.shift(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="library-private state (a dict) set through the library's own configure()"),
    Scenario(
        "lib_env_var", LIBRARY_STATE, installed=mylib(),
        program='''
import tensorflow as tf
import mylib

@tf.function
def f(x):
    return tf.reduce_sum(mylib.env_scale(x))

report(f(tf.ones([4])))
''', a=Variant(env={"MYLIB_SCALE": "2.0"}), b=Variant(env={"MYLIB_SCALE": "3.0"}),
        why="an environment variable the library reads at call time (user code never touches os)"),
    Scenario(
        "lib_edited_in_keras_layer_predict", LIBRARY_STATE, installed=mylib(),
        program='''
import numpy as np
import keras
import mylib

class Transform(keras.layers.Layer):
    def call(self, x):
        return mylib.transform(x)

inputs = keras.Input((4,))
model = keras.Model(inputs, Transform()(keras.layers.Dense(3, kernel_initializer="ones")(inputs)))
report(model.predict(np.ones((2, 4), np.float32), verbose=0))
''', a=A, b=B, why="an installed library edited in place (same version), called from a user layer under predict"),
    Scenario(
        "lib_attribute_in_keras_layer_predict", LIBRARY_STATE, installed=mylib(),
        program='''
import numpy as np
import keras
import mylib
mylib.SCALE = @V@

class Scale(keras.layers.Layer):
    def call(self, x):
        return mylib.scale(x)

inputs = keras.Input((4,))
model = keras.Model(inputs, Scale()(keras.layers.Dense(3, kernel_initializer="ones")(inputs)))
report(model.predict(np.ones((2, 4), np.float32), verbose=0))
''', a=A, b=B, why="mylib.SCALE set by the script, read by a library call in a user layer under predict"),
    Scenario(
        "lib_closure_on_module_attr", LIBRARY_STATE, installed=mylib(),
        program='''
import tensorflow as tf
import mylib

class Model(tf.Module):
    def __init__(self, k):
        super().__init__()
        self.act = mylib.make_scaler(k)

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(self.act(x))

report(Model(@V@)(tf.ones([4])))
''', a=A, b=B, why="a tf.Module attribute holding a library closure: the method key names it, its cell unkeyed"),
    Scenario(
        "lib_loss_closure_fit", LIBRARY_STATE, installed=mylib(),
        program='''
import numpy as np
import keras
import mylib
keras.utils.set_random_seed(0)

inputs = keras.Input((2,))
model = keras.Model(inputs, keras.layers.Dense(1, kernel_initializer="ones")(inputs))
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=mylib.make_loss(@V@))
history = model.fit(np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32), batch_size=4, epochs=1,
                    verbose=0, shuffle=False)
report([history.history["loss"][0], *model.layers[1].kernel.numpy().ravel()])
''', a=A, b=B, why="model.fit with a loss a library factory made: named, its closure not keyed"),
    Scenario(
        "library_class_method_patched", LIBRARY_STATE,
        program='''
import tensorflow as tf
from tensorflow.python.framework import tensor as tensor_lib
_multiply = tensor_lib.Tensor.__mul__

def scaled_multiply(a, b):
    return tf.multiply(_multiply(a, b), @V@)

tensor_lib.Tensor.__mul__ = scaled_multiply

@tf.function
def f(x):
    return tf.reduce_sum(x * 2.0)

report(f(tf.ones([4])))
''', a=A, b=B, why="a method of a TensorFlow class replaced by the program (tf.Tensor.__mul__): libwrites.py "
                     "watches the libraries' module dicts, not their classes' dicts"),
    Scenario(
        "keras_layer_class_method_patched", LIBRARY_STATE,
        program='''
import keras
import tensorflow as tf
_call = keras.layers.Dense.call

def scaled_call(self, inputs, training=None):
    return _call(self, inputs) * @V@

keras.layers.Dense.call = scaled_call
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, kernel_initializer="ones")])
report(model.predict(tf.ones([1, 4]), verbose=0))
''', a=A, b=B, why="control: Keras' Dense.call replaced by the program: Dense no longer is its module's own class"),
    Scenario(
        "library_function_defaults_patched", LIBRARY_STATE,
        program='''
import keras
import tensorflow as tf
keras.activations.gelu.__defaults__ = (@V@,)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="gelu", kernel_initializer="ones")])
report(model.predict(tf.constant([[0.5, -1.0, 0.25, 2.0]]), verbose=0))
''', a=Variant("True"), b=Variant("False"),
        why="a Keras function's defaults replaced by the program (gelu's approximate): the function is named by "
            "identity, its mutable attributes are not keyed"),
]
