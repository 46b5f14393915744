"""A restored trace is what TensorFlow's own trace would be, seen from everything a program can ask of it (found by
running TensorFlow's own tf.function tests against the cache: tests/test_tf2_own_suites.py).

Each test runs one child program plain, then twice on one cache dir (cold: traced and stored; warm: restored), and
compares what the program saw.
"""

from __future__ import annotations

from .helpers import run_python

CONSTANT_CAPTURES_CHILD = '''
import json, logging, warnings
import tensorflow as tf
from tests.helpers import trace_child_preamble
exec(trace_child_preamble({cache_dir}))

SMALL = tf.constant([1.0, 2.0, 3.0])   # at most 128 elements: TensorFlow's trace copies it in as a Const
BIG = tf.ones([300])                   # more: a Placeholder fed with the tensor
w = tf.Variable(2.0)

@tf.function
def scaled(x):
    return tf.reduce_sum(x * SMALL) * w + tf.reduce_sum(BIG)

@tf.function
def outer(x):
    return scaled(x) + 1.0

out = {{}}
concrete = scaled.get_concrete_function(tf.TensorSpec([3], tf.float32))
out["captures"] = [t.op.type for t in concrete.graph.internal_captures]
out["inputs"] = [t.op.type for t in concrete.inputs]
with tf.GradientTape() as tape:
    y = concrete(tf.ones([3]))
out["value"] = float(y)
out["gradient"] = float(tape.gradient(y, w))
out["outer"] = float(outer(tf.ones([3])))
if {cache_dir} is not None:
    cache.wait_for_writes()
    out["hits"] = cache.stats().traces["trace_hits"]
print(json.dumps(out))
'''


def test_a_small_captured_tensor_is_a_constant_in_the_restored_graph_as_in_the_traced_one(cache_dir):
    """TensorFlow copies a small captured eager tensor into its graph as a Const (its FunctionDef takes it as an
    argument all the same); the loader that rebuilds a restored trace's graph made it a Placeholder."""
    plain, cold, warm = (run_python(CONSTANT_CAPTURES_CHILD.format(cache_dir=repr(directory)))
                         for directory in (None, str(cache_dir), str(cache_dir)))
    assert "Const" in plain["captures"] and "Placeholder" in plain["captures"], plain
    assert warm["hits"] >= 1
    for run in (cold, warm):
        assert {name: run[name] for name in plain} == plain

