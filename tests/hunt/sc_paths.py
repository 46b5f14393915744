"""Values reached by paths the walk does not follow: an attribute of a function or of an enum member's class,
absl flags, a user sub-layer's attribute read by another layer, a library closure in a Keras Lambda. Some
scenarios here are controls: paths the walk does follow (a dict mutated before the call, a class attribute,
a default) or refuses (a dataclass instance, a user module), which must come out ok."""

from __future__ import annotations

from .model import UNWALKED, Installed, Scenario, Variant

A, B = Variant("2.0"), Variant("3.0")
REPORT = "\nreport(f(tf.ones([4])))\n"

SCENARIOS = [
    Scenario(
        "absl_flag", UNWALKED,
        program='''
import sys
import tensorflow as tf
from absl import flags
flags.DEFINE_float("scale", 1.0, "a scale")
flags.FLAGS(sys.argv)

@tf.function
def f(x):
    return tf.reduce_sum(x) * flags.FLAGS.scale

report(f(tf.ones([4])))
''', a=Variant(argv=("--scale=2.0",)), b=Variant(argv=("--scale=3.0",)),
        why="flags.FLAGS.scale: the walk names absl.flags, the parsed value is not keyed"),
    Scenario(
        "function_attribute", UNWALKED,
        program='''
import tensorflow as tf

def helper(x):
    return x * helper.scale

helper.scale = @V@

@tf.function
def f(x):
    return tf.reduce_sum(helper(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="helper.scale: a function's attribute (its __dict__) is not walked"),
    Scenario(
        "enum_member_value", UNWALKED,
        program='''
import enum
import tensorflow as tf

class Mode(enum.Enum):
    FAST = @V@

MODE = Mode.FAST

@tf.function
def f(x):
    return tf.reduce_sum(x) * MODE.value

report(f(tf.ones([4])))
''', a=A, b=B, why="an enum member is keyed by class and member name, not by its value"),
    Scenario(
        "enum_member_method", UNWALKED,
        files={"modes.py": "import enum\n\nclass Mode(enum.Enum):\n    FAST = 1\n\n"
                           "    def factor(self):\n        return @V@\n"},
        program='''
import tensorflow as tf
from modes import Mode

MODE = Mode.FAST

@tf.function
def f(x):
    return tf.reduce_sum(x) * MODE.factor()

report(f(tf.ones([4])))
''', a=A, b=B, why="a method of the enum member's class (edited in its module): the class is not walked"),
    Scenario(
        "keras_sublayer_attribute_predict", UNWALKED,
        program='''
import numpy as np
import keras

class Inner(keras.layers.Layer):
    def __init__(self, k, **kwargs):
        super().__init__(**kwargs)
        self.k = k

    def call(self, x):
        return x

class Outer(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Inner(@V@)

    def call(self, x):
        return self.inner(x) * self.inner.k

inputs = keras.Input((4,))
model = keras.Model(inputs, Outer()(inputs))
report(model.predict(np.ones((2, 4), np.float32), verbose=0))
''', a=A, b=B, why="Outer.call reads self.inner.k: an attribute of a user sub-layer, not in any config"),
    Scenario(
        "keras_lambda_library_closure_predict", UNWALKED,
        installed=(Installed("actlib", "1.0", {"__init__.py": '__version__ = "1.0"\n\ndef make(k):\n'
                                                "    def act(x):\n        return x * k\n    return act\n"}),),
        program='''
import numpy as np
import keras
import actlib

inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Lambda(actlib.make(@V@))(inputs))
report(model.predict(np.ones((2, 4), np.float32), verbose=0))
''', a=A, b=B, why="a Lambda layer's function is a library closure: named, its cell not keyed"),
    Scenario(
        "global_dict_mutated", UNWALKED,
        program='''
import tensorflow as tf
CFG = {"scale": 1.0}
CFG["scale"] = @V@

@tf.function
def f(x):
    return tf.reduce_sum(x) * CFG["scale"]

report(f(tf.ones([4])))
''', a=A, b=B, why="control: a global dict is keyed item by item when the trace is keyed"),
    Scenario(
        "class_attribute", UNWALKED,
        program='''
import tensorflow as tf

class Cfg:
    SCALE = 1.0

Cfg.SCALE = @V@

@tf.function
def f(x):
    return tf.reduce_sum(x) * Cfg.SCALE

report(f(tf.ones([4])))
''', a=A, b=B, why="control: a user class's plain attributes are walked"),
    Scenario(
        "default_argument_rebound", UNWALKED,
        program='''
import tensorflow as tf

def helper(x, k=1.0):
    return x * k

helper.__defaults__ = (@V@,)

@tf.function
def f(x):
    return tf.reduce_sum(helper(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="control: a helper's defaults are walked (even rebound after the def)"),
    Scenario(
        "frozen_dataclass", UNWALKED,
        program='''
import dataclasses
import tensorflow as tf

@dataclasses.dataclass(frozen=True)
class Cfg:
    scale: float

CFG = Cfg(@V@)

@tf.function
def f(x):
    return tf.reduce_sum(x) * CFG.scale

report(f(tf.ones([4])))
''', a=A, b=B, why="control: an instance of a user class is not a plain value (refused, traced every time)"),
    Scenario(
        "user_module_attribute", UNWALKED,
        files={"settings.py": "SCALE = @V@\n"},
        program='''
import tensorflow as tf
import settings

@tf.function
def f(x):
    return tf.reduce_sum(x) * settings.SCALE

report(f(tf.ones([4])))
''', a=A, b=B, why="control: a user module (with __file__ outside site-packages) read as a value is refused"),
    Scenario(
        "module_method_self_dict", UNWALKED,
        program='''
import tensorflow as tf

class Model(tf.Module):
    def __init__(self, k):
        super().__init__()
        self.cfg = {"k": k}

    @tf.function
    def __call__(self, x):
        return tf.reduce_sum(x) * self.cfg["k"]

report(Model(@V@)(tf.ones([4])))
''', a=A, b=B, why="control: a tf.Module method's self.<dict> is keyed item by item"),
    # Found by reading walk.py: what its value and class rules leave out.
    Scenario(
        "class_dunder_attribute", UNWALKED,
        program='''
import tensorflow as tf

class Cfg:
    __scale__ = @V@

@tf.function
def f(x):
    return tf.reduce_sum(x) * Cfg.__scale__
''' + REPORT, a=A, b=B, why="the class walk skips dunder names that are not functions (__scale__)"),
    Scenario(
        "metaclass_attribute", UNWALKED,
        program='''
import tensorflow as tf

class Meta(type):
    SCALE = @V@

class Cfg(metaclass=Meta):
    pass

@tf.function
def f(x):
    return tf.reduce_sum(x) * Cfg.SCALE
''' + REPORT, a=A, b=B, why="Cfg.SCALE found on the metaclass: the class walk covers bases, not the metaclass"),
    Scenario(
        "builtin_patched", UNWALKED,
        program='''
import builtins
import tensorflow as tf
_abs = builtins.abs
builtins.abs = lambda value: _abs(value) * @V@

@tf.function
def f(x):
    return tf.reduce_sum(abs(x))
''' + REPORT, a=A, b=B, why="a safe builtin (abs) replaced in builtins: the walk keys it by name"),
    Scenario(
        "masked_array_mask", UNWALKED,
        program='''
import numpy as np
import tensorflow as tf
MA = np.ma.array([2.0, 3.0, 4.0], mask=@V@)

@tf.function
def f(x):
    return tf.reduce_sum(x) * float(MA.sum())
''' + REPORT, a=Variant("[0, 0, 1]"), b=Variant("[0, 1, 0]"),
        why="a NumPy array subclass keyed by its data bytes: a masked array's mask is not in them"),
    Scenario(
        "variable_name_branch", UNWALKED,
        program='''
import tensorflow as tf
w = tf.Variable(2.0, name=@V@)

@tf.function
def f(x):
    return tf.reduce_sum(x) * w * (1.0 if w.name.startswith("fast") else 1.5)
''' + REPORT, a=Variant('"fast"'), b=Variant('"slow"'),
        why="a tf.Variable is keyed by dtype, shape, device and trainable: its name, read at trace time, is not"),
    Scenario(
        "registered_gradient_function", UNWALKED,
        program='''
import tensorflow as tf
SCALE = @V@

@tf.RegisterGradient("HuntScaledIdentity")
def _scaled_identity_grad(op, grad):
    return grad * SCALE

@tf.function
def f(x):
    with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "HuntScaledIdentity"}):
        y = tf.identity(x)
    return tf.reduce_sum(tf.gradients(y, x)[0])
''' + REPORT, a=A, b=B,
        why="a gradient function registered with TensorFlow (RegisterGradient) reads a global: the trace never names it"),
    Scenario(
        "registered_conversion_function", UNWALKED,
        program='''
import fractions
import tensorflow as tf
SCALE = @V@

def fraction_to_tensor(value, dtype=None, name=None, as_ref=False):
    return tf.constant(float(value) * SCALE, dtype=dtype or tf.float32)

tf.register_tensor_conversion_function(fractions.Fraction, fraction_to_tensor)
HALF = fractions.Fraction(1, 2)

@tf.function
def f(x):
    return tf.reduce_sum(x) * tf.convert_to_tensor(HALF)
''' + REPORT, a=A, b=B,
        why="a tensor conversion function registered for a standard-library type reads a global: TensorFlow calls it"),
]
