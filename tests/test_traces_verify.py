"""GRAPHCACHE_TRACE_VERIFY's comparison (stored.library_hash, traces/fnrefs.py): tracing counters are not differences,
what a trace computes is.

A tf.function called under a ``GradientTape`` inside another one's trace gets forward and backward functions that
name each other in string attributes, and its captures' placeholders are named by tensor ids: both carry the
process's counters, which the canonical hash used to see, so verify reported a hit of such a trace as "differs"
(and removed a good entry). Checked in a fresh process pair (cold stores, a verified warm run hits without an
ERROR) and in this process: two traces of one program hash alike, a trace whose nested function computes
something else, or differentiates another variable, does not.
"""

from __future__ import annotations

from .helpers import run_python, trace_child_preamble

CHILD = '''
import json, logging, warnings
import tensorflow as tf
{capture}
w = tf.Variable([1.0, 2.0])
v = tf.Variable([3.0, -1.0])


@tf.function
def inner(x):
    return tf.reduce_sum(tf.sin(x) * w + v)


@tf.function
def step(x):
    with tf.GradientTape() as tape:
        y = inner(x)
    return y, tape.gradient(y, [w, v])


y, grads = step(tf.constant([0.5, 1.0]))
cache.wait_for_writes()
print(json.dumps({{"y": float(y), "grads": [g.numpy().tolist() for g in grads], "traces": cache.stats().traces,
                  "errors": [m for level, m in messages if level == "ERROR"],
                  "verified": sum("verified against a fresh trace" in m for _, m in messages)}}))
'''


def test_a_nested_function_under_a_tape_verifies_in_a_later_process(cache_dir):
    code = CHILD.format(capture=trace_child_preamble(cache_dir))
    cold = run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"})
    warm = run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"})
    assert cold["traces"]["trace_misses"] == 1 and not cold["errors"]
    assert not warm["errors"], warm["errors"]
    assert warm["verified"] == 1 and warm["traces"]["trace_hits"] == 1
    assert (warm["y"], warm["grads"]) == (cold["y"], cold["grads"])


def _library(body: str, differentiated: str = "w"):
    import tensorflow as tf

    from graphcache.traces import stored

    w, v = tf.Variable([1.0, 2.0]), tf.Variable([3.0, -1.0])
    op = {"sin": tf.sin, "cos": tf.cos}[body]

    @tf.function
    def inner(x):
        return tf.reduce_sum(op(x) * w + v)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = inner(x)
        return y, tape.gradient(y, {"w": w, "v": v}[differentiated])

    concrete = step.get_concrete_function(tf.TensorSpec([2], tf.float32))
    return stored.library_of(concrete.function_def.signature.name)


def test_counters_do_not_differ_and_computations_do():
    from graphcache.compile.functionlib import canonical_function_hash
    from graphcache.traces import stored

    first, second = _library("sin"), _library("sin")

    def raw(library):
        return canonical_function_hash(library.function[0], {f.signature.name: f for f in library.function[1:]})

    assert raw(first) != raw(second), "the counters this comparison must see past are there"
    assert stored.library_hash(first) == stored.library_hash(second)
    assert stored.library_hash(_library("cos")) != stored.library_hash(first)
    assert stored.library_hash(_library("sin", "v")) != stored.library_hash(first)


def test_a_registered_library_keeps_its_forward_and_backward_names_in_step():
    from graphcache.traces import fnrefs, lazy

    library = _library("sin")
    names = {fdef.signature.name for fdef in library.function}
    assert any(key in fdef.attr for fdef in library.function for key in fnrefs.NAME_ATTRS)
    renamed = lazy.register(library)
    new_names = {fdef.signature.name for fdef in library.function}
    for fdef in library.function:
        for key in fnrefs.NAME_ATTRS:
            if key in fdef.attr:
                assert fdef.attr[key].s.decode() in new_names, "it names a registered function"
    assert set(renamed) == names
