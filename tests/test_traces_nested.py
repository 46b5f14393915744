"""tf.functions traced inside another one's trace (graphcache/traces/nested.py): stored as their top-level call
would be, and made again, as TensorFlow's own cache held them, when the outer trace hits.

The corpus' ``tf_module_loop`` shape: a tf.Module whose ``@tf.function __call__`` is called inside ``train(model,
dataset)`` (a ``[None]`` batch) and then at the top with a ``[2]`` tensor, which plain TensorFlow serves from the
nested ``[None]`` trace. Before, the first process after the one that stored ``train`` missed ``__call__`` (the
hit ran no Python, so no nested trace existed) and traced it for ``[2]``: a trace plain TensorFlow never made. Now
the first warm process hits both, adds no entry, and each tf.function's in-process traces are plain's (their
count and input shapes), with plain's results bitwise; a module-level tf.function called from a method of a
tf.Module held in a global, and one called through ``self``, too. A variant changing the nested function's code
misses both (the outer key walks what it calls) with plain's results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .helpers import ROOT, run_python, trace_child_preamble

CHILD = '''
import json, logging, re, warnings
import numpy as np
import tensorflow as tf
{capture}
SHIFT = {shift}
x = np.linspace(-1.0, 1.0, 64).astype(np.float32)
y = (3.0 * x + 2.0).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


@tf.function
def shifted(t):
    return t + SHIFT


class Linear(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(5.0)
        self.b = tf.Variable(0.0)

    @tf.function
    def __call__(self, t):
        return shifted(self.w * t + self.b)

    @tf.function
    def twice(self, t):
        return self(self(t))


model = Linear()


@tf.function
def train(model, dataset):
    total = tf.constant(0.0)
    for xs, ys in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(ys - model(xs)))
        dw, db = tape.gradient(loss, [model.w, model.b])
        model.w.assign_sub(0.1 * dw)
        model.b.assign_sub(0.1 * db)
        total += loss
    return total


losses = [float(train(model, dataset)) for _ in range(2)]
out = {{"losses": losses, "call": model(tf.constant([1.0, 2.0])).numpy().tolist(),
        "twice": model.twice(tf.constant([0.5])).numpy().tolist(),
        "after": model(tf.constant([3.0, 4.0, 5.0])).numpy().tolist()}}
out["traces"] = {{name: [f.experimental_get_tracing_count(),
                         sorted(re.sub(r" at 0x[0-9a-f]+", "", str(c.structured_input_signature))
                                for c in f._list_all_concrete_functions())]
                 for name, f in (("train", train), ("call", model.__call__), ("twice", model.twice),
                                 ("shifted", shifted))}}
if {use_cache}:
    cache.wait_for_writes()
    out["stats"] = cache.stats().traces
    out["stored"] = sorted(m.split(" key=")[0][len("graphcache trace stored "):] for _, m in messages
                           if m.startswith("graphcache trace stored "))
    out["hit"] = sorted(m.split(" key=")[0][len("graphcache trace hit "):] for _, m in messages
                        if m.startswith("graphcache trace hit "))
    out["errors"] = [m for level, m in messages if level == "ERROR"]
print(json.dumps(out))
'''
RESULTS = ("losses", "call", "twice", "after", "traces")


def child(cache_dir: Path | None, folder: Path, shift: float = 0.25) -> dict:
    """The program run from a file (``python -c`` has no source for AutoGraph, which then cannot convert ``train``'s
    loop over the dataset: a Python loop over a dataset in a graph never ends)."""
    code = CHILD.format(capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None, shift=shift)
    program = folder / f"nested_{len(list(folder.glob('nested_*.py')))}.py"
    program.write_text(code)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), "GRAPHCACHE_TRACE_VERIFY": "0"}
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def results(out: dict) -> dict:
    return {name: out[name] for name in RESULTS}


def test_nested_traces_hit_in_the_first_warm_process_as_plain_tensorflow_holds_them(cache_dir, tmp_path):
    plain = child(None, tmp_path)
    assert plain["traces"]["call"][0] == 1, "plain serves both top-level calls from the nested [None] trace"
    cold = child(cache_dir, tmp_path)
    assert results(cold) == results(plain) and not cold["errors"]
    # train, twice; __call__ (inside train) and shifted (inside __call__) stored as their top-level calls would be
    assert cold["stored"] == ["__call__ (Linear)", "shifted", "train", "twice (Linear)"], cold["stored"]
    warm = child(cache_dir, tmp_path)
    assert results(warm) == results(plain), "results bitwise, and every tf.function holds plain's traces"
    assert not warm["errors"] and warm["stored"] == [], warm["stored"]
    assert warm["hit"] == ["__call__ (Linear)", "shifted", "train", "twice (Linear)"], warm["hit"]


def test_a_changed_nested_function_misses_with_plain_results(cache_dir, tmp_path):
    child(cache_dir, tmp_path)
    plain = child(None, tmp_path, shift=0.75)
    changed = child(cache_dir, tmp_path, shift=0.75)
    assert results(changed) == results(plain) and not changed["errors"]
    assert changed["hit"] == [], changed["hit"]
    assert changed["stored"] == ["__call__ (Linear)", "shifted", "train", "twice (Linear)"], changed["stored"]


def test_locate_finds_methods_of_objects_and_tf_functions_of_globals():
    import tensorflow as tf

    from graphcache.traces import instance, nested
    from graphcache.traces.keying import Arguments

    class Inner(tf.Module):
        @tf.function
        def run(self, t):
            return t

    class Outer(tf.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        @tf.function
        def go(self, t):
            return self.inner.run(t)

    outer = Outer()
    root = instance.BoundMethod(outer, Outer.go._python_function)
    where = nested.locate(root, instance.BoundMethod(outer.inner, Inner.run._python_function))
    assert where == ["self", "inner", "run"]
    resolved = nested.resolve(root, where)  # the instance's bound tf.function
    assert resolved is outer.inner.run and resolved._python_function.__qualname__.endswith("Inner.run")
    assert nested.locate(Arguments(root, (("m", outer.inner),)),
                         instance.BoundMethod(outer.inner, Inner.run._python_function)) in (["arg:m", "run"],
                                                                                              ["self", "inner", "run"])
    assert nested.locate(root, instance.BoundMethod(Inner(), Inner.run._python_function)) is None, "another object"


def test_a_nested_trace_whose_graph_inherits_other_state_is_refused():
    import tensorflow as tf
    from tensorflow.python.eager.polymorphic_function import tracing_compilation
    from tensorflow.python.framework import ops

    from graphcache.traces import keying, nested
    from graphcache.traces.walk import Uncacheable

    scope = tracing_compilation.ScopeType.VARIABLE_CREATION
    outcomes = []

    def check(top):
        try:
            nested.check_context(scope, top)
            outcomes.append("ok")
        except Uncacheable as exc:
            outcomes.append(exc.detail)

    @tf.function(autograph=False)
    def outer(x):
        with ops.init_scope():
            top = keying.check_context(scope, nested=True)
        check(top)
        with tf.device("/cpu:0"):  # a string device scope: not in a nested FuncGraph (TensorFlow's cache agrees)
            check(top)
        tf.compat.v1.add_to_collection("graphcache_nested_test", x)  # a nested FuncGraph would copy it
        check(top)
        return x

    outer.get_concrete_function(tf.TensorSpec([], tf.float32))
    assert outcomes[:2] == ["ok", "ok"] and "collections" in outcomes[2], outcomes


RECURSIVE_CHILD = '''
import json, tempfile
import tensorflow as tf
from tensorflow.python.ops import cond_v2
import graphcache

cache = graphcache.GraphCache(tempfile.mkdtemp(), traces=True)
traces = []

def test():  # a closure, as in TensorFlow's test: the function reads itself through its cell
    @tf.function(autograph=False)
    def recursive_fn(n):
        traces.append(1)
        return cond_v2.cond_v2(n > 0, recursive_fn(n - 1), 1)

    try:
        recursive_fn(tf.constant(5))
    except RecursionError:
        return "RecursionError"
    return "no error"

print(json.dumps({"raised": test(), "traces": len(traces)}))
'''


def test_a_recursive_function_raises_recursion_error_once_as_plain_tensorflow_does():
    """TensorFlow's test_recursive_tf_function_with_cond: a tf.function that calls itself while traced reaches the
    recursion limit. A nested trace's handler traced again on that RecursionError, at every level: the run never
    ended (tens of thousands of nested traces in 25 s). Each level is traced once now."""
    out = run_python(RECURSIVE_CHILD, timeout=240)
    assert out["raised"] == "RecursionError"
    assert out["traces"] < 200, out  # one per level until the limit (about 60); unbounded before
