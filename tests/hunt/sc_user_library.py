"""User code taken for library code: a project folder without ``__init__.py`` (an implicit namespace package,
whose ``__file__`` is None) and the user's own package installed non-editable into a ``site-packages`` folder.
Today's walk names both as library code (by ``__version__``) instead of walking them."""

from __future__ import annotations

from .model import USER_AS_LIBRARY, Installed, Scenario, Variant

A, B = Variant("2.0"), Variant("3.0")

SCENARIOS = [
    Scenario(
        "ns_pkg_constant", USER_AS_LIBRARY,
        files={"proj/consts.py": "SCALE = @V@\n"},
        program='''
import tensorflow as tf
from proj import consts

@tf.function
def f(x):
    return tf.reduce_sum(x) * consts.SCALE

report(f(tf.ones([4])))
''', a=A, b=B, why="proj/ has no __init__.py: proj.consts is 'library' (a module without __file__ at the top)"),
    Scenario(
        "ns_pkg_function_code", USER_AS_LIBRARY,
        files={"proj/ops.py": "def scale(x):\n    return x * @V@\n"},
        program='''
import tensorflow as tf
from proj.ops import scale

@tf.function
def f(x):
    return tf.reduce_sum(scale(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="a function of the namespace package: named by module and qualname, its code not hashed"),
    Scenario(
        "ns_pkg_nested_global", USER_AS_LIBRARY,
        files={"proj/cfg/values.py": "OFFSET = @V@\n", "proj/cfg/layers.py":
               "from proj.cfg import values\n\ndef shift(x):\n    return x + values.OFFSET\n"},
        program='''
import tensorflow as tf
from proj.cfg.layers import shift

@tf.function
def f(x):
    return tf.reduce_sum(shift(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="a namespace-package function reading a global of another namespace module"),
    Scenario(
        "ns_pkg_class_attr", USER_AS_LIBRARY,
        files={"proj/model.py": "class Config:\n    SCALE = @V@\n"},
        program='''
import tensorflow as tf
from proj.model import Config

@tf.function
def f(x):
    return tf.reduce_sum(x) * Config.SCALE

report(f(tf.ones([4])))
''', a=A, b=B, why="a class of the namespace package: named, its attributes not walked"),
    Scenario(
        "installed_same_version", USER_AS_LIBRARY,
        installed=(Installed("userpkg", "1.0", {"__init__.py": '__version__ = "1.0"\n\ndef scale(x):\n'
                                                                 '    return x * @V@\n'}),),
        program='''
import tensorflow as tf
import userpkg

@tf.function
def f(x):
    return tf.reduce_sum(userpkg.scale(x))

report(f(tf.ones([4])))
''', a=A, b=B, why="the user's package installed (dist-info, RECORD): its code changed, same __version__"),
    Scenario(
        "installed_bumped_no_version_attr", USER_AS_LIBRARY,
        installed=(Installed("userpkg", "@VER@", {"__init__.py": "from .ops import scale\n",
                                                   "ops.py": "def scale(x):\n    return x * @V@\n"}),),
        program='''
import tensorflow as tf
from userpkg import scale

@tf.function
def f(x):
    return tf.reduce_sum(scale(x))

report(f(tf.ones([4])))
''', a=Variant("2.0", tokens={"@VER@": "1.0"}), b=Variant("3.0", tokens={"@VER@": "1.1"}),
        why="installed 1.0 then 1.1 (dist-info), no __version__: the key's version of it is '' both times"),
    Scenario(
        "installed_submodule_constant", USER_AS_LIBRARY,
        installed=(Installed("userpkg", "1.0", {"__init__.py": '__version__ = "1.0"\n',
                                                 "consts.py": "SCALE = @V@\n"}),),
        program='''
import tensorflow as tf
from userpkg import consts

@tf.function
def f(x):
    return tf.reduce_sum(x) * consts.SCALE

report(f(tf.ones([4])))
''', a=A, b=B, why="a constant of an installed user package's submodule, same version"),
    Scenario(
        "ns_pkg_keras_layer_predict", USER_AS_LIBRARY,
        files={"proj/layers.py": "import keras\n\n\nclass Scale(keras.layers.Layer):\n"
                                 "    def call(self, x):\n        return x * @V@\n"},
        program='''
import numpy as np
import keras
from proj.layers import Scale

inputs = keras.Input((4,))
model = keras.Model(inputs, Scale()(inputs))
report(model.predict(np.ones((2, 4), np.float32), verbose=0))
''', a=A, b=B, why="a user Keras layer class in a namespace package: predict's key names it as a library class"),
]
