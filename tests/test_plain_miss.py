"""session/plain_miss.py: a Session's miss runs the plain TensorFlow way and stores what TensorFlow compiled.

The miss is plain TensorFlow's run on the Session's own TensorFlow session; the graph TensorFlow compiled for
it (compile/collected.py) becomes the entry, which a later process imports into its run graph. Compared with
plain TensorFlow in separate processes, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from graphcache.session.plain_miss import RanPlain
from graphcache.session.run_graph import Imported

from .helpers import run_python

CHILD = '''
import json
import numpy as np, tensorflow as tf
from tensorflow.core.framework import graph_pb2
variant, model, cache_dir, feed, fetch, relu = {args!r}
graph = tf.Graph()
with graph.as_default():
    tf.graph_util.import_graph_def(graph_pb2.GraphDef.FromString(open(model, "rb").read()), name="")
x = {{feed: np.random.RandomState(7).rand(*graph.get_tensor_by_name(feed).shape).astype(np.float32)}}
if variant == "plain":
    sess = tf.compat.v1.Session(graph=graph)
else:
    import graphcache
    sess = graphcache.Session(graph=graph, cache=graphcache.GraphCache(cache_dir))
outputs = [[a.tolist() for a in sess.run(fetches, x)] for fetches in ([fetch], [fetch, relu]) for _ in range(2)]
out = {{"outputs": outputs}}
if variant != "plain":
    sess.cache.flush()
    out["signatures"] = [[type(s).__name__, s.hit, sess.cache.has_entry(s.key)]
                         for s in sess.compiled_signatures.values()]
sess.close()
print(json.dumps(out))
'''


def test_a_miss_runs_plain_tensorflow_and_the_next_process_hits_what_it_compiled(cnn, tmp_path, cache_dir):
    model = tmp_path / "cnn.pb"
    model.write_bytes(cnn.graph_def.SerializeToString())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(cnn.graph_def, name="")
    relu = [op.name for op in graph.get_operations() if op.type == "Relu"][-1] + ":0"

    def child(variant: str) -> dict:
        args = [variant, str(model), str(cache_dir), cnn.feeds[0], cnn.fetches[0], relu]
        return run_python(CHILD.format(args=args))

    plain, miss, hit = child("plain"), child("cached"), child("cached")
    assert miss["signatures"] == [["RanPlain", False, True]] * 2  # ran on TensorFlow's own session, stored
    assert hit["signatures"] == [["Imported", True, True]] * 2  # imported into the run graph
    assert miss["outputs"] == plain["outputs"]  # plain TensorFlow's run, bit for bit
    assert hit["outputs"] == plain["outputs"]  # what TensorFlow compiled, replayed bit for bit


def _split_graph() -> tf.Graph:
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        first, second = tf.split(x, 2, name="split")
        tf.reduce_sum(second * tf.constant([2.0, 3.0]) + first, name="total")
    return graph


def test_a_miss_whose_compiled_graph_cannot_be_kept_runs_plain_and_is_counted(cache, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_MIN_NODES", "0")
    graph = _split_graph()
    feeds = {"x:0": np.arange(4, dtype=np.float32), "split:1": np.array([5.0, 7.0], np.float32)}
    with tf.compat.v1.Session(graph=graph) as plain:
        expected = plain.run("total:0", feeds)
    with graphcache.Session(graph=graph, cache=cache) as sess:
        got = [sess.run("total:0", feeds) for _ in range(2)]  # split:1 fed: a Placeholder cannot carry that name
        (signature,) = sess.compiled_signatures.values()
    assert got == [expected, expected] and isinstance(signature, RanPlain) and not signature.stored
    assert cache.stats().uncacheable.get("not_importable") == 1 and cache.stats().entries == 0


def test_a_feed_the_run_does_not_need_is_fed_on_the_hit_too(cache, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_MIN_NODES", "0")
    graph = _split_graph()
    with graph.as_default():
        tf.compat.v1.placeholder(tf.bool, [], name="training")  # fed by the caller, needed by nothing
    feeds = {"x:0": np.arange(4, dtype=np.float32), "training:0": False}
    kinds = []
    for _ in range(2):  # the miss runs plain and stores; the hit imports the entry and is fed the same way
        with graphcache.Session(graph=graph, cache=cache) as sess:
            assert sess.run("total:0", feeds) == 14.0
            kinds += [(type(s).__name__, s.hit) for s in sess.compiled_signatures.values()]
    assert kinds == [("RanPlain", False), ("Imported", True)]


@pytest.mark.parametrize("case", ["variables", "run options", "no partition graphs"])
def test_state_and_run_options_keep_the_run_graph(cache, monkeypatch, case):
    """A graph with variables (a plain run would not share them with the run graph's signatures), a run
    with the caller's RunOptions, and a session whose config forbids partition graphs compile offline and run
    on the run graph, as before."""
    monkeypatch.setenv("GRAPHCACHE_MIN_NODES", "0")
    graph = _split_graph()
    config = tf.compat.v1.ConfigProto()
    config.experimental.disable_output_partition_graphs = case == "no partition graphs"
    if case == "variables":
        with graph.as_default():
            counter = tf.compat.v1.Variable(1.0, use_resource=False, name="counter")
            tf.add(counter, graph.get_tensor_by_name("total:0"), name="total_plus")
    options = tf.compat.v1.RunOptions() if case == "run options" else None
    fetch = "total_plus:0" if case == "variables" else "total:0"
    with graphcache.Session(graph=graph, cache=cache, config=config) as sess:
        if case == "variables":
            sess.run(counter.initializer)
        value = sess.run(fetch, {"x:0": np.arange(4, dtype=np.float32)}, options=options)
        kinds = {type(s) for s in sess.compiled_signatures.values()}
    assert value == (1.0 if case == "variables" else 0.0) + 0.0 + 1.0 + 2.0 * 2 + 3.0 * 3
    assert kinds == {Imported}
    assert not any(cache.stats().uncacheable.values())


HANDOVER_CHILD = '''
import gc, json, sys, tempfile, threading
import numpy as np, tensorflow as tf
import graphcache
from graphcache.compile import graphs

def resident_mb():
    with open("/proc/self/status", encoding="utf-8") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS:"))

def weighty_graph_def(megabytes):
    """A GraphDef holding one constant of ``megabytes`` (a frozen model's weights, in one piece)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        weights = tf.constant(np.full(megabytes << 18, 0.5, np.float32), name="weights")
        tf.add(x, tf.reduce_sum(weights), name="y")
    return graph.as_graph_def()

compiled_graph = tf.Graph()  # what "running" compiled: any importable graph of the signature
with compiled_graph.as_default():
    tf.identity(tf.compat.v1.placeholder(tf.float32, [], name="x"), name="y")
compiled_bytes = compiled_graph.as_graph_def().SerializeToString()
drops = {{}}
for handed, store in {cases!r}:
    cache = graphcache.GraphCache(tempfile.mkdtemp())
    if store == "filled":
        cache.compile_by_running(compiled_graph, ["y:0"], ["x:0"], run=lambda: compiled_bytes)
        cache.wait_for_writes()
    assert cache.holds_nothing() == (store == "empty")
    during = []

    def run():
        for thread in threading.enumerate():  # a first-ever miss's key thread: the run waits for it here
            if thread.name == "graphcache-key":
                thread.join()
        during.append(resident_mb())
        return compiled_bytes

    graph = graphs.Handover(weighty_graph_def(192)) if handed else weighty_graph_def(192)
    gc.collect()  # the tf.Graph that built it: not counted
    before = resident_mb()  # the graph's 192 MB held
    compiled = cache.compile_by_running(graph, ["y:0"], ["x:0"], run=run, name="weighty")
    assert not compiled.hit and cache.has_entry(compiled.key)
    cache.flush()
    del graph, compiled
    drops[f"{{handed}}-{{store}}"] = before - during[0]
print(json.dumps(drops))
'''


def test_a_miss_compiled_by_running_lets_go_of_a_handed_over_graph_before_the_run():
    """With entries in the store the key is computed before the run; on an empty store (a first-ever run) a
    thread computes it during the run, and lets go of the graph once done (the run here waits for it). In a
    fresh process: what a long-lived process's heap did before would blur the figure."""
    cases = [(True, "filled"), (True, "empty"), (False, "filled")]
    drops = run_python(HANDOVER_CHILD.format(cases=cases))
    # the key known before the run, or once its thread was done: the weights were let go
    assert drops["True-filled"] > 150 and drops["True-empty"] > 150, drops
    # the caller holds the graph: so does the run (which shows that the checks above can fail)
    assert drops["False-filled"] < 40, drops


def test_a_handed_over_graph_is_taken_once():
    from tensorflow.core.framework import graph_pb2

    from graphcache.compile import graphs

    handover = graphs.Handover(graph_pb2.GraphDef())
    graphs.load(handover)
    with pytest.raises(graphcache.InvalidGraphError, match="once"):
        graphs.load(handover)
