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


DIRECT_CHILD = '''
import json, logging, warnings
import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import function_type_utils, tracing_compilation
from tests.helpers import trace_child_preamble
exec(trace_child_preamble({cache_dir}))

w = tf.Variable([1.0, 2.0, 3.0])

def scaled(x):
    return tf.reduce_sum(x * w) * 0.5

def branchy(x):
    if x > 0:  # a tensor as a Python bool: autograph converts it under tf.function, and only there
        return x * 2.0
    return x - 1.0

def direct(function, *args):
    """tracing_compilation's own entry, no tf.function around the function (TensorFlow's own tests call it so)."""
    function_type, defaults = function_type_utils.make_function_type(function, None)
    options = tracing_compilation.TracingOptions(function, function.__name__, polymorphic_type=function_type,
                                                 default_values=defaults)
    return tracing_compilation.call_function(args, {{}}, options)

def outcome(call):
    try:
        return float(call())
    except Exception as exc:
        return type(exc).__name__

out = {{"scaled": outcome(lambda: direct(scaled, tf.ones([3]))),
        "scaled_again": outcome(lambda: direct(scaled, tf.constant([2.0, 0.0, 1.0])))}}
out["branchy"] = outcome(lambda: tf.function(branchy)(tf.constant(3.0)) if {through_function} else
                         direct(branchy, tf.constant(3.0)))
if {cache_dir} is not None:
    cache.wait_for_writes()
    out["hits"] = cache.stats().traces["trace_hits"]
print(json.dumps(out))
'''


def test_a_trace_through_tracing_compilations_own_entry_is_cached_and_keyed_apart_from_tf_functions(cache_dir,
                                                                                                   tmp_path):
    """``tracing_compilation.call_function`` traces a Python function with no tf.function around it: no autograph
    conversion, no variable-creator scope. Such a trace is cached, and never served to a tf.function of the same
    function (or the other way round): there autograph turns ``if tensor:`` into a cond, here it raises."""
    def run(directory, through_function):
        # from a file: autograph converts only functions whose source it can read
        program = tmp_path / f"direct_{through_function}.py"
        program.write_text(DIRECT_CHILD.format(cache_dir=repr(directory), through_function=through_function))
        return run_python(f"import runpy; runpy.run_path({str(program)!r}, run_name='__main__')")

    plain = run(None, False)
    assert plain["branchy"] == "OperatorNotAllowedInGraphError" and run(None, True)["branchy"] == 6.0
    first = run(str(cache_dir), True)   # stores tf.function(branchy)'s trace
    assert first["branchy"] == 6.0
    for _ in range(2):  # then the direct traces: stored, then restored
        again = run(str(cache_dir), False)
        assert {name: again[name] for name in plain} == plain
    assert again["hits"] - first["hits"] >= 2  # scaled, twice; branchy raises while tracing: nothing to store


def test_an_entry_that_does_not_tell_constant_captures_apart_is_not_restored():
    """An entry written before captures were told apart ("tensor" for a Const-captured tensor too) would give a
    Placeholder where the trace had a Const: it is discarded as corrupt (traced again, stored anew)."""
    import json
    import struct

    import pytest
    from tensorflow.core.framework import function_pb2

    from graphcache.errors import CorruptEntryError
    from graphcache.traces import stored

    library = function_pb2.FunctionDefLibrary()
    library.function.add().signature.name = "f_1"
    described = stored.Described("f_1", [["g:SMALL", "tensor", 1, [3]]], b"", b"", [], 0)
    payload = stored.encode(described, library)
    assert stored.decode(payload).captures == described.captures
    size = struct.unpack(">I", payload[len(stored.MAGIC):len(stored.MAGIC) + 4])[0]
    start = len(stored.MAGIC) + 4
    meta = json.loads(payload[start:start + size])
    del meta[stored.CAPTURE_KINDS]
    data = json.dumps(meta).encode()
    older = stored.MAGIC + struct.pack(">I", len(data)) + data + payload[start + size:]
    with pytest.raises(CorruptEntryError, match="predates constant captures"):
        stored.decode(older)
    meta["captures"] = [["g:w", "variable", 1, []]]  # an older entry without tensor captures is as it was
    data = json.dumps(meta).encode()
    assert stored.decode(stored.MAGIC + struct.pack(">I", len(data)) + data + payload[start + size:]).captures
