"""Files read while tracing, through library calls: the trace bakes the file's content in as constants, and
the key sees only the path (a plain str)."""

from __future__ import annotations

from .model import LIBRARY_FILES, Installed, Scenario, Variant

A, B = Variant("2.0"), Variant("3.0")

SCENARIOS = [
    Scenario(
        "np_load", LIBRARY_FILES,
        files={"make_data.py": "import numpy as np\nnp.save('w.npy', np.full([4], @V@, np.float32))\n"},
        program='''
import runpy
runpy.run_path("make_data.py")
import numpy as np
import tensorflow as tf
PATH = "w.npy"

@tf.function
def f(x):
    return tf.reduce_sum(x * np.load(PATH))

report(f(tf.ones([4])))
''', a=A, b=B, why="np.load(PATH) at trace time: the array is a constant of the graph"),
    Scenario(
        "gfile_json", LIBRARY_FILES,
        files={"config.json": '{"scale": @V@}\n'},
        program='''
import json
import tensorflow as tf
PATH = "config.json"

@tf.function
def f(x):
    return tf.reduce_sum(x) * json.loads(tf.io.gfile.GFile(PATH).read())["scale"]

report(f(tf.ones([4])))
''', a=A, b=B, why="json.loads(tf.io.gfile.GFile(path).read()) at trace time"),
    Scenario(
        "np_loadtxt", LIBRARY_FILES,
        files={"w.txt": "@V@ 1.0 1.0 1.0\n"},
        program='''
import numpy as np
import tensorflow as tf
PATH = "w.txt"

@tf.function
def f(x):
    return tf.reduce_sum(x * np.loadtxt(PATH, dtype=np.float32))

report(f(tf.ones([4])))
''', a=A, b=B, why="np.loadtxt(PATH) at trace time"),
    Scenario(
        "pickle_load_user", LIBRARY_FILES,
        files={"make_data.py": "import pickle\npickle.dump({'scale': @V@}, open('cfg.pkl', 'wb'))\n"},
        program='''
import runpy
runpy.run_path("make_data.py")
import pickle
import tensorflow as tf
PATH = "cfg.pkl"

@tf.function
def f(x):
    return tf.reduce_sum(x) * pickle.load(tf.io.gfile.GFile(PATH, "rb"))["scale"]

report(f(tf.ones([4])))
''', a=A, b=B, why="pickle.load of a file in user code (pickle is a stateful module for the walk: refused)"),
    Scenario(
        "pickle_load_in_library", LIBRARY_FILES,
        installed=(Installed("dataio", "1.0", {"__init__.py": '__version__ = "1.0"\nimport pickle\n\n'
                                                "def load(path):\n    with open(path, 'rb') as f:\n"
                                                "        return pickle.load(f)\n"}),),
        files={"make_data.py": "import pickle\npickle.dump({'scale': @V@}, open('cfg.pkl', 'wb'))\n"},
        program='''
import runpy
runpy.run_path("make_data.py")
import tensorflow as tf
import dataio

@tf.function
def f(x):
    return tf.reduce_sum(x) * dataio.load("cfg.pkl")["scale"]

report(f(tf.ones([4])))
''', a=A, b=B, why="pickle.load inside an installed library's function: the walk sees dataio.load by name"),
    Scenario(
        "read_file_op", LIBRARY_FILES,
        files={"scale.txt": "@V@"},
        program='''
import tensorflow as tf
PATH = "scale.txt"

@tf.function
def f(x):
    return tf.reduce_sum(x) * tf.strings.to_number(tf.io.read_file(PATH))

report(f(tf.ones([4])))
''', a=A, b=B, why="control: tf.io.read_file is an op, the file is read when the graph runs (a hit is right)"),
]
