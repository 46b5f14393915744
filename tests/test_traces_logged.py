"""Warnings a trace gives through ``logging`` (graphcache/traces/logged.py) and ``warnings`` (warned.py), given
again on a hit as plain TensorFlow gives them in every process.

Fresh processes, their stderr compared: a tf.function that warns through ``tf.get_logger()`` while it traces, a
functional Keras model with dict inputs predicted on a list (Keras' "The structure of `inputs` doesn't match",
a Python warning given while ``predict`` traces: keras' functional_test ``test_warning_for_mismatched_inputs_structure``
shape), and a tf.function traced for seven shapes (TensorFlow's retracing warning, logged by ``Function.__call__``
outside the hook). The cold process stores the traces and prints each warning; a warm one hits them and prints the
same warnings, as many times, by the same logger with the same level, message and source line. A process where
TensorFlow's warnings were silenced stores its trace without them: a later process that shows them misses it
(whether the loggers show warnings is in the key) and prints them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading

import pytest

from graphcache.traces import logged
from graphcache.traces.walk import Uncacheable

from .helpers import ROOT

CHILD = '''
import json, logging, re, sys
import numpy as np
import tensorflow as tf
import keras
import graphcache

seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append([record.name, record.levelname, re.sub(r"0x[0-9a-f]+", "0x", record.getMessage()),
                     record.pathname, record.lineno, record.funcName])
logging.getLogger("tensorflow").addHandler(Keep())
if sys.argv[2] == "silenced":
    tf.get_logger().setLevel(logging.ERROR)
cache = graphcache.GraphCache(sys.argv[1], traces=True)


@tf.function
def g(x):
    tf.get_logger().warning("g is traced for %s", x.shape)
    return x + 3.0


out = {"g": float(g(tf.constant(1.0)))}
if sys.argv[2] != "silenced":
    keras.utils.set_random_seed(0)
    inputs = {"a": keras.Input((2,), name="a"), "b": keras.Input((2,), name="b")}
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Concatenate()([inputs["a"], inputs["b"]])))
    out["predict"] = model.predict([np.ones((1, 2)), np.full((1, 2), 2.0)], verbose=0).tolist()

    @tf.function
    def h(x):
        return x * 3.0

    out["h"] = [float(tf.reduce_sum(h(tf.ones([i + 1])))) for i in range(7)]
cache.wait_for_writes()
out["traces"] = cache.stats().traces
out["logged"] = seen
print(json.dumps(out))
'''
KERAS_WARNING = "UserWarning: The structure of `inputs` doesn't match the expected structure."
RETRACING = "triggered tf.function retracing"


def child(cache_dir, mode: str = "shown") -> tuple[dict, str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(cache_dir), mode], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def warnings_in(stderr: str) -> list[str]:
    """The warning lines of a child's stderr, addresses blanked."""
    lines = [line for line in stderr.splitlines() if line.startswith("WARNING:tensorflow:") or "Warning:" in line]
    return [re.sub(r"0x[0-9a-f]+", "0x", line) for line in lines]


def test_logging_and_python_warnings_of_a_trace_are_given_again_on_a_hit(cache_dir):
    cold, cold_err = child(cache_dir)
    assert cold["traces"]["trace_misses"] >= 9 and cold["traces"]["trace_hits"] == 0  # g, predict, h x7
    warm, warm_err = child(cache_dir)
    assert warm["traces"]["trace_hits"] == cold["traces"]["trace_misses"], "every trace of the cold run hit"
    assert {k: warm[k] for k in ("g", "predict", "h")} == {k: cold[k] for k in ("g", "predict", "h")}
    assert warm["logged"] == cold["logged"], "same logger, level, message and source line, as many times"
    assert warnings_in(warm_err) == warnings_in(cold_err)
    assert sum("g is traced for ()" in line for line in warnings_in(warm_err)) == 1, warm_err
    assert sum(KERAS_WARNING in line for line in warnings_in(warm_err)) == 1, warm_err
    assert sum(RETRACING in line for line in warnings_in(warm_err)) == 2, warm_err  # the 6th and 7th traces


def test_a_trace_stored_while_tensorflow_warnings_were_silenced_is_not_served_where_they_show(cache_dir):
    silenced, silenced_err = child(cache_dir, "silenced")
    assert silenced["traces"]["trace_misses"] == 1 and "g is traced" not in silenced_err
    shown, shown_err = child(cache_dir)
    assert shown["traces"]["trace_hits"] == 0, "another key: the loggers' levels differ"
    assert sum("g is traced for ()" in line for line in warnings_in(shown_err)) == 1, shown_err
    again, _ = child(cache_dir, "silenced")
    assert again["traces"]["trace_hits"] == 1, "the silenced process's own entry still serves a silenced process"


def test_records_are_given_again_by_their_logger_with_their_source_and_this_thread_only(caplog):
    import tensorflow as tf

    logger = tf.get_logger()
    with logged.recorded() as found:
        logger.warning("kept %d", 1)
        logger.info("below WARNING: not kept")
        logging.getLogger("absl.child").error("a child's record reaches its parent's handler")
        other = threading.Thread(target=logger.warning, args=("another thread's",))
        other.start()
        other.join()
    assert [(r[0], r[1], r[2]) for r in found] == [
        ("tensorflow", logging.WARNING, "kept 1"),
        ("absl.child", logging.ERROR, "a child's record reaches its parent's handler")]
    caplog.clear()  # the originals
    logged.give(found)
    given = [(r.name, r.levelno, r.getMessage(), r.pathname, r.lineno, r.funcName) for r in caplog.records]
    assert given == [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in found]
    assert not logger.handlers or all(not isinstance(h, logged._Recorder) for h in logger.handlers)


def test_deprecation_notices_are_tensorflows_once_per_process_and_not_recorded():
    import tensorflow as tf

    @tf.function
    def uses_deprecated(x):
        return tf.compat.v1.to_float(x)

    with logged.recorded() as found:
        uses_deprecated.get_concrete_function(tf.TensorSpec([], tf.int32))
    assert not [r for r in found if "deprecated" in r[2]]


def test_what_the_recording_cannot_see_is_keyed_or_refused():
    logger = logging.getLogger("tensorflow")
    before = logger.level
    try:
        assert logged.shown()["tensorflow"] is True
        logger.setLevel(logging.ERROR)
        assert logged.shown()["tensorflow"] is False
    finally:
        logger.setLevel(before)
    dropping = logging.Filter("nothing")
    logger.addFilter(dropping)
    try:
        with pytest.raises(Uncacheable, match="filter"):
            logged.shown()
    finally:
        logger.removeFilter(dropping)
