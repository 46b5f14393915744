"""graphcache.Session behaves like tf.compat.v1.Session in everything but speed."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from benchmarks import models

from .helpers import run_python

TRAIN_CHILD = '''
import json, sys, numpy as np, tensorflow as tf
import graphcache
from benchmarks import models
resource, use_cache, cache_dir = sys.argv[1:4] if len(sys.argv) > 3 else ({resource!r}, {use_cache!r}, {cache_dir!r})
t = models.tf1_training_graph(resource_variables=resource == "1")
if use_cache == "1":
    sess = graphcache.Session(graph=t.graph, cache=graphcache.GraphCache(cache_dir))
else:
    sess = tf.compat.v1.Session(graph=t.graph)
with sess:
    sess.run(t.init)
    for step in range(5):
        sess.run(t.train, t.batch(step))
    loss, weight, step = sess.run([t.loss, t.weight, t.global_step], t.batch(99))
hits = [s.hit for s in sess.compiled_signatures.values()] if use_cache == "1" else []
print(json.dumps({{"loss": float(loss), "weight": np.asarray(weight).tolist(), "step": int(step), "hits": hits}}))
'''


@pytest.mark.parametrize("resource", ["1", "0"], ids=["resource_variables", "ref_variables"])
def test_tf1_training_matches_plain_session_cold_and_warm(cache_dir, resource):
    def child(use_cache):
        return run_python(TRAIN_CHILD.format(resource=resource, use_cache=use_cache, cache_dir=str(cache_dir)))

    plain, cold, warm = child("0"), child("1"), child("1")
    assert cold["hits"] and not any(cold["hits"])
    assert warm["hits"] and all(warm["hits"])
    for run in (cold, warm):
        assert run["step"] == plain["step"] == 5
        np.testing.assert_allclose(run["loss"], plain["loss"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run["weight"], plain["weight"], rtol=1e-5, atol=1e-6)


SMALL_CHILD = '''
import json, numpy as np, tensorflow as tf
import graphcache
from benchmarks import models
t = models.tf1_training_graph(resource_variables=False)  # 124 nodes, 16 kB
cache = graphcache.GraphCache({cache_dir!r})
with graphcache.Session(graph=t.graph, cache=cache) as sess:
    sess.run(t.init)
    for step in range(3):
        sess.run(t.train, t.batch(step))
    loss = sess.run(t.loss, t.batch(99))
    signatures = len(sess.compiled_signatures)
stats = cache.stats()
print(json.dumps({{"loss": float(loss), "signatures": signatures, "entries": stats.entries,
                  "small": stats.uncacheable["small_graph"]}}))
'''


def test_a_graph_under_min_nodes_runs_the_plain_way_and_is_counted(cache_dir):
    child = SMALL_CHILD.format(cache_dir=str(cache_dir))
    plain = run_python(TRAIN_CHILD.format(resource="0", use_cache="0", cache_dir=str(cache_dir))
                       .replace("range(5)", "range(3)"))
    default = run_python(child, env={"GRAPHCACHE_MIN_NODES": ""})  # unset: the default, 300 nodes
    assert default["signatures"] == 0 and default["entries"] == 0 and default["small"] == 1
    np.testing.assert_allclose(default["loss"], plain["loss"], rtol=1e-5, atol=1e-6)
    cached = run_python(child, env={"GRAPHCACHE_MIN_NODES": "100"})  # 124 nodes: cached
    assert cached["signatures"] == 3 and cached["entries"] == 3 and cached["small"] == 1  # init, train, loss
    np.testing.assert_allclose(cached["loss"], plain["loss"], rtol=1e-5, atol=1e-6)


LAZY_CHILD = '''
import json, os, graphcache
from benchmarks import models
t = models.tf1_training_graph(resource_variables=False)
sess = graphcache.Session(graph=t.graph, cache_dir={cache_dir!r})
sess.run(t.init)
sess.run(t.train, t.batch(0))
opened = os.path.exists(os.path.join({cache_dir!r}, "index.db"))
sess.close()
stats = graphcache.GraphCache({cache_dir!r}).stats()
print(json.dumps({{"opened_before_close": opened, "small": stats.uncacheable["small_graph"]}}))
'''


def test_a_small_graph_never_opens_the_cache_dir_before_the_session_closes(cache_dir):
    result = run_python(LAZY_CHILD.format(cache_dir=str(cache_dir)), env={"GRAPHCACHE_MIN_NODES": ""})
    assert result == {"opened_before_close": False, "small": 1}


def test_a_bad_min_nodes_fails_the_construction_with_its_name(cache, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_MIN_NODES", "lots")
    with pytest.raises(ValueError, match="GRAPHCACHE_MIN_NODES='lots'"):
        graphcache.Session(graph=tf.Graph(), cache=cache)


def test_fetch_structures_and_feeds_work_like_tf(cache):
    t = models.tf1_training_graph()
    with graphcache.Session(graph=t.graph, cache=cache) as sess:
        sess.run(t.init)
        batch = t.batch(0)
        out = sess.run({"loss": t.loss, "pair": (t.loss, t.global_step), "op": t.train}, batch)
        assert set(out) == {"loss", "pair", "op"} and out["op"] is None
        assert isinstance(out["pair"], tuple) and out["pair"][1] in (0, 1)
        assert sess.run("loss:0", feed_dict={"x:0": batch[t.x], "y:0": batch[t.y]}).shape == ()
        call = sess.make_callable(t.loss, [t.x, t.y])
        np.testing.assert_allclose(call(batch[t.x], batch[t.y]), sess.run(t.loss, batch), rtol=1e-6)
        with pytest.raises(ValueError, match="Cannot feed value of shape"):
            sess.run(t.loss, {t.x: np.zeros((2, 3), np.float32), t.y: batch[t.y]})


def test_same_signature_compiles_once_per_session(cache):
    t = models.tf1_training_graph()
    with graphcache.Session(graph=t.graph, cache=cache) as sess:
        sess.run(t.init)
        for step in range(4):
            sess.run(t.train, t.batch(step))
        assert len(sess.compiled_signatures) == 2
    assert cache.stats().compiles == 2


def test_session_is_thread_safe(cache):
    t = models.tf1_training_graph()
    errors: list[BaseException] = []
    with graphcache.Session(graph=t.graph, cache=cache) as sess:
        sess.run(t.init)

        def worker(seed):
            try:
                for _ in range(5):
                    sess.run(t.loss, t.batch(seed))
                    sess.run([t.loss, t.global_step], t.batch(seed))
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    assert cache.stats().compiles == 3  # init, loss, loss+step


def test_experimental_config_names_the_cache_dir(cache_dir):
    t = models.tf1_training_graph()
    config = graphcache.ExperimentalConfig(graph_compiler_cache_dir=str(cache_dir))
    with graphcache.Session(graph=t.graph, experimental_config=config) as sess:
        sess.run(t.init)
        assert sess.cache.cache_dir == cache_dir
    assert graphcache.GraphCache(cache_dir).stats().entries == 1


def test_disabled_session_is_plain_tensorflow(cache_dir, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_DISABLE", "1")
    t = models.tf1_training_graph()
    with graphcache.Session(graph=t.graph, cache_dir=str(cache_dir)) as sess:
        sess.run(t.init)
        sess.run(t.train, t.batch(0))
        assert sess.cache is None and not sess.compiled_signatures
    assert not (cache_dir / "entries").exists()


def test_default_graph_is_used_when_none_given(cache):
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [2], name="a")
        b = tf.multiply(a, 3.0, name="b")
        with graphcache.Session(cache=cache) as sess:
            assert sess.run(b, {a: np.array([1.0, 2.0], np.float32)}).tolist() == [3.0, 6.0]


def test_frozen_model_runs_like_tf_and_imports_the_compiled_bytes(cache, cnn, monkeypatch):
    """A stateless frozen graph is imported from the compiled bytes (no parse, nothing to pin); a graph
    with variables goes through the parsed GraphDef (the other tests)."""
    from graphcache.session import drop_in as session_module

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(cnn.graph_def, name="")
    x = cnn.example_input(1)
    with tf.compat.v1.Session(graph=graph) as plain:
        expected = plain.run(cnn.fetches[0], {cnn.feeds[0]: x})
    pinned = []
    monkeypatch.setattr(session_module, "pin_shared_names", lambda graph_def: pinned.append(graph_def))
    for attempt in range(2):  # a miss, then a hit
        with graphcache.Session(graph=graph, cache=cache) as sess:
            out = sess.run(cnn.fetches[0], {cnn.feeds[0]: x})
            (compiled,) = sess.compiled_signatures.values()
        assert compiled.hit == (attempt == 1)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert pinned == []  # the parsed path pins every graph it imports: this one took the bytes path
    assert session_module.shares_state({"VarHandleOp"}) and session_module.shares_state({"a_function_name"})
    assert not session_module.shares_state({"Conv2D", "Const", "Placeholder", "Identity"})


# -- faithful to tf.compat.v1.Session (what TensorFlow's own session_test.py checks; see test_tf_session_suite.py)

def _graph_with_placeholders():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [], name="a")
        b = tf.compat.v1.placeholder(tf.float32, [], name="b")
        c = tf.compat.v1.placeholder(tf.float32, [], name="c")
        r1 = tf.add(a, b, name="r1")
        r2 = tf.multiply(r1, c, name="r2")
    return graph, a, b, c, r1, r2


@pytest.mark.parametrize("options", [None, tf.compat.v1.RunOptions()], ids=["plain-run miss", "run graph"])
def test_missing_feed_error_names_the_users_placeholder(cache, options):
    graph, a, b, c, r1, r2 = _graph_with_placeholders()
    with graphcache.Session(graph=graph, cache=cache) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            sess.run(r1, {a: 1.0}, options=options)
        # a miss runs on TensorFlow's own session (plain_miss.py); a run with RunOptions on the run graph
        assert bool(sess.compiled_signatures) == (options is not None)
    error = caught.value
    assert error.op is b.op and error.node_def.name == "b"
    assert "graphcache_" not in error.message and "graphcache_" not in str(error)
    assert "You must feed a value for placeholder tensor 'b'" in error.message


def test_run_error_keeps_the_original_op_chain(cache):
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(0.0, shape=[2, 3])
        with graph._original_op(a.op):
            b = tf.identity(a, name="id")
        with graph._original_op(b.op):
            c = tf.compat.v1.placeholder(tf.float32)
    with graphcache.Session(graph=graph, cache=cache) as sess, pytest.raises(tf.errors.InvalidArgumentError) as caught:
        sess.run(c)
    assert caught.value.op is c.op
    assert caught.value.op._original_op is b.op and b.op._original_op is a.op


def test_runtime_error_in_a_computed_node_names_it(cache):
    graph = tf.Graph()
    with graph.as_default():
        values = tf.constant([2.0, 2.0, 2.0, 2.0])
        shape = tf.constant([2, 2], name="shape")
        reshaped = tf.reshape(values, shape, name="reshaped")
    expected = "4 values, but the requested shape has 21"
    with graphcache.Session(graph=graph, cache=cache) as sess, \
            pytest.raises(tf.errors.InvalidArgumentError, match=expected) as caught:
        sess.run(reshaped, {shape: [3, 7]})
    assert caught.value.op is reshaped.op and "graphcache_" not in caught.value.message


def test_nodes_grappler_created_map_to_the_users_node_they_stand_for():
    from graphcache.session.run_graph import user_node

    graph = tf.Graph()
    with graph.as_default():
        tf.constant(1.0, name="scope/add")
        tf.constant(1.0, name="conv")
        tf.constant(1.0, name="mul")
    assert user_node("scope/add", graph).name == "scope/add"
    assert user_node("scope/ArithmeticOptimizer/AddOpsRewrite_add", graph).name == "scope/add"
    assert user_node("ConstantFolding/mul", graph).name == "mul"
    assert user_node("conv-0-TransposeNHWCToNCHW-LayoutOptimizer", graph).name == "conv"
    assert user_node("Grappler/made_this_up", graph) is None  # None, as TensorFlow gives for unknown nodes


def test_partial_run_returns_tf_values_and_compiles_through_the_cache(cache):
    graph, a, b, c, r1, r2 = _graph_with_placeholders()
    for attempt in range(2):
        with graphcache.Session(graph=graph, cache=cache) as sess:
            handle = sess.partial_run_setup([r1, r2], [a, b, c])
            assert "graphcache_" not in handle
            assert sess.partial_run(handle, r1, feed_dict={a: 1.0, b: 2.0}) == 3.0
            assert sess.partial_run(handle, r2, feed_dict={c: 4.0}) == 12.0
            (imported,) = sess.compiled_signatures.values()
            assert imported.hit == (attempt == 1)
    assert cache.stats().compiles == 1


def test_partial_run_errors_are_tensorflows(cache):
    graph, a, b, c, r1, r2 = _graph_with_placeholders()
    with graph.as_default():
        other = tf.square(a, name="other")
    with graphcache.Session(graph=graph, cache=cache) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as bogus:
            sess.partial_run("foo", r1, feed_dict={a: 1.0, b: 2.0})
        assert bogus.value.op is None and bogus.value.node_def is None
        handle = sess.partial_run_setup([r1, r2], [a, b, c])
        with pytest.raises(tf.errors.InvalidArgumentError, match="The fetch other:0 was not specified"):
            sess.partial_run(handle, other, feed_dict={a: 1.0})
        with pytest.raises(tf.errors.InvalidArgumentError, match="Fetch a:0 can't be computed") as early:
            sess.partial_run(handle, r1, feed_dict={c: 1.0})
        assert "graphcache_" not in early.value.message
        sess.partial_run(handle, r1, feed_dict={a: 1.0, b: 2.0})
        with pytest.raises(tf.errors.InvalidArgumentError, match="The feed a:0 has already been fed"):
            sess.partial_run(handle, r2, feed_dict={a: 1.0})


def test_make_callable_from_options_compiles_through_the_cache(cache):
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    with graph.as_default():
        ph = tf.compat.v1.placeholder(tf.float32, name="ph")
        out = tf.add(ph, 1.0, name="out")
    options = config_pb2.CallableOptions(feed=[ph.name], fetch=[out.name])
    options.run_options.trace_level = config_pb2.RunOptions.FULL_TRACE
    for attempt in range(2):
        with graphcache.Session(graph=graph, cache=cache) as sess:
            call = sess._make_callable_from_options(options)
            metadata = config_pb2.RunMetadata()
            assert call(np.array(1.0, np.float32), run_metadata=metadata) == [2.0]
            assert metadata.step_stats.dev_stats  # the run options reached the run
            ((key, imported),) = sess.compiled_signatures.items()
            assert key == (("ph:0",), ("out:0",), ()) and imported.hit == (attempt == 1)
    assert cache.stats().compiles == 1 and cache.stats().hits == 1


def test_callable_errors_name_the_users_nodes(cache):
    from tensorflow.core.protobuf import config_pb2

    graph, a, b, c, r1, r2 = _graph_with_placeholders()
    with graphcache.Session(graph=graph, cache=cache) as sess:
        call = sess._make_callable_from_options(config_pb2.CallableOptions(feed=["a:0"], fetch=["r1:0"]))
        with pytest.raises(tf.errors.InvalidArgumentError, match="placeholder tensor 'b'") as caught:
            call(np.float32(1.0))
    assert "graphcache_" not in caught.value.message


def test_make_callable_runs_through_the_cache_and_returns_what_run_returns(cache):
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(42.0, name="a")
        noop = tf.no_op(name="noop")
    with graphcache.Session(graph=graph, cache=cache) as sess:
        assert sess.make_callable(a)() == 42.0
        assert sess.make_callable(noop)() is None
        assert sess.make_callable([a, noop, a.name])() == [42.0, None, 42.0]
        traced = sess.make_callable(a, accept_options=True)
        metadata = config_pb2.RunMetadata()
        options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        assert traced(options=options, run_metadata=metadata) == 42.0 and metadata.step_stats.dev_stats
        with pytest.raises(TypeError):
            sess.make_callable(None)
        assert len(sess.compiled_signatures) == 3
    assert cache.stats().compiles == 3


def test_interactive_session_is_the_default_session_and_compiles(cache):
    graph = tf.Graph()
    with graph.as_default():
        c = tf.matmul(tf.constant(1.0, shape=[1, 2]), tf.constant(2.0, shape=[2, 3]))
    sess = graphcache.InteractiveSession(graph=graph, cache=cache)
    try:
        assert isinstance(sess, tf.compat.v1.InteractiveSession)
        assert tf.compat.v1.get_default_session() is sess
        np.testing.assert_array_equal(c.eval(), [[4.0, 4.0, 4.0]])
        assert len(sess.compiled_signatures) == 1
    finally:
        sess.close()


def test_whole_graph_placement_fails_every_run_as_tf_does(cache):
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    graph = tf.Graph()
    with graph.as_default():
        good = tf.constant(1.0, name="good")
        with tf.device("/device:GPU:63"):
            tf.constant(2.0, name="nowhere")
    messages = []
    for make in (tf.compat.v1.Session, graphcache.Session):
        kwargs = {"cache": cache} if make is graphcache.Session else {}
        with make(graph=graph, config=config, **kwargs) as sess:
            for _ in range(2):
                with pytest.raises(tf.errors.InvalidArgumentError) as caught:
                    sess.run(good)
            messages.append(caught.value.message.splitlines()[-2])
    assert messages[0] == messages[1]  # "Cannot assign a device for operation nowhere: ..."
    with graphcache.Session(graph=graph, config=tf.compat.v1.ConfigProto(allow_soft_placement=True),
                            cache=cache) as sess:
        assert sess.run(good) == 1.0


def test_signatures_share_the_weights_of_a_frozen_model(cache, cnn):
    """Every fetch signature of a frozen model compiles to a graph holding all its weights; the run graph
    holds each large constant once."""
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(cnn.graph_def, name="")
    relus = [op.name for op in graph.get_operations() if op.type == "Relu"]
    signatures = [[cnn.fetches[0]], [cnn.fetches[0], relus[0] + ":0"], [cnn.fetches[0], relus[-1] + ":0"]]
    x = cnn.example_input(3)
    with tf.compat.v1.Session(graph=graph) as plain:
        expected = [plain.run(fetches, {cnn.feeds[0]: x}) for fetches in signatures]

    def big_constants(g):
        return [op for op in g.get_operations() if op.type == "Const" and op.outputs[0].shape.is_fully_defined()
                and op.outputs[0].shape.num_elements() * op.outputs[0].dtype.size >= 1024]

    with graphcache.Session(graph=graph, cache=cache) as filling:  # misses run on TensorFlow's own session
        missed = [filling.run(fetches, {cnn.feeds[0]: x}) for fetches in signatures]
        assert [imported.hit for imported in filling.compiled_signatures.values()] == [False] * 3
        assert big_constants(filling._run_graph) == []
    with graphcache.Session(graph=graph, cache=cache) as sess:  # hits: imported into the run graph
        got = [sess.run(fetches, {cnn.feeds[0]: x}) for fetches in signatures]
        assert [imported.hit for imported in sess.compiled_signatures.values()] == [True] * 3
        shared = big_constants(sess._run_graph)
        scopes = {op.name.split("/")[0] for op in shared}
    for want, miss, have in zip(expected, missed, got, strict=True):
        for w, m, h in zip(want, miss, have, strict=True):
            np.testing.assert_array_equal(m, w)  # a plain-run miss is plain TensorFlow's run
            np.testing.assert_allclose(h, w, rtol=1e-5, atol=1e-6)
    with graphcache.Session(graph=graph, cache=cache) as one:
        one.run(signatures[0], {cnn.feeds[0]: x})
        single = len(big_constants(one._run_graph))
    assert single >= 3 and len(shared) == single and len(scopes) == 1  # all from the first signature's import


def test_use_after_close_raises_runtime_error(cache):
    graph = tf.Graph()
    with graph.as_default():
        c = tf.constant(5.0)
    with graphcache.Session(graph=graph, cache=cache) as sess:
        assert sess.run(c) == 5.0
    with pytest.raises(RuntimeError, match="Attempted to use a closed Session"):
        sess.run(c)


FAILED_CONSTRUCTION = '''
import gc, json, sys
import graphcache
try:
    graphcache.Session(cache_dir="/nonexistent/graphcache-dir")
except graphcache.CacheDirError as exc:
    caught = type(exc).__name__
gc.collect()
print(json.dumps({"caught": caught}))
'''


def test_failed_construction_raises_only_its_own_error():
    import os
    import subprocess
    import sys

    from .helpers import ROOT

    proc = subprocess.run([sys.executable, "-c", FAILED_CONSTRUCTION], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"caught": "CacheDirError"' in proc.stdout
    assert "AttributeError" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
