"""Shared test helpers: real subprocesses and small real graphs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bfloat16_unavailable() -> str | None:
    """Why Grappler's CPU bfloat16 rewriter (accelerate_train_mode ``fast1``) cannot run in this process, asked
    as a graphcache.Session asks it (TensorFlow's oneDNN switch as it resolved it, and oneDNN's bfloat16 on this
    CPU); None where it can. Child processes inherit the environment that decides it (TF_ENABLE_ONEDNN_OPTS)."""
    from graphcache import accelerate
    from graphcache.compile.identity import onednn_enabled

    variant = accelerate.Variant(accelerate.CPU_REWRITERS["fast1"], "bfloat16", "CPU")
    return accelerate.unavailable(variant, onednn_enabled())


def run_python(code: str, *, env: dict[str, str | None] | None = None, timeout: float = 300) -> dict:
    """Run ``code`` in a fresh Python process; it must print one JSON object as its last stdout line. A variable
    that ``env`` sets to None is removed from the child's environment (``PYTHONHASHSEED``: a random seed)."""
    merged = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), **(env or {})}
    full_env = {name: value for name, value in merged.items() if value is not None}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=ROOT)
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])


CONTROL_FLOW_MODEL = '''
def build_control_flow_graph():
    """A frozen tf.function with a while loop, a cond and a nested function: its library functions get
    process-wide counters in their names."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    w = tf.Variable(np.arange(16, dtype=np.float32).reshape(4, 4) / 10.0, name="w")

    @tf.function
    def inner(x):
        return tf.nn.relu(tf.matmul(x, w))

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def model(x):
        def body(i, acc):
            return i + 1, inner(acc) + 0.5
        _, out = tf.while_loop(lambda i, acc: i < 3, body, [tf.constant(0), x])
        return tf.cond(tf.reduce_sum(out) > 0.0, lambda: out * 2.0, lambda: out - 1.0)

    frozen = convert_variables_to_constants_v2(model.get_concrete_function(), lower_control_flow=False)
    return frozen.graph.as_graph_def(), [t.name for t in frozen.inputs], [t.name for t in frozen.outputs]
'''

NOISY_HISTORY = '''
import tensorflow as tf
for i in range(7):
    @tf.function
    def unrelated(a, i=i):
        return tf.while_loop(lambda k: k < i, lambda k: k + 1, [a])
    unrelated(tf.constant(0))
    tf.function(lambda a: tf.cond(a > 0, lambda: a, lambda: -a)).get_concrete_function(tf.constant(1.0))
'''


# Figures the reliability tests report (trials run, faults injected, inputs fuzzed, data lost), printed
# in pytest's terminal summary by conftest.py.
FIGURES: dict[str, str] = {}
FAULTS: list[str] = []


def record(name: str, text: str) -> None:
    FIGURES[name] = text


# A TF1 graph whose entry (12 MiB of weights) is big enough to be written in the background
# (cache.py BACKGROUND_WRITE_BYTES), as source for child processes; ``big_graph_def()`` runs it here.
BIG_GRAPH = '''
def build_big_graph():
    """A TF1 graph whose constant (12 MiB) makes its entry big enough to be written in the background."""
    import numpy as np
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 1024], name="x")
        w = tf.constant(np.random.RandomState(0).rand(1024, 3072).astype(np.float32), name="w")
        tf.identity(tf.reduce_sum(tf.matmul(x, w) * 2.0, axis=1), name="y")
    return graph.as_graph_def()
'''


def big_graph_def():
    scope: dict = {}
    exec(BIG_GRAPH, scope)  # noqa: S102 - our own test model
    return scope["build_big_graph"]()


def trace_child_preamble(cache_dir: Path | None) -> str:
    """The start of a trace test's child script (after its imports of json, logging and warnings): graphcache's
    log records in ``messages`` and its warnings in ``seen_warnings``, and with a ``cache_dir`` a
    ``cache = GraphCache(cache_dir, traces=True)``."""
    text = (
        "messages = []\n"
        "handler = logging.Handler()\n"
        "handler.emit = lambda record: messages.append((record.levelname, record.getMessage()))\n"
        "logging.getLogger('graphcache').addHandler(handler)\n"
        "logging.getLogger('graphcache').setLevel(logging.INFO)\n"
        "caught = warnings.catch_warnings(record=True)\n"
        "seen_warnings = caught.__enter__()\n"
        "warnings.simplefilter('always')\n"
    )
    if cache_dir is not None:
        text += f"import graphcache\ncache = graphcache.GraphCache({str(cache_dir)!r}, traces=True)\n"
    return text
