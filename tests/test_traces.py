"""tf.function traces served from the cache (graphcache/traces/): no Python tracing on a hit, never a stale one.

The end-to-end tests run real TensorFlow in fresh processes (tests.helpers.run_python) with
``GRAPHCACHE_TRACE_VERIFY=1`` (every hit is traced anyway and compared: a stale hit would be an ERROR):
a cold process stores, a warm one hits and returns exactly what a plain-TensorFlow process returns, and
each thing a trace reads, changed between the processes, is a miss that gives plain TensorFlow's result.
Whether Python ran is seen by a profile hook (a counter inside the function would itself be a side
effect the cache refuses). The walk's rules are checked in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphcache import GraphCache
from graphcache.store import LocalStore

from .helpers import ROOT, run_python, trace_child_preamble

KIND = "tf_trace"
BASE = {"scale": 0.5, "closure": 1.5, "helper": "y * 0.25 + 0.1", "own": "+ 1.0", "shape": [3, 4],
        "dtype": "float32", "var_shape": [2, 3], "small": [1.0, 2.0, 3.0]}
CHANGED = {"scale": 0.75, "closure": 2.5, "helper": "y * 0.25 - 0.1", "own": "- 1.0", "shape": [5, 4],
           "dtype": "float64", "var_shape": [4, 3], "small": [1.0, 2.0, 4.0]}
# Each of these functions reads one thing CHANGED changes (deep and jitted read none of them). uses_tensor
# captures a small eager tensor (TensorFlow copies it into the graph as a constant) and a big one (an input).
VARIANT_FUNCTIONS = ("uses_global", "uses_closure", "uses_helper", "own_code", "shapes", "var_shape", "uses_tensor")

CHILD = '''
import json, logging, os, sys, warnings
import numpy as np
import tensorflow as tf

V = {variant!r}
{capture}
w = tf.Variable(np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8))
other = tf.Variable(np.ones(V["var_shape"], np.float32))
SCALE = V["scale"]
SMALL = tf.constant(V["small"])
BIG = tf.constant(np.linspace(0.0, 1.0, 300, dtype=np.float32))
log = []
state = {{}}

def helper(y):
    return {helper}

def make_closure(c):
    @tf.function
    def uses_closure(x):
        return tf.reduce_sum(x * c)
    return uses_closure

uses_closure = make_closure(V["closure"])

@tf.function
def deep(x):
    y = x
    for _ in range(60):
        y = tf.concat([y[:, 1:], y[:, :1]], axis=1) * 0.5 + 0.1
    return tf.reduce_sum(tf.matmul(y, w)), {{"last": y[0]}}

@tf.function
def uses_global(x):
    return tf.reduce_sum(x) * SCALE

@tf.function
def uses_helper(x):
    return tf.reduce_sum(helper(x))

@tf.function
def own_code(x):
    return tf.reduce_sum(x) {own}

@tf.function
def shapes(x):
    return tf.reduce_sum(tf.cast(x, tf.float32) * 2.0) + tf.cast(tf.shape(x)[0], tf.float32)

@tf.function
def var_shape(x):
    return tf.reduce_sum(other) + tf.reduce_sum(x)

@tf.function
def uses_tensor(x):
    return tf.reduce_sum(x) + tf.reduce_sum(SMALL) * tf.reduce_sum(BIG)

@tf.function(jit_compile=True)
def jitted(x):
    return tf.reduce_sum(tf.sin(x) * w)

@tf.function
def appender(x):
    log.append(1)  # a Python side effect of tracing
    return x + 1.0

@tf.function
def creates(x):
    if "v" not in state:
        state["v"] = tf.Variable(3.0)  # a variable created by the first trace
    return x * state["v"]

names = ("deep", "uses_global", "uses_closure", "uses_helper", "own_code", "shapes", "var_shape", "uses_tensor",
         "jitted", "appender", "creates")
ran = dict.fromkeys(names, 0)
def profile(frame, event, arg):
    if event == "call":
        name = frame.f_code.co_name.removeprefix("tf__")
        if name in ran:
            ran[name] += 1

x = tf.constant(np.arange(64, dtype=np.float32).reshape(8, 8) / 64.0)
sys.setprofile(profile)
deep_sum, deep_rest = deep(x)
values = {{
    "deep": [float(deep_sum.numpy()), deep_rest["last"].numpy().tolist()],
    "uses_global": float(uses_global(x).numpy()),
    "uses_closure": float(uses_closure(x).numpy()),
    "uses_helper": float(uses_helper(x).numpy()),
    "own_code": float(own_code(x).numpy()),
    "shapes": float(shapes(tf.ones(V["shape"], V["dtype"])).numpy()),
    "var_shape": float(var_shape(x).numpy()),
    "uses_tensor": float(uses_tensor(x).numpy()),
    "jitted": float(jitted(x).numpy()),
    "appender": appender(tf.constant(1.0)).numpy().tolist(),
    "creates": float(creates(tf.constant(2.0)).numpy()),
}}
again = float(deep(x)[0].numpy())
sys.setprofile(None)
with tf.GradientTape() as tape:
    grad_of = deep(x)[0]
values["gradient"] = tape.gradient(grad_of, w).numpy().sum().tolist()
out = {{"values": values, "again": again, "ran": ran}}
if {use_cache}:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(traces=stats.traces, reasons=stats.trace_reasons, by_kind=stats.by_kind.get("tf_trace"),
               uncacheable=stats.uncacheable, names=sorted(r.name for r in cache.entries() if r.kind == "tf_trace"))
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
print(json.dumps(out))
'''


def child(cache_dir: Path | None, variant: dict, *, verify: bool = True) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None,
                        helper=variant["helper"], own=variant["own"])
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1" if verify else "0"})


def graphcache_cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "graphcache", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def trace_files(cache_dir: Path) -> list[Path]:
    return [LocalStore(cache_dir).path_for(row.key) for row in GraphCache(cache_dir).entries() if row.kind == KIND]


CACHED = ("deep", "jitted", *VARIANT_FUNCTIONS)


def test_a_warm_process_skips_tracing_and_every_change_misses(cache_dir):
    plain = child(None, BASE)
    cold = child(cache_dir, BASE)
    assert cold["values"] == plain["values"] and not cold["errors"] and not cold["warnings"], cold
    assert cold["traces"]["trace_hits"] == 0 and cold["traces"]["trace_misses"] == len(CACHED) + 1  # + creates' retrace
    assert all(cold["ran"][name] >= 1 for name in CACHED)
    assert cold["names"] == sorted([*CACHED, "creates"])

    warm = child(cache_dir, BASE)  # verified: every hit is traced anyway and compared
    assert warm["values"] == plain["values"] and warm["again"] == plain["values"]["deep"][0]
    assert not warm["errors"] and not warm["warnings"], (warm["errors"], warm["warnings"])
    assert warm["traces"]["trace_hits"] == len(CACHED) + 1
    assert sum("verified against a fresh trace" in m for m in warm["log"]) == len(CACHED) + 1

    fast = child(cache_dir, BASE, verify=False)
    assert fast["values"] == plain["values"], "a hit returns exactly what plain TensorFlow returns"
    assert all(fast["ran"][name] == 0 for name in CACHED), fast["ran"]  # no Python tracing
    assert fast["traces"]["trace_hits"] == 2 * (len(CACHED) + 1)
    assert fast["by_kind"]["entries"] == len(CACHED) + 1

    # The side effects are traced in every process and never stored.
    for run in (cold, warm, fast):
        assert run["ran"]["appender"] == 1 and run["ran"]["creates"] >= 1
        assert run["values"]["appender"] == 2.0 and run["values"]["creates"] == 6.0
    assert fast["reasons"]["side_effect"] == 3 and fast["reasons"]["creates_variables"] == 3

    # Each function's one dependency changed: misses with plain TensorFlow's results, no stale hit.
    plain_changed = child(None, CHANGED)
    changed = child(cache_dir, CHANGED)
    assert not changed["errors"], changed["errors"]
    for name in (*CACHED, "appender", "creates"):
        assert changed["values"][name] == plain_changed["values"][name], name
    for name in VARIANT_FUNCTIONS:
        assert changed["values"][name] != plain["values"][name], name
        assert changed["ran"][name] >= 1, name  # traced: a miss
    assert changed["traces"]["trace_misses"] == cold["traces"]["trace_misses"] + len(VARIANT_FUNCTIONS)
    assert changed["ran"]["deep"] == 1  # verify traced it; deep itself was a hit
    assert changed["by_kind"]["entries"] == len(CACHED) + 1 + len(VARIANT_FUNCTIONS)

    rows = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "ls", "--json"))
    traces = [row for row in rows if row["kind"] == KIND]
    assert len(traces) == len(CACHED) + 1 + len(VARIANT_FUNCTIONS) and all(row["compile_seconds"] > 0 for row in traces)
    stats = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "stats", "--json"))
    assert stats["trace_hits"] == changed["traces"]["trace_hits"] and stats["trace_uncacheable"] == 8
    assert stats["by_kind"][KIND]["hits"] == stats["trace_hits"]
    assert stats["trace_uncacheable_reasons"] == {"side_effect": 4, "creates_variables": 4}
    verified = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "verify", "--json"))
    assert verified["bad"] == []
    # `graphcache misses`: what each changed trace differs in from the stored one, and why others are not cached
    recorded = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "misses", "--json", "--limit", "100"))
    latest = {}
    for miss in reversed(recorded):  # oldest first: the newest of each name wins
        latest[miss["name"]] = miss
    assert latest["tf.function uses_global"]["differs"] == ["code"]
    assert latest["tf.function var_shape"]["differs"] == ["code"]
    assert latest["tf.function shapes"]["differs"] == ["signature"]
    assert "side_effect" in latest["tf.function appender"]["detail"]


def test_a_corrupt_trace_entry_costs_a_warning_and_a_normal_trace(cache_dir):
    cold = child(cache_dir, BASE, verify=False)
    files = trace_files(cache_dir)
    assert len(files) == len(CACHED) + 1
    for path in files:
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF  # a bit flip in the payload: the checksum catches it
        path.write_bytes(bytes(data))
    flipped = child(cache_dir, BASE, verify=False)
    assert flipped["values"] == cold["values"]
    assert any("corrupt" in w for w in flipped["warnings"]), flipped["warnings"]
    assert flipped["traces"]["trace_hits"] == 0 and all(flipped["ran"][name] >= 1 for name in CACHED)
    assert flipped["uncacheable"]["corrupt_entry"] == len(files)
    again = child(cache_dir, BASE, verify=False)  # the corrupt entries were replaced by good ones
    assert again["traces"]["trace_hits"] == len(files) and again["values"] == cold["values"]


# -- the walk (the key's Python side), in this process -------------------------------------------------------
SCALE_FOR_WALK = 2.0
VALUES_FOR_WALK = [1, 2.5, "a"]


def _digest(fn) -> tuple[str, dict]:
    from graphcache.traces.walk import Walk

    walk = Walk()
    walk.function(fn, "")
    return walk.digest(), walk.bindings


def _refused(fn) -> str:
    from graphcache.traces.walk import Uncacheable

    with pytest.raises(Uncacheable) as caught:
        _digest(fn)
    return caught.value.reason


def test_the_walk_sees_code_globals_closures_and_helpers_and_names_variables_by_path():
    import tensorflow as tf

    def make(c):
        def fn(x):
            return x * c * SCALE_FOR_WALK + len(VALUES_FOR_WALK)
        return fn

    assert _digest(make(1.5))[0] == _digest(make(1.5))[0]
    assert _digest(make(1.5))[0] != _digest(make(2.5))[0]  # a closure float
    before = _digest(make(1.5))[0]
    VALUES_FOR_WALK.append(3)  # a list the code reads, changed
    try:
        assert _digest(make(1.5))[0] != before
    finally:
        VALUES_FOR_WALK.pop()
    assert _digest(make(1.5))[0] == before

    variable = tf.Variable(tf.ones([2, 3]))

    def helper(y):
        return y * variable

    def outer(x):
        return helper(x) + 1.0 if x in {"b", "a"} else x

    digest, bindings = _digest(outer)
    assert list(bindings) == ["c:helper/c:variable"] and bindings["c:helper/c:variable"] is variable
    other = tf.Variable(tf.ones([2, 4]))

    def helper_other(y):
        return y * other

    def outer_other(x):
        return helper_other(x) + 1.0 if x in {"b", "a"} else x

    assert _digest(outer_other)[0] != digest  # a variable's shape


class _Thing:
    scale = 2.0


def test_the_walk_refuses_what_it_cannot_key():
    import tensorflow as tf

    thing = _Thing()
    assert _refused(lambda x: print(x)) == "builtin"
    assert _refused(lambda x: hash("seeded per process")) == "builtin"
    assert _refused(lambda x: (thing, x)[1]) == "value"  # an instance used as a whole
    by_attribute = _digest(lambda x: x * thing.scale)  # an instance read only through an attribute: keyed by it
    thing.scale = 3.0
    assert _digest(lambda x: x * thing.scale) != by_attribute
    assert _digest(lambda x: x * tf.nn.relu(x))[1] == {}  # library code: named by its version, not walked

    def writes_global(x):
        global SCALE_FOR_WALK
        SCALE_FOR_WALK = x
        return x

    assert _refused(writes_global) == "writes_state"

    def make_counter():
        count = 0

        def bump(x):
            nonlocal count
            count += 1
            return x
        return bump

    assert _refused(make_counter()) == "writes_state"
    bound = thing.__init__
    assert _refused(lambda x: bound(x)) == "value"
    # A class the code reaches is walked (methods, plain attributes): _Thing is fine, its instance not.
    assert _digest(lambda x: x * _Thing.scale)[1] == {}


def test_a_stored_trace_that_does_not_decode_is_corrupt():
    from graphcache.errors import CorruptEntryError
    from graphcache.traces import stored

    for payload in (b"", b"GCTRACE1", b"GCTRACE1\x00\x00\x00\x05{bad}", b"not a trace at all"):
        with pytest.raises(CorruptEntryError):
            stored.decode(payload)


def test_the_walk_refuses_process_state_read_through_library_modules():
    import os as os_module
    import time as time_module

    import numpy as np

    assert _refused(lambda x: x * len(os_module.environ)) == "value"
    assert _refused(lambda x: x + time_module.time()) == "value"
    assert _refused(lambda x: x + np.random.rand()) == "value"
    assert _digest(lambda x: x + np.float32(np.pi) + np.sqrt(2.0))[1] == {}  # numpy itself is fine
    same_max = max
    assert _digest(lambda x: same_max(x, 1))[1] == {}
    stored_print = print
    assert _refused(lambda x: stored_print(x)) == "builtin"


class _Text(str):
    def __add__(self, other):  # a subclass can change what the code computes: not a plain value
        return "changed"


BIG_LIST = list(range(20_000))


def test_plain_means_exactly_the_builtin_types_and_bounded_sizes():
    import collections

    text = _Text("a")
    assert _refused(lambda x: text + x) == "value"
    assert _refused(lambda x: x + len(BIG_LIST)) == "value"
    point = collections.namedtuple("Point", "a b")(1, 2.5)
    assert _digest(lambda x: x * point.a)[1] == {}
    long_text = "x" * 10_000
    assert _digest(lambda x: long_text)[0] != _digest(lambda x: long_text[:-1] + "y")[0]


SET_ORDER_CHILD = '''
import json
import tensorflow as tf
if {use_cache}:
    import graphcache
    cache = graphcache.GraphCache({cache_dir!r}, traces=True)
WEIGHTS = {{"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}}

@tf.function
def stacked(x):
    return tf.stack([x * WEIGHTS[name] for name in {{"a", "b", "c", "d", "e"}}])  # this process's set order

out = {{"value": stacked(tf.constant(1.0)).numpy().tolist()}}
if {use_cache}:
    cache.wait_for_writes()
    out["traces"] = cache.stats().traces
print(json.dumps(out))
'''


ANY_TRACES = {"trace_hits": 0, "trace_misses": 0, "trace_uncacheable": 0}


def _set_order(seed: int) -> list[str]:
    code = 'print([name for name in {"a", "b", "c", "d", "e"}])'  # iterated as stacked() iterates it
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout


def test_a_set_iterated_in_another_hash_seed_order_misses(cache_dir):
    orders = {}
    for seed in range(50):  # two hash seeds that iterate the literal set in different orders
        orders.setdefault(_set_order(seed), seed)
        if len(orders) == 2:
            break
    first, second = orders.values()

    def run(seed: int, cached: bool) -> dict:
        code = SET_ORDER_CHILD.format(use_cache=cached, cache_dir=str(cache_dir))
        return run_python(code, env={"PYTHONHASHSEED": str(seed), "GRAPHCACHE_TRACE_VERIFY": "0"})

    run(first, True)  # stores the trace in the first seed's order (the counters are the cache dir's)
    assert run(first, True)["traces"] == {**ANY_TRACES, "trace_hits": 1, "trace_misses": 1}  # same order: a hit
    other = run(second, True)
    weights = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}  # what plain TensorFlow stacks, in each order
    plain = {seed: [weights[name] for name in json.loads(_set_order(seed).replace("'", '"'))] for seed in orders.values()}
    assert other["value"] == plain[second] != plain[first]
    assert other["traces"] == {**ANY_TRACES, "trace_hits": 1, "trace_misses": 2}  # another order: another key


UNCACHEABLE_CHILD = '''
import json, threading
import tensorflow as tf
import graphcache
from graphcache.core.service import EntryService

recorded_by = []  # the thread of every miss record
record = EntryService.record_miss
def record_miss(self, miss):
    recorded_by.append(threading.current_thread().name)
    return record(self, miss)
EntryService.record_miss = record_miss
cache = graphcache.GraphCache({cache_dir!r}, traces=True)
seen = []

@tf.function
def appender(x):
    seen.append(1)  # a side effect of tracing: never cached
    return x * 2.0

value = appender(tf.constant(3.0)).numpy().item()
cache.wait_for_writes()
print(json.dumps({{"value": value, "recorded_by": recorded_by, "traces": cache.stats().traces}}))
'''


def test_an_uncacheable_trace_is_recorded_for_misses_off_the_callers_path(cache_dir):
    """Why a trace was not cached goes to ``graphcache misses`` from the write thread: the first record opens
    the index (12-30 ms), which a SavedModel's or a Keras model's first call would otherwise wait for."""
    out = run_python(UNCACHEABLE_CHILD.format(cache_dir=str(cache_dir)))
    assert out["value"] == 6.0
    assert out["traces"] == {**ANY_TRACES, "trace_uncacheable": 1}
    assert out["recorded_by"] == ["graphcache-write"]
    recorded = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "misses", "--json"))
    assert [m["name"] for m in recorded] == ["tf.function appender"] and "side_effect" in recorded[0]["detail"]


RUN_SCRIPT = '''
import json
import numpy as np
import tensorflow as tf

w = tf.Variable(np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8))
calls = []

@tf.function
def inner(y):
    return tf.matmul(y, w) * 0.5

@tf.function
def deep(x):
    y = x
    for _ in range(20):
        y = tf.concat([y[:, 1:], y[:, :1]], axis=1) * 0.5 + 0.1
    return tf.reduce_sum(inner(y)), {"last": y[0], "first": y[:, 0]}

@tf.function
def outer(x):
    calls.append(1)  # a side effect: traced in every process, so deep is called inside a trace (graph mode)
    return deep(x)[0] * 2.0

x = tf.reshape(tf.range(64, dtype=tf.float32) / 64.0, [8, 8])
total, rest = deep(x)
concrete = deep.get_concrete_function(x)
built_after_calls = getattr(concrete, "graph_built", None)  # None: a traced ConcreteFunction (plain, a miss)
with tf.GradientTape() as tape:
    loss = deep(x)[0]
gradient = tape.gradient(loss, w)
print(json.dumps({"total": float(total), "last": rest["last"].numpy().tolist(), "first": rest["first"].numpy().tolist(),
                  "gradient": gradient.numpy().tolist(), "outer": float(outer(x)), "lazy": type(concrete).__name__,
                  "built_after_calls": built_after_calls, "built_after_tape": getattr(concrete, "graph_built", None)}))
'''


def _script_run(argv: list[str], env: dict[str, str] | None = None) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), **(env or {})})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1]), proc.stderr


def test_graphcache_run_caches_traces_when_asked_and_a_hit_builds_its_graph_only_for_a_tape(tmp_path, cache_dir):
    script = tmp_path / "script.py"
    script.write_text(RUN_SCRIPT)
    run = ["-m", "graphcache", "run", "--cache-dir", str(cache_dir), str(script)]
    plain, _ = _script_run([str(script)])
    assert plain["lazy"] == "ConcreteFunction"
    values = ("total", "last", "first", "gradient", "outer")

    _script_run(run, {"GRAPHCACHE_TRACE_VERIFY": "0", "GRAPHCACHE_TRACES": "1"})  # cold: traced and stored
    stored = GraphCache(cache_dir).stats()
    assert stored.traces["trace_misses"] >= 1 and stored.traces["trace_hits"] == 0
    assert stored.trace_reasons.get("side_effect") == 1  # outer

    warm, stderr = _script_run(run, {"GRAPHCACHE_TRACE_VERIFY": "1", "GRAPHCACHE_TRACES": "1"})  # hits compared
    stats = GraphCache(cache_dir).stats()
    assert {name: warm[name] for name in values} == {name: plain[name] for name in values}
    assert stats.traces["trace_hits"] >= 1 and "differs" not in stderr, stderr[-2000:]
    assert stats.functions["function_hits"] > stored.functions["function_hits"]  # its instantiation: from the cache
    # An eager call runs the stored library by name; the tape (and outer's trace, after it) needed the graph.
    assert warm["lazy"] == "LazyConcreteFunction"
    assert warm["built_after_calls"] is False and warm["built_after_tape"] is True

    off_dir = tmp_path / "off"  # the default: traces off (docs/tf2-traces.md says why), functions on
    off, _ = _script_run(["-m", "graphcache", "run", "--cache-dir", str(off_dir), str(script)])
    assert {name: off[name] for name in values} == {name: plain[name] for name in values}
    kinds = {row.kind for row in GraphCache(off_dir).entries()}
    assert KIND not in kinds and "tf_function" in kinds


def test_a_restored_trace_runs_by_name_builds_its_graph_on_demand_and_falls_back_to_a_trace(monkeypatch):
    """stored.restore in this process, from a trace of this process: no cache, no hook."""
    import tensorflow as tf
    from tensorflow.core.function import trace_type

    from graphcache.traces import stored

    w = tf.Variable([1.0, 2.0])

    @tf.function
    def f(x):
        return {"y": x * w + 1.0, "none": None}

    x = tf.constant([3.0, 4.0])
    traced = f.get_concrete_function(x)
    described = stored.describe(traced, {"g:w": w})
    trace = stored.StoredTrace(described.name, stored.library_of(described.name), described.captures,
                               described.inputs, described.outputs, described.arg_keywords, described.positional)
    fallbacks = []

    def restore(fallback):
        return stored.restore(trace, [w], traced.function_type, trace_type.InternalTracingContext(), fallback)

    restored = restore(lambda exc: fallbacks.append(exc) or traced)
    assert restored.name != traced.name and restored.function_type == traced.function_type
    assert restored.structured_input_signature == traced.structured_input_signature
    assert restored._call_flat([x], restored.captured_inputs)["y"].numpy().tolist() == [4.0, 9.0]
    assert not restored.graph_built and restored.variables == (w,)
    with tf.GradientTape() as tape:
        y = restored._call_flat([x], restored.captured_inputs)["y"]
    assert tape.gradient(y, w).numpy().tolist() == [3.0, 4.0] and restored.graph_built
    assert tf.function(lambda v: restored._call_flat([v], restored.captured_inputs)["y"])(x).numpy().tolist() == [4.0, 9.0]

    def broken(*args):
        raise ValueError("no graph today")

    monkeypatch.setattr(stored, "restore_graph", broken)
    failing = restore(lambda exc: fallbacks.append(exc) or traced)
    with tf.GradientTape() as tape:
        y = failing._call_flat([x], failing.captured_inputs)["y"]
    assert tape.gradient(y, w).numpy().tolist() == [3.0, 4.0]  # from the fresh trace the fallback gave
    assert [str(exc) for exc in fallbacks] == ["no graph today"]


NESTED_OUTPUTS_CHILD = '''
import json, logging, warnings
import tensorflow as tf
from tests.helpers import trace_child_preamble
exec(trace_child_preamble({cache_dir}))
matmul = tf.function(tf.linalg.matmul)

@tf.function
def square(a):
    return matmul(a, a), {{"b": tf.constant(1.0)}}

@tf.function
def outer(x):
    return square(x)[0] + 1.0

t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
out = {{}}
for name, fn, arg in (("square", square, t), ("outer", outer, t),
                      ("unknown", outer, tf.TensorSpec((None, None), tf.float32))):
    concrete = fn.get_concrete_function(arg)
    out[name] = [str(concrete.output_shapes), str(concrete.output_dtypes), str(concrete.structured_outputs)]
out["values"] = [square(t)[0].numpy().tolist(), outer(t).numpy().tolist()]
if {cache_dir} is not None:
    cache.wait_for_writes()
    out["hits"] = cache.stats().traces["trace_hits"]
print(json.dumps(out))
'''


def test_a_restored_trace_has_the_traced_output_shapes_also_through_nested_functions(cache_dir):
    """A stored trace's graph is rebuilt by the SavedModel loader, which does not know the output shapes of the
    functions a function calls; the restored function's output shapes are the traced one's all the same."""
    plain, cold, warm = (run_python(NESTED_OUTPUTS_CHILD.format(cache_dir=repr(directory)))
                         for directory in (None, str(cache_dir), str(cache_dir)))
    assert warm["hits"] >= 3
    for run in (cold, warm):
        assert {name: run[name] for name in plain} == plain


WARNING_CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf
import keras
from tests.helpers import trace_child_preamble
exec(trace_child_preamble({cache_dir}))

class CarefulWarning(UserWarning):
    pass

@tf.function
def scaled(x):
    warnings.warn("scaled() traced with a float input", CarefulWarning)
    return x * 2.0

inputs = {{"a": keras.Input((2,), name="a"), "b": keras.Input((2,), name="b")}}
model = keras.Model(inputs, keras.layers.Add()([inputs["a"], inputs["b"]]))
out = {{"scaled": scaled(tf.ones([2])).numpy().tolist(),
        # the inputs as a list where the model was built with a dict: Keras warns while tracing predict
        "predict": model.predict([np.ones((1, 2), "float32"), np.ones((1, 2), "float32")], verbose=0).tolist()}}
out["warnings"] = sorted({{(w.category.__name__, str(w.message)[:60]) for w in seen_warnings
                          if issubclass(w.category, UserWarning)}})
if {cache_dir} is not None:
    cache.wait_for_writes()
    out["hits"] = cache.stats().traces["trace_hits"]
print(json.dumps(out))
'''


def test_warnings_given_while_tracing_are_given_again_on_a_hit(cache_dir):
    plain, cold, warm = (run_python(WARNING_CHILD.format(cache_dir=repr(directory)))
                         for directory in (None, str(cache_dir), str(cache_dir)))
    assert any(name == "CarefulWarning" for name, _ in plain["warnings"]), plain["warnings"]
    assert len(plain["warnings"]) >= 2, plain["warnings"]  # the user's and Keras' structure warning
    assert warm["hits"] >= 1  # Keras' predict step; scaled() reads the warnings module: traced every time
    for run in (cold, warm):
        assert (run["scaled"], run["predict"], run["warnings"]) == (plain["scaled"], plain["predict"], plain["warnings"])


def test_a_trace_holding_an_objects_memory_address_is_refused():
    """``repr``/``str``/an f-string of an object without its own ``__repr__`` gives its address in this process:
    traced into a string constant (or an op's string attribute), a hit would return the first process's."""
    import tensorflow as tf

    from graphcache.traces import stored
    from graphcache.traces.walk import Uncacheable

    def helper():
        pass

    @tf.function
    def bucket(x):
        return x + tf.strings.to_hash_bucket_fast(tf.constant(repr(helper)), 1000)

    @tf.function
    def printed(x):
        tf.print(f"{helper}", x)
        return x

    @tf.function
    def hexadecimal(x):  # text that only looks like one: "0x..." without an object's repr around it
        return x + tf.strings.length(tf.constant("mask 0xdeadbeefcafe"), unit="BYTE", name="at_0x")

    for function in (bucket, printed):
        concrete = function.get_concrete_function(tf.TensorSpec([], tf.int64))
        with pytest.raises(Uncacheable) as caught:
            stored.check_graph(stored.library_of(concrete.function_def.signature.name))
        assert caught.value.reason == "graph" and "memory address" in caught.value.detail
    concrete = hexadecimal.get_concrete_function(tf.TensorSpec([], tf.int32))
    stored.check_graph(stored.library_of(concrete.function_def.signature.name))
