"""TensorFlow/Keras/NumPy global configuration read inside library code while the function is traced. The key
holds the global seed and TensorFlow's two NumPy-behaviour switches (and Keras' settings for predict); the
rest of the settings are read by library code the walk only names."""

from __future__ import annotations

from .model import LIBRARY_CONFIG, Scenario, Variant

SCENARIOS = [
    Scenario(
        "tensor_equality_switch", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
@V@

@tf.function
def f(x, y):
    return tf.cast(x == y, tf.float32)  # an Equal op, or (equality disabled) Python's identity test: False

report(f(tf.constant([1.0, 2.0]), tf.constant([1.0, 3.0])))
''', a=Variant("pass"), b=Variant("tf.compat.v1.disable_tensor_equality()"),
        why="a TensorFlow 1 compatibility switch changes what == of two tensors does while tracing"),
    Scenario(
        "summary_default_writer", LIBRARY_CONFIG,
        program='''
import glob, os, tempfile
import tensorflow as tf

@tf.function
def step(x):
    tf.summary.write("x", x, step=0)  # emits a summary op only where a default writer is set
    return x * 2.0

logdir = tempfile.mkdtemp()
if @V@:
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        out = step(tf.constant(3.0))
    writer.flush()
else:
    out = step(tf.constant(3.0))
report([float(out), sum(os.path.getsize(f) for f in glob.glob(os.path.join(logdir, "*")))])
''', a=Variant("False"), b=Variant("True"), why="tf.summary's default writer (thread state) decides whether the "
                                                   "trace holds summary ops"),
    Scenario(
        "keras_epsilon_in_loss", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
import keras
keras.config.set_epsilon(@V@)

@tf.function
def f(y_true, y_pred):
    return keras.losses.binary_crossentropy(y_true, y_pred)

report(f(tf.constant([[1.0, 0.0]]), tf.constant([[0.0, 1.0]])))
''', a=Variant("1e-7"), b=Variant("1e-2"), why="keras.losses clips by keras.config.epsilon() at trace time"),
    Scenario(
        "keras_floatx_in_ops", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
import keras
keras.config.set_floatx(@V@)

@tf.function
def f():
    return tf.cast((keras.ops.ones((2,)) * (1.0 + 1e-8) - 1.0) * 1e8, tf.float64)

report(f())
''', a=Variant('"float32"'), b=Variant('"float64"'), why="keras.ops.ones makes floatx() tensors at trace time"),
    Scenario(
        "keras_mixed_precision_custom_loop", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
import keras
keras.mixed_precision.set_global_policy(@V@)

@tf.function
def step(x, y):
    pred = keras.layers.Rescaling(1.0 / 3.0)(x)
    loss = keras.losses.mean_squared_error(y, pred)
    return tf.cast(tf.concat([tf.reshape(pred, [-1]), tf.reshape(loss, [-1])], 0), tf.float32)

report(step(tf.constant([[1.0, 2.0, 5.0]]), tf.constant([[0.1, 0.2, 0.3]])))
''', a=Variant('"float32"'), b=Variant('"mixed_float16"'),
        why="the global dtype policy, read by a layer and a loss made in a custom training step"),
    Scenario(
        "tnp_prefer_float32", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
import tensorflow.experimental.numpy as tnp
tnp.experimental_enable_numpy_behavior(prefer_float32=@V@)

@tf.function
def f(x):
    return tf.cast((tnp.asarray(1.0 + 1e-8) - 1.0) * 1e8, tf.float64) + tf.cast(tf.reduce_sum(x), tf.float64)

report(f(tf.ones([2])))
''', a=Variant("False"), b=Variant("True"), why="NumPy behaviour's prefer_float32: Python floats become float32 or float64"),
    Scenario(
        "tnp_dtype_conversion_mode", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
import tensorflow.experimental.numpy as tnp
tnp.experimental_enable_numpy_behavior(dtype_conversion_mode=@V@)

@tf.function
def f(x, y):
    return tf.cast(x + y, tf.float64)

report(f(tf.constant([1, 2], tf.int64), tf.constant([0.5, 0.25], tf.float16)))
''', a=Variant('"all"'), b=Variant('"safe"'),
        why="dtype_conversion_mode 'all' vs 'safe': int64 + float16 promotes differently (or raises)"),
    Scenario(
        "check_numerics", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
if @V@:
    tf.debugging.enable_check_numerics()

@tf.function
def f(x):
    return tf.sqrt(x - 2.0)

report(f(tf.ones([2])))
''', a=Variant("True"), b=Variant("False"),
        why="enable_check_numerics instruments graphs when they are traced (plain A raises on the NaN)"),
    Scenario(
        "op_determinism", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
if @V@:
    tf.config.experimental.enable_op_determinism()

@tf.function
def f(x):
    return tf.reduce_sum(tf.random.uniform([3]) * 0.0) + tf.reduce_sum(x)

report(f(tf.ones([4])))
''', a=Variant("True"), b=Variant("False"),
        why="op determinism makes an unseeded random op raise at trace time (plain A raises)"),
    Scenario(
        "global_seed", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
tf.random.set_seed(@V@)

@tf.function
def f():
    return tf.random.uniform([3])

report(f())
''', a=Variant("1"), b=Variant("2"), why="control: the global seed is in the key (context part)"),
    Scenario(
        "keras_image_data_format", LIBRARY_CONFIG,
        program='''
import numpy as np
import tensorflow as tf
import keras
keras.config.set_image_data_format(@V@)

@tf.function
def f(x):
    return keras.ops.image.resize(x, (4, 4))

report(f(tf.constant(np.arange(18, dtype=np.float32).reshape(1, 3, 3, 2))))
''', a=Variant('"channels_last"'), b=Variant('"channels_first"'),
        why="keras.ops.image.resize reads image_data_format() at trace time"),
    Scenario(
        "run_functions_eagerly", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
tf.config.run_functions_eagerly(@V@)

@tf.function
def f(x):
    return tf.reduce_sum(x) * (1.0 if tf.executing_eagerly() else 2.0)

report(f(tf.ones([4])))
''', a=Variant("True"), b=Variant("False"), why="functions run eagerly: no trace at all in A"),
    Scenario(
        "tnp_behavior_on_off", LIBRARY_CONFIG,
        program='''
import tensorflow as tf
import tensorflow.experimental.numpy as tnp
if @V@:
    tnp.experimental_enable_numpy_behavior()

@tf.function
def f(x):
    return tf.cast(x + 1.5, tf.float64)

report(f(tf.constant([1, 2])))
''', a=Variant("True"), b=Variant("False"),
        why="control: NumPy behaviour on (int + 1.5 promotes) or off (raises): keyed by the context part"),
    Scenario(
        "keras_floatx_predict", LIBRARY_CONFIG,
        program='''
import numpy as np
import keras
keras.config.set_floatx(@V@)
keras.utils.set_random_seed(0)

inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, kernel_initializer="ones")(inputs))
report((model.predict(np.full((2, 4), 1.0 + 1e-8), verbose=0).astype("float64") - 4.0) * 1e8)
''', a=Variant('"float32"'), b=Variant('"float64"'), why="control: Keras' floatx is in predict's key"),
    Scenario(
        "tf_deterministic_ops_env", LIBRARY_CONFIG,
        program='''
import tensorflow as tf

@tf.function
def f(x):
    return tf.reduce_sum(tf.random.uniform([3]) * 0.0) + tf.reduce_sum(x)

report(f(tf.ones([4])))
''', a=Variant(env={"TF_DETERMINISTIC_OPS": "1"}), b=Variant(env={"TF_DETERMINISTIC_OPS": "0"}),
        why="TensorFlow reads TF_DETERMINISTIC_OPS itself: op determinism without a line of user code"),
    Scenario(
        "np_seterr", LIBRARY_CONFIG,
        program='''
import numpy as np
import tensorflow as tf
np.seterr(all=@V@)

@tf.function
def f(x):
    return tf.reduce_sum(x) + float(np.sum(np.log(np.array([1.0, 2.0, 0.0]))[:2]))

report(f(tf.ones([4])))
''', a=Variant('"raise"'), b=Variant('"ignore"'),
        why="np.seterr: NumPy raises FloatingPointError at trace time in A (plain A raises)"),
]
