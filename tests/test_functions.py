"""TF2 functions' first calls served from the cache (graphcache/functions/).

The end-to-end tests run real TensorFlow in fresh processes (tests.helpers.run_python): a cold process
compiles and stores, a warm one must hit and return what plain TensorFlow returns (checked against a
NumPy reference or a plain-TensorFlow process). The payload checks run in this process on real
OptimizedFunctionGraph protos.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphcache import GraphCache
from graphcache.entry import codec
from graphcache.functions import ALIAS_KIND, KIND, optimized, usercollect
from graphcache.store import LocalStore

from .helpers import ROOT, run_python

# A deep tf.function of slices, concats and arithmetic (8 nodes per block) with a NumPy reference.
DEEP = '''
import json, os, time, warnings
import numpy as np

def numpy_deep(x, blocks, c):
    y = x.astype(np.float64)
    for _ in range(blocks):
        y = np.roll(y, -1, axis=1) * c + 0.1
    return float(y.sum())

def run_deep(tf, blocks, c):
    @tf.function
    def deep(x):
        y = x
        for _ in range(blocks):
            y = tf.concat([y[:, 1:], y[:, :1]], axis=1) * c + 0.1
        return tf.reduce_sum(y)
    x = np.arange(64, dtype=np.float32).reshape(8, 8) / 64.0
    concrete = deep.get_concrete_function(tf.constant(x))
    start = time.perf_counter()
    value = float(concrete(tf.constant(x)).numpy())
    return {"value": value, "expected": numpy_deep(x, blocks, c), "nodes": len(concrete.function_def.node_def),
            "first": time.perf_counter() - start, "again": float(concrete(tf.constant(x)).numpy())}
'''

DEEP_CHILD = '''
import logging
messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("graphcache").addHandler(handler)
logging.getLogger("graphcache").setLevel(logging.INFO)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import tensorflow as tf
    import graphcache
    cache = graphcache.GraphCache({cache_dir!r}{functions_arg})
    result = run_deep(tf, {blocks}, {c})
    cache.wait_for_writes()
    cache.flush()
    stats = cache.stats()
print(json.dumps({{**result, "functions": stats.functions, "uncacheable": stats.uncacheable,
                  "remote_hits": stats.remote_hits, "uploads": stats.uploads,
                  "kinds": sorted(r.kind for r in cache.entries()), "log": messages,
                  "warnings": [str(w.message) for w in caught if "graphcache" in str(w.message)]}}))
'''


def deep_child(cache_dir: Path, c: float, blocks: int = 60, *, env_switch: bool = False, read_only: bool = False,
               remote: str = "") -> dict:
    arg = ("" if env_switch else ", functions=True") + (", read_only=True" if read_only else "") \
        + (f", remote={remote!r}" if remote else "")
    code = DEEP + DEEP_CHILD.format(cache_dir=str(cache_dir), blocks=blocks, c=c, functions_arg=arg)
    return run_python(code, env={"GRAPHCACHE_FUNCTIONS": "1"} if env_switch else None)


def entry_files(cache_dir: Path, kind: str) -> list[Path]:
    cache = GraphCache(cache_dir)
    return [LocalStore(cache_dir).path_for(row.key) for row in cache.entries() if row.kind == kind]


def test_tf_function_hits_in_a_second_process_and_a_changed_constant_misses(cache_dir, tmp_path):
    cold = deep_child(cache_dir, 0.5, env_switch=True)  # GRAPHCACHE_FUNCTIONS=1 turns it on
    assert cold["value"] == pytest.approx(cold["expected"], rel=1e-5)
    assert cold["functions"] == {"function_hits": 0, "function_compiles": 1, "function_uncacheable": 0}
    assert cold["kinds"] == [KIND, ALIAS_KIND]
    assert not cold["warnings"]

    warm = deep_child(cache_dir, 0.5)
    assert warm["functions"] == {"function_hits": 1, "function_compiles": 1, "function_uncacheable": 0}  # counters are the cache's totals
    assert warm["value"] == cold["value"] and warm["again"] == cold["value"]
    assert not warm["warnings"]

    # One constant changed, same function name, same node count: TensorFlow's own file cache serves the
    # old graph here (its file name is job, task, name and node count); graphcache's key is the content.
    changed = deep_child(cache_dir, 0.7)
    assert changed["nodes"] == cold["nodes"]
    assert changed["functions"] == {"function_hits": 1, "function_compiles": 2, "function_uncacheable": 0}
    assert changed["value"] == pytest.approx(changed["expected"], rel=1e-5)
    assert changed["value"] != pytest.approx(cold["value"], rel=1e-3)

    rows = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "ls", "--json"))
    functions = [row for row in rows if row["kind"] == KIND]
    assert len(functions) == 2 and all(row["name"].startswith("__inference_deep_") for row in functions)
    assert all(row["compile_seconds"] > 0 for row in functions)
    assert len([row for row in rows if row["kind"] == ALIAS_KIND]) == 2
    verified = json.loads(graphcache_cli("--cache-dir", str(cache_dir), "verify", "--json"))
    assert verified["checked"] == 4 and verified["bad"] == []

    # A bundle carries them to another cache dir, where a fresh process hits without compiling.
    bundle, other = tmp_path / "functions.tar.zst", tmp_path / "other"
    graphcache_cli("--cache-dir", str(cache_dir), "export", str(bundle))
    graphcache_cli("--cache-dir", str(other), "import", str(bundle))
    imported = deep_child(other, 0.7)
    assert imported["functions"] == {"function_hits": 1, "function_compiles": 0, "function_uncacheable": 0}
    assert imported["value"] == changed["value"]
    graphcache_cli("--cache-dir", str(other), "purge", "--filter", f"kind={KIND}", "--yes")
    assert {row["kind"] for row in json.loads(graphcache_cli("--cache-dir", str(other), "ls", "--json"))} == \
        {ALIAS_KIND}


def test_a_fast_key_miss_looks_the_canonical_key_up_only_where_an_entry_could_be(cache_dir):
    """The canonical key (a pass over every node) is computed on the caller's path only when the cache may
    hold a function entry; on a cache with none (a first-ever run) it is left to the background write."""
    cold = deep_child(cache_dir, 0.5)
    assert cold["functions"] == {"function_hits": 0, "function_compiles": 1, "function_uncacheable": 0}
    graphcache_cli("--cache-dir", str(cache_dir), "purge", "--filter", f"kind={ALIAS_KIND}", "--yes")
    by_canonical = deep_child(cache_dir, 0.5)  # no alias for its fast key: found by the canonical key
    assert by_canonical["functions"] == {"function_hits": 1, "function_compiles": 1, "function_uncacheable": 0}
    assert by_canonical["kinds"] == [KIND, ALIAS_KIND] and by_canonical["value"] == cold["value"]
    graphcache_cli("--cache-dir", str(cache_dir), "purge", "--filter", f"kind={KIND}", "--yes")
    again = deep_child(cache_dir, 0.5)  # an alias whose target is gone, no function entry: compiled again
    assert again["functions"] == {"function_hits": 1, "function_compiles": 2, "function_uncacheable": 0}
    assert again["value"] == cold["value"] and sorted(again["kinds"]) == sorted([KIND, ALIAS_KIND])


TWO_FUNCTIONS = '''
import json, sys, threading
import tensorflow as tf
import graphcache
from graphcache.functions import keying

on_caller = []  # canonical keys computed on the caller's thread (a lookup), not by the background write
computed = keying.FunctionCall.canonical
def canonical(self):
    if threading.current_thread() is threading.main_thread() and self._canonical is None:
        on_caller.append(self.name)
    return computed(self)
keying.FunctionCall.canonical = canonical
computed_by = []  # the thread of every canonical pass: a miss's runs once, in the thread its call starts
compute = keying.FunctionCall._compute_canonical
def compute_canonical(self):
    computed_by.append(threading.current_thread().name)
    return compute(self)
keying.FunctionCall._compute_canonical = compute_canonical

cache = graphcache.GraphCache({cache_dir!r}, functions=True)
first = run_deep(tf, 40, 0.5)
cache.wait_for_writes()  # the first function's entry is stored before the second function's first call
second = run_deep(tf, 50, 0.25)
cache.wait_for_writes()
print(json.dumps({{"on_caller": on_caller, "computed_by": computed_by, "functions": cache.stats().functions,
                  "values": [first["value"], second["value"]], "expected": [first["expected"], second["expected"]]}}))
'''


def two_functions(cache_dir: Path) -> dict:
    return run_python(DEEP + TWO_FUNCTIONS.format(cache_dir=str(cache_dir)))


def test_a_first_ever_run_never_computes_a_canonical_key_on_the_callers_path(cache_dir):
    """On an empty cache dir nothing can hit but what this process stored itself (under aliases it wrote
    too), so no function first call pays for the canonical key: the first finds an empty store, the second
    finds only its predecessor's entry; their keys are computed in a thread while TensorFlow optimizes. A
    second process finds the entries by their fast keys."""
    cold = two_functions(cache_dir)
    assert cold["on_caller"] == [] and cold["functions"] == {"function_hits": 0, "function_compiles": 2, "function_uncacheable": 0}
    # each miss's key: one pass, in the thread started before its call (overlapping TensorFlow's optimization),
    # which the entry's write waited for instead of a second pass
    assert cold["computed_by"] == ["graphcache-key", "graphcache-key"]
    assert cold["values"] == pytest.approx(cold["expected"], rel=1e-5)
    warm = two_functions(cache_dir)
    assert warm["on_caller"] == [] and warm["functions"] == {"function_hits": 2, "function_compiles": 2, "function_uncacheable": 0}
    assert warm["values"] == cold["values"]
    GraphCache(cache_dir).purge(  # without aliases, another process's entries are found by the canonical key
        [row.key for row in GraphCache(cache_dir).entries() if row.kind == ALIAS_KIND])
    by_canonical = two_functions(cache_dir)
    assert len(by_canonical["on_caller"]) == 2 and by_canonical["values"] == cold["values"]
    assert by_canonical["functions"] == {"function_hits": 4, "function_compiles": 2, "function_uncacheable": 0}


def test_may_hold_tells_apart_the_callers_own_entries(cache_dir):
    """EntryService.may_hold: an empty store says no without the index; a row the caller did not store says
    maybe; the caller's own rows say no; too many of its own to compare cheaply say maybe."""
    import time

    from graphcache.core.service import MAY_HOLD_BESIDES
    from graphcache.entry import kinds

    cache = GraphCache(cache_dir)
    assert not cache.may_hold(KIND)
    key = "ab" * 16
    header = codec.EntryHeader(key=key, version=cache.version, identity={}, name="f", kind=KIND, created=time.time())
    assert cache.write_entry(header, b"payload")
    assert cache.may_hold(KIND) and not cache.may_hold(KIND, besides={key}) and not cache.may_hold(kinds.GRAPH)
    many = {key, *(f"{n:032x}" for n in range(MAY_HOLD_BESIDES))}
    assert cache.may_hold(KIND, besides=many)


def graphcache_cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "graphcache", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_machine_with_an_empty_cache_dir_hits_through_the_remote(tmp_path):
    shared, first, second = tmp_path / "remote", tmp_path / "a", tmp_path / "b"
    for path in (shared, first, second):
        path.mkdir()
    cold = deep_child(first, 0.5, remote=str(shared))
    assert cold["uploads"] == 2  # the entry and its alias
    warm = deep_child(second, 0.5, remote=str(shared))
    assert warm["functions"] == {"function_hits": 1, "function_compiles": 0, "function_uncacheable": 0} and warm["remote_hits"] == 2
    assert warm["value"] == cold["value"]


SHAPES_CHILD = '''
import json, os, threading, warnings
os.environ["TF_GRAPH_CACHING"] = {tf_dir!r}  # TensorFlow's own cache, asked for by the user: taken over
import numpy as np
import tensorflow as tf
import graphcache
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache = graphcache.GraphCache({cache_dir!r}, functions=True)

def shape_twice():
    # The same body traced for two argument shapes: TensorFlow folds Shape(x) into a constant, so the two
    # optimized graphs differ while keys.py's canonical form (without _output_shapes) is the same.
    @tf.function
    def f(x):
        return tf.raw_ops.Shape(input=x) * 2
    return f

results = {{}}
results["three"] = shape_twice()(tf.ones([3])).numpy().tolist()
results["five"] = shape_twice()(tf.ones([5])).numpy().tolist()
jit = tf.function(lambda x: tf.reduce_sum(tf.sin(x) * 3.0), jit_compile=True)
results["jit"] = float(jit(tf.ones([4])).numpy())

# First calls from several threads at once: the ones that find another first call running are run the
# normal way (uncached); every result is right.
def worker(i):
    @tf.function
    def g(x):
        y = x
        for _ in range(30):
            y = tf.tanh(y * (0.5 + i)) + 0.25
        return tf.reduce_sum(y)
    results[f"thread{{i}}"] = float(g(tf.ones([4, 4])).numpy())
threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
expected = {{}}
for i in range(4):
    y = np.ones([4, 4], np.float32)
    for _ in range(30):
        y = np.tanh(y * (0.5 + i)) + 0.25
    expected[f"thread{{i}}"] = float(y.sum())
cache.wait_for_writes()
print(json.dumps({{"results": results, "expected": expected, "functions": cache.stats().functions,
                  "function_reasons": cache.stats().function_reasons,
                  "entries": sorted((r.kind, r.name) for r in cache.entries()),
                  "tf_graph_caching": os.environ["TF_GRAPH_CACHING"], "tf_files": os.listdir({tf_dir!r}),
                  "warnings": [str(w.message) for w in caught]}}))
'''


def test_argument_shapes_are_part_of_the_key_jit_functions_are_left_to_xla_and_threads_are_served(cache_dir,
                                                                                                   tmp_path):
    tf_dir = tmp_path / "tf-own"
    tf_dir.mkdir()
    out = run_python(SHAPES_CHILD.format(cache_dir=str(cache_dir), tf_dir=str(tf_dir)))
    assert out["tf_graph_caching"] == "" and out["tf_files"] == []
    assert any("TF_GRAPH_CACHING" in w and "ignored" in w for w in out["warnings"]), out["warnings"]
    assert out["results"]["three"] == [6] and out["results"]["five"] == [10]
    assert out["results"]["jit"] == pytest.approx(4 * 3.0 * np.sin(1.0), rel=1e-5)
    for name, value in out["expected"].items():
        assert out["results"][name] == pytest.approx(value, rel=1e-5)
    names = [name for kind, name in out["entries"] if kind == KIND]
    assert sum(name.startswith("__inference_f_") for name in names) == 2  # one entry per shape
    assert not any("lambda" in name for name in names)  # the jit_compile function is not stored
    assert out["functions"]["function_hits"] == 0
    assert out["function_reasons"]["jit_compile"] == 1  # counted as not cached, with its reason


def test_corrupt_and_untrusted_entries_are_refused_and_the_function_compiles(cache_dir):
    cold = deep_child(cache_dir, 0.5)
    (path,) = entry_files(cache_dir, KIND)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # a bit flip in the payload: the checksum catches it
    path.write_bytes(bytes(data))
    flipped = deep_child(cache_dir, 0.5)
    assert flipped["value"] == cold["value"]
    assert any("corrupt" in w for w in flipped["warnings"]), flipped["warnings"]
    assert flipped["functions"]["function_hits"] == 0 and flipped["uncacheable"]["corrupt_entry"] == 1

    # A well-formed entry whose graph adds a stateful op (a planted file): checksums pass, the op check
    # refuses it; the next process compiles and stores a good entry again.
    (path,) = entry_files(cache_dir, KIND)
    header, payload = codec.decode(path.read_bytes())
    proto = optimized.OptimizedFunctionGraph.FromString(bytes(payload))
    planted = proto.function_graph.node.add(name="planted", op="WriteFile")
    planted.input.extend(["planted_name", "planted_name"])
    proto.function_graph.node.add(name="planted_name", op="Const")
    path.write_bytes(codec.encode(header, proto.SerializeToString()))
    refused = deep_child(cache_dir, 0.5)
    assert refused["value"] == cold["value"]
    assert any("rejected" in w and "WriteFile" in w for w in refused["warnings"]), refused["warnings"]
    assert refused["uncacheable"]["untrusted_entry"] == 1
    # The refusing process stored a good entry again; a read-only cache serves it and writes nothing.
    entries = sorted(p.name for p in cache_dir.rglob("*.gce"))
    read_only = deep_child(cache_dir, 0.5, read_only=True)
    assert read_only["value"] == cold["value"] and any("function hit" in m for m in read_only["log"])
    assert sorted(p.name for p in cache_dir.rglob("*.gce")) == entries


KERAS_CHILD = '''
import json, os
import numpy as np
import tensorflow as tf
if {functions}:
    import graphcache
    cache = graphcache.install(cache_dir={cache_dir!r}, traces=True)  # TF2 functions included
import keras
keras.utils.set_random_seed(3)
inputs = keras.Input((12,))
h = keras.layers.Dense(16, activation="relu")(inputs)
h = keras.layers.BatchNormalization()(h)
model = keras.Model(inputs, keras.layers.Dense(3)(h))
model.compile(optimizer="adam", loss="mse")
rng = np.random.RandomState(0)
x, y = rng.rand(32, 12).astype("float32"), rng.rand(32, 3).astype("float32")
out = {{"predict": model.predict(x, verbose=0).tolist()}}
out["loss"] = model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history["loss"]
out["after_fit"] = model.predict(x, verbose=0).tolist()
exported = {exported!r}
if not os.path.exists(exported):
    model.export(exported, verbose=False)
loaded = tf.saved_model.load(exported)
out["saved_model"] = loaded.serve(x[:4]).numpy().tolist()
if {functions}:
    cache.wait_for_writes()
    out["functions"] = cache.stats().functions
print(json.dumps(out))
'''


def test_keras_predict_fit_and_a_loaded_saved_model_hit_in_a_second_process(cache_dir, tmp_path):
    exported = str(tmp_path / "exported")
    plain = run_python(KERAS_CHILD.format(functions=False, cache_dir=str(cache_dir), exported=exported))
    cold = run_python(KERAS_CHILD.format(functions=True, cache_dir=str(cache_dir), exported=exported))
    warm = run_python(KERAS_CHILD.format(functions=True, cache_dir=str(cache_dir), exported=exported))
    compiled = cold["functions"]["function_compiles"]
    # predict, fit's step, the SavedModel (install(traces=True) caches traces too: Keras' training state is built before
    # fit's first trace, so the optimizer's initializer function plain Keras traces inside it never runs)
    assert compiled >= 3 and cold["functions"]["function_hits"] == 0
    assert warm["functions"] == {"function_hits": compiled, "function_compiles": compiled, "function_uncacheable": 0}  # all hit, none new
    for field in ("predict", "loss", "after_fit", "saved_model"):
        np.testing.assert_allclose(warm[field], plain[field], rtol=1e-6, atol=1e-7, err_msg=field)
        np.testing.assert_allclose(cold[field], plain[field], rtol=1e-6, atol=1e-7, err_msg=field)
    # `graphcache stats`: a TF2-only cache's hits are in the headline, and in the per-kind breakdown
    stats = subprocess.run([sys.executable, "-m", "graphcache", "stats", "--json", "--cache-dir", str(cache_dir)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    data = json.loads(stats.stdout)
    traced = data["by_kind"]["tf_trace"]["hits"]  # install(traces=True): predict's step hit
    assert traced >= 1 and data["totals"]["hits"] == compiled + traced and data["totals"]["hit_rate"] == 0.5
    assert data["by_kind"]["tf_function"]["hits"] == compiled and data["by_kind"]["tf_function"]["entries"] == compiled
    assert data["by_kind"]["tf_function_alias"]["hits"] == 0  # an alias's lookups are its target kind's


USER_COLLECTION_CHILD = '''
import json
import tensorflow as tf
from tensorflow.python.eager import context
import graphcache

cache = graphcache.GraphCache({cache_dir!r}, functions={functions})


@tf.function
def f(x):
    return x * x


@tf.function
def g(x):
    return x + 1.0


@tf.function
def h(x):
    return x - 1.0


context.enable_run_metadata()  # the program's own (TensorFlow's polymorphic_function_test testRunMetadata)
f(tf.constant(1.0))
metadata = context.export_run_metadata()
context.disable_run_metadata()
context.enable_graph_collection()  # tf.summary.trace_on(graph=True)'s switch
first = g(tf.constant(1.0))
graphs = context.export_run_metadata()
context.disable_graph_collection()
later = h(tf.constant(2.0))  # collection off again: its miss collects and stores as ever
cache.wait_for_writes()
stats = cache.stats()
print(json.dumps({{"partition_graphs": len(metadata.partition_graphs), "step_stats": len(metadata.step_stats.dev_stats),
                  "graphs": len(graphs.function_graphs), "functions": stats.functions,
                  "reasons": stats.function_reasons}}))
'''


def test_a_program_collecting_run_metadata_or_graphs_keeps_them_and_its_misses_are_counted(cache_dir):
    plain = run_python(USER_COLLECTION_CHILD.format(cache_dir=str(cache_dir), functions=False))
    out = run_python(USER_COLLECTION_CHILD.format(cache_dir=str(cache_dir), functions=True))
    assert plain["partition_graphs"] >= 1 and plain["graphs"] >= 1
    for collected in ("partition_graphs", "step_stats", "graphs"):  # none taken by a miss's export
        assert out[collected] == plain[collected], collected
    assert out["reasons"] == {"user_collection": 2}
    assert out["functions"] == {"function_hits": 0, "function_compiles": 3, "function_uncacheable": 2}


# -- the payload, in this process ------------------------------------------------------------------------------
def _function_and_graph(also_call=None):
    """``f``'s FunctionDef and what the eager context collected at its first call (serialized RunMetadata);
    ``also_call``: a function first-called in the same window (its graphs are collected too)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.tanh(x * 0.5))

    concrete = f.get_concrete_function(tf.ones([2, 2]))
    ctx = context.context()
    ctx.enable_graph_collection()
    try:
        concrete(tf.ones([2, 2]))
        if also_call is not None:
            also_call()
        metadata = usercollect.export_run_metadata(ctx)
    finally:
        ctx.disable_graph_collection()
    return concrete.function_def, metadata


def test_the_collected_graph_is_picked_by_its_body_among_others_and_an_ambiguous_pick_is_none():
    import tensorflow as tf

    @tf.function
    def g(x):
        return tf.reduce_max(tf.sigmoid(x) + 1.0)

    other = g.get_concrete_function(tf.ones([3]))
    fdef, metadata = _function_and_graph(also_call=lambda: other(tf.ones([3])))
    from tensorflow.core.protobuf import config_pb2

    parsed = config_pb2.RunMetadata.FromString(metadata)
    assert len(parsed.function_graphs) >= 2 and parsed.partition_graphs  # the export holds more than the pick
    mine = optimized.pick_collected(metadata, fdef)
    theirs = optimized.pick_collected(metadata, other.function_def)
    assert mine is not None and theirs is not None and mine != theirs
    assert any(node.op == "Tanh" for node in mine.node) and not any(node.op == "Tanh" for node in theirs.node)
    expected = [graphs.post_optimization_graph for graphs in parsed.function_graphs
                if any(node.op == "Tanh" for node in graphs.pre_optimization_graph.node)]
    assert [mine] == expected  # the same graph a whole parse of the export gives
    assert optimized.pick_collected(metadata + metadata, fdef) is None  # collected twice: ambiguous
    assert optimized.pick_collected(b"", fdef) is None


def test_payload_is_tensorflows_proto_without_its_name_and_checks_refuse_what_does_not_fit():
    fdef, metadata = _function_and_graph()
    graph = optimized.pick_collected(metadata, fdef)
    assert graph is not None
    ops = {node.op for node in fdef.node_def} | {"_Arg", "_Retval"}
    payload = optimized.build(fdef, graph, 0.01, ops)
    optimized.check_payload(payload, fdef, ops)  # fits
    named = optimized.OptimizedFunctionGraph.FromString(optimized.tf_file_bytes(fdef.signature.name, payload))
    assert named.name == fdef.signature.name and named.num_return_nodes == 1
    assert list(named.ret_types) == [arg.type for arg in fdef.signature.output_arg]

    from graphcache.errors import CorruptEntryError, UntrustedEntryError

    with pytest.raises(CorruptEntryError, match="not an OptimizedFunctionGraph"):
        optimized.check_payload(b"\xff\xff\xff", fdef, ops)
    with pytest.raises(CorruptEntryError, match="names a function"):
        optimized.check_payload(optimized.tf_file_bytes("x", payload), fdef, ops)
    wrong = optimized.OptimizedFunctionGraph.FromString(payload)
    wrong.num_return_nodes = 2
    with pytest.raises(CorruptEntryError, match="does not fit"):
        optimized.check_payload(wrong.SerializeToString(), fdef, ops)
    poisoned = optimized.OptimizedFunctionGraph.FromString(payload)
    poisoned.function_graph.node.add(name="p", op="PrintV2")
    with pytest.raises(UntrustedEntryError, match="PrintV2"):
        optimized.check_payload(poisoned.SerializeToString(), fdef, ops)


def test_tensorflows_file_name_is_job_task_name_without_suffix_and_node_count(monkeypatch):
    monkeypatch.delenv("TF_JOB_NAME", raising=False)
    assert optimized.tf_file_name("__inference_big_24009", 24003) == "_-1___inference_big_24003"
    monkeypatch.setenv("TF_JOB_NAME", "worker")
    assert optimized.tf_file_name("nounderscore", 5) == "worker_-1_nounderscore_5"


RESNET_FIT = '''
import json, os
if {tf_dir!r}:
    os.environ["TF_GRAPH_CACHING"] = {tf_dir!r}
import numpy as np
import tensorflow as tf
if {cache_dir!r}:
    import graphcache
    cache = graphcache.install(cache_dir={cache_dir!r}, traces=True)  # TF2 functions included
import keras
keras.utils.set_random_seed(1)
model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
x, y = np.random.RandomState(0).rand(2, 64, 64, 3).astype("float32"), np.array([1, 2])
loss = model.fit(x, y, batch_size=2, epochs=1, verbose=0).history["loss"]
if {cache_dir!r}:
    cache.wait_for_writes()
print(json.dumps({{"loss": loss}}))
'''


@pytest.mark.slow
def test_stored_graph_is_byte_identical_to_the_file_tensorflow_writes_itself(cache_dir, tmp_path):
    """A Keras ResNet50 fit step (Grappler takes over TensorFlow's 3 s threshold on it, so TensorFlow's own
    file cache writes it): graphcache's payload, built from the collected graph, is TensorFlow's proto."""
    tf_dir = tmp_path / "tf"
    tf_dir.mkdir()
    theirs_run = run_python(RESNET_FIT.format(tf_dir=str(tf_dir), cache_dir=""), timeout=900)
    ours_run = run_python(RESNET_FIT.format(tf_dir="", cache_dir=str(cache_dir)), timeout=900)
    assert ours_run["loss"] == theirs_run["loss"]
    files = list(tf_dir.iterdir())
    if not files:
        pytest.skip("TensorFlow optimized the step in under 3 s here and wrote no file to compare with")
    theirs = optimized.OptimizedFunctionGraph.FromString(files[0].read_bytes())
    cache = GraphCache(cache_dir)
    stored = [optimized.OptimizedFunctionGraph.FromString(bytes(cache.read_entry(r.key)[1]))
              for r in cache.entries() if r.kind == KIND]
    (ours,) = [p for p in stored if len(p.function_graph.node) == len(theirs.function_graph.node)]
    assert ours.function_graph.SerializeToString(deterministic=True) == \
        theirs.function_graph.SerializeToString(deterministic=True)
    assert dict(ours.node_name_to_control_ret) == dict(theirs.node_name_to_control_ret) != {}
    assert (list(ours.ret_types), ours.num_return_nodes, ours.source) == \
        (list(theirs.ret_types), theirs.num_return_nodes, theirs.source)
    warm = run_python(RESNET_FIT.format(tf_dir="", cache_dir=str(cache_dir)), timeout=900)
    assert warm["loss"] == theirs_run["loss"]
    assert GraphCache(cache_dir).stats().functions["function_hits"] >= 1
