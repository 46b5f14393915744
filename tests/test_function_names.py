"""The functions plugin's fast key does not depend on function names (functions/keying.exact_hash).

Names of traced functions are tracing counters (``__inference_f_123``), and a trace restored from the cache
(traces/) registers its functions under new names. Keyed with their names, the alias the tracing process
wrote would miss in the first process that restores the trace, which would then canonicalize every node.
"""

from __future__ import annotations

import pytest

from .helpers import run_python

CHILD = '''
import json
import numpy as np
import tensorflow as tf
import graphcache
from graphcache.functions import keying

if {forbid_canonical}:  # this process must find the optimized graph by the fast key's alias alone
    def no_canonical(self):
        raise AssertionError("the canonical key was computed")
    keying.FunctionCall.canonical = no_canonical
cache = graphcache.GraphCache({cache_dir!r}, traces=True, functions=True)
w = tf.Variable(np.linspace(0.1, 1.0, 16, dtype=np.float32).reshape(4, 4))  # the cond takes inner's branch
before = cache.stats()

@tf.function
def inner(y):
    return tf.tanh(y) * {scale}

@tf.function
def outer(x):
    y = tf.matmul(x, w)
    y = tf.cond(tf.reduce_sum(y) > 0, lambda: inner(y), lambda: y - 1.0)
    return tf.reduce_sum(y)

value = float(outer(tf.ones((4, 4))).numpy())
cache.wait_for_writes()
stats = cache.stats()
print(json.dumps({{"value": value,  # this process's hits (the counters are the cache dir's)
                  "trace_hits": stats.traces["trace_hits"] - before.traces["trace_hits"],
                  "function_hits": stats.functions["function_hits"] - before.functions["function_hits"]}}))
'''


def child(cache_dir, *, scale: float = 2.0, forbid_canonical: bool = False) -> dict:
    return run_python(CHILD.format(cache_dir=str(cache_dir), scale=scale, forbid_canonical=forbid_canonical))


def test_the_first_process_that_restores_a_trace_hits_its_optimized_graph_by_the_fast_key(cache_dir):
    cold = child(cache_dir)
    assert cold["trace_hits"] == 0 and cold["function_hits"] == 0
    warm = child(cache_dir, forbid_canonical=True)  # restored under new names: the alias still matches
    assert warm["trace_hits"] >= 1 and warm["function_hits"] >= 1, warm
    assert warm["value"] == cold["value"]
    changed = child(cache_dir, scale=3.0)  # a callee's body changed: another trace, another function key
    assert changed["trace_hits"] == 0 and changed["function_hits"] == 0, changed
    assert changed["value"] == pytest.approx(1.5 * cold["value"], rel=1e-5), (changed, cold)  # float32 sums


def test_the_fast_key_ignores_a_consistent_renaming_and_nothing_else():
    import tensorflow as tf
    from tensorflow.core.framework import function_pb2

    from graphcache.compile.functionlib import rename
    from graphcache.functions.keying import exact_hash

    def library_of(function) -> tuple[function_pb2.FunctionDef, dict[str, function_pb2.FunctionDef]]:
        concrete = function.get_concrete_function(tf.TensorSpec([4], tf.float32))
        return concrete.function_def, {f.signature.name: f for f in concrete.graph.as_graph_def().library.function}

    def make(scale: float):
        @tf.function
        def inner(y):
            return tf.tanh(y) * scale

        @tf.function
        def outer(x):
            return tf.cond(tf.reduce_sum(x) > 0, lambda: inner(x), lambda: x - 1.0)

        return outer

    main, library = library_of(make(2.0))
    assert library, "the function calls others (the cond's branches, inner)"
    names = [main.signature.name, *library]
    copies = function_pb2.FunctionDefLibrary()
    for one in (main, *library.values()):
        copies.function.add().CopyFrom(one)
    renamed = {name: f"{name}_restored_{index}" for index, name in enumerate(reversed(names))}
    rename(copies, renamed)
    renamed_main, *renamed_rest = copies.function
    renamed_library = {f.signature.name: f for f in renamed_rest}
    assert exact_hash(renamed_main, renamed_library) == exact_hash(main, library)

    other_main, other_library = library_of(make(3.0))
    assert exact_hash(other_main, other_library) != exact_hash(main, library)
    before = main.SerializeToString(deterministic=True)
    exact_hash(main, library)
    assert main.SerializeToString(deterministic=True) == before  # renames a copy, never the context's functions


def test_a_function_that_calls_none_is_hashed_as_its_renamed_copy_serializes():
    """keying.exact_hash renames a function without callees on its serialized bytes (no copy): the result must be
    the hash of the copy renamed ``f0`` and serialized, the scheme functions with callees use, so keys agree."""
    import tensorflow as tf
    import xxhash
    from tensorflow.core.framework import function_pb2

    from graphcache.compile.functionlib import rename
    from graphcache.functions.keying import exact_hash

    def function_def(scale: float) -> function_pb2.FunctionDef:
        @tf.function
        def deep(x):
            y = x
            for _ in range(20):
                y = tf.concat([y[1:], y[:1]], axis=0) * scale + 0.1
            return tf.reduce_sum(y)

        return deep.get_concrete_function(tf.TensorSpec([4], tf.float32)).function_def

    main = function_def(0.5)
    copies = function_pb2.FunctionDefLibrary()
    copies.function.add().CopyFrom(main)
    rename(copies, {main.signature.name: "f0"})
    data = copies.function[0].SerializeToString(deterministic=True)
    expected = xxhash.xxh3_128(len(data).to_bytes(8, "little") + data).hexdigest()
    before = main.SerializeToString(deterministic=True)
    assert exact_hash(main, {}) == expected
    assert main.SerializeToString(deterministic=True) == before  # the context's function is not renamed

    same_body = function_pb2.FunctionDef()
    same_body.CopyFrom(main)
    same_body.signature.name = "__inference_deep_restored_99"
    assert exact_hash(same_body, {}) == expected
    assert exact_hash(function_def(0.25), {}) != expected
