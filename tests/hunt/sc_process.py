"""Per-process Python state: the hash seed (set order, hash()), sys.argv, the environment, the clock and
timezone, the random generators. User code that reaches ``os``/``sys``/``time``/``random``/``numpy.random``
itself is refused by the walk (these are controls that must stay ok); the same reads inside an installed
library are named only."""

from __future__ import annotations

from .model import PROCESS, Installed, Scenario, Variant

# Names whose set order differs under PYTHONHASHSEED=1 and 2 (CPython 3.11):
# 1: alpha, beta, eps, delta, gamma; 2: gamma, alpha, beta, delta, eps.
NAMES = '("alpha", "beta", "gamma", "delta", "eps")'
SEED1, SEED2 = Variant(env={"PYTHONHASHSEED": "1"}), Variant(env={"PYTHONHASHSEED": "2"})

PROCLIB = '''\
import os
import random
import sys
import time

import numpy as np

__version__ = "1.0"


def bucket(name):
    return hash(name) % 1000


def argv_scale():
    return float(sys.argv[1])


def tz_hour():
    return time.localtime(0).tm_hour


def jitter():
    return random.random()


def np_jitter():
    return float(np.random.rand())


def environb_scale():
    return float(os.environb[b"PROCLIB_SCALE"])


def posix_environ_scale():
    import posix

    return float(posix.environ[b"PROCLIB_SCALE"])


def environ_count():
    return float(len(os.environ) > 0) + float("PROCLIB_SCALE" in repr(os.environ))
'''
WARNLIB = '''\
import warnings

__version__ = "1.0"


class LegacyWarning(UserWarning):
    pass


def legacy_scale(value):
    warnings.warn("legacy_scale is deprecated", LegacyWarning, stacklevel=2)
    return value * 2.0
'''
LIB = (Installed("proclib", "1.0", {"__init__.py": PROCLIB}),)


def _program(expression: str, imports: str = "") -> str:
    return f'''
import tensorflow as tf
{imports}

@tf.function
def f(x):
    return tf.reduce_sum(x) * {expression}

report(f(tf.ones([4])))
'''


SCENARIOS = [
    Scenario(
        "hashseed_set_iteration", PROCESS,
        program=f'''
import tensorflow as tf
NAMES = {NAMES}
INDEX = {{name: i for i, name in enumerate(NAMES)}}

@tf.function
def f(x):
    return tf.concat([x * float(INDEX[name]) for name in set(NAMES)], 0)

report(f(tf.ones([1])))
''', a=SEED1, b=SEED2, why="set(NAMES) built in the trace iterates in this process's hash-seed order"),
    Scenario(
        "hashseed_global_set", PROCESS,
        program=f'''
import tensorflow as tf
NAMES = set({NAMES})
INDEX = {{name: i for i, name in enumerate({NAMES})}}

@tf.function
def f(x):
    return tf.concat([x * float(INDEX[name]) for name in NAMES], 0)

report(f(tf.ones([1])))
''', a=SEED1, b=SEED2, why="control: a global set is keyed in its iteration order"),
    Scenario("hash_str_user", PROCESS, program=_program('float(hash("alpha") % 1000)'), a=SEED1, b=SEED2,
             why="control: hash() in user code is refused (builtin)"),
    Scenario("hash_str_library", PROCESS, installed=LIB, program=_program('float(proclib.bucket("alpha"))',
                                                                          "import proclib"),
             a=SEED1, b=SEED2, why="hash() of a str inside an installed library"),
    Scenario("argv_user", PROCESS, program=_program("float(sys.argv[1])", "import sys"),
             a=Variant(argv=("2.0",)), b=Variant(argv=("3.0",)), why="control: sys.argv in user code is refused"),
    Scenario("argv_library", PROCESS, installed=LIB, program=_program("proclib.argv_scale()", "import proclib"),
             a=Variant(argv=("2.0",)), b=Variant(argv=("3.0",)), why="sys.argv read inside an installed library"),
    Scenario("getenv_user", PROCESS, program=_program('float(os.getenv("USER_SCALE"))', "import os"),
             a=Variant(env={"USER_SCALE": "2.0"}), b=Variant(env={"USER_SCALE": "3.0"}),
             why="control: os.getenv in user code is refused"),
    Scenario("environb_library", PROCESS, installed=LIB, program=_program("proclib.environb_scale()", "import proclib"),
             a=Variant(env={"PROCLIB_SCALE": "2.0"}), b=Variant(env={"PROCLIB_SCALE": "3.0"}),
             why="os.environb (the environment as bytes, another mapping than os.environ) read inside a library"),
    Scenario("posix_environ_library", PROCESS, installed=LIB,
             program=_program("proclib.posix_environ_scale()", "import proclib"),
             a=Variant(env={"PROCLIB_SCALE": "2.0"}), b=Variant(env={"PROCLIB_SCALE": "3.0"}),
             why="posix.environ (the start-up environment, a plain dict) read inside a library"),
    Scenario("environ_repr_library", PROCESS, installed=LIB, program=_program("proclib.environ_count()",
                                                                             "import proclib"),
             a=Variant(env={"PROCLIB_SCALE": "2.0"}), b=Variant(env={"OTHER": "3.0"}),
             why="len() and repr() of os.environ inside a library (neither goes through __getitem__)"),
    Scenario("time_user", PROCESS, program=_program("float(time.localtime(0).tm_hour + 1)", "import time"),
             a=Variant(env={"TZ": "UTC0"}), b=Variant(env={"TZ": "JST-9"}),
             why="control: the time module in user code is refused"),
    Scenario("time_library", PROCESS, installed=LIB, program=_program("float(proclib.tz_hour() + 1)",
                                                                      "import proclib"),
             a=Variant(env={"TZ": "UTC0"}), b=Variant(env={"TZ": "JST-9"}),
             why="time.localtime inside an installed library (the timezone is process state)"),
    Scenario("random_user", PROCESS, program=_program("random.random()", "import random\nrandom.seed(@V@)"),
             a=Variant("1"), b=Variant("2"), why="control: random.random() in user code is refused"),
    Scenario("random_library", PROCESS, installed=LIB,
             program=_program("proclib.jitter()", "import random\nimport proclib\nrandom.seed(@V@)"),
             a=Variant("1"), b=Variant("2"), why="random.random() inside an installed library, seeded by the script"),
    Scenario("np_random_user", PROCESS, program=_program("float(np.random.rand())",
                                                         "import numpy as np\nnp.random.seed(@V@)"),
             a=Variant("1"), b=Variant("2"), why="control: numpy.random in user code is refused"),
    Scenario("np_random_library", PROCESS, installed=LIB,
             program=_program("proclib.np_jitter()", "import numpy as np\nimport proclib\nnp.random.seed(@V@)"),
             a=Variant("1"), b=Variant("2"), why="numpy.random's global state read inside an installed library"),
    Scenario(
        "warnings_filter_library", PROCESS,
        installed=(Installed("warnlib", "1.0", {"__init__.py": WARNLIB}),),
        program=_program("warnlib.legacy_scale(2.0)",
                         "import warnings\nimport warnlib\nif @V@:\n"
                         "    warnings.simplefilter('error', warnlib.LegacyWarning)"),
        a=Variant("True"), b=Variant("False"),
        why="the warnings filter: a library's warning raised at trace time in A (plain A raises)"),
]
