"""graphcache.Session behaves like tf.compat.v1.Session in everything but speed."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from graphcache import models

from .helpers import run_python

TRAIN_CHILD = '''
import json, sys, numpy as np, tensorflow as tf
import graphcache
from graphcache import models
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
    from graphcache import session as session_module

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(cnn.graph_def, name="")
    x = cnn.example_input(1)
    with tf.compat.v1.Session(graph=graph) as plain:
        expected = plain.run(cnn.fetches[0], {cnn.feeds[0]: x})
    pinned = []
    monkeypatch.setattr(session_module, "_pin_shared_names", lambda graph_def: pinned.append(graph_def))
    for attempt in range(2):  # a miss, then a hit
        with graphcache.Session(graph=graph, cache=cache) as sess:
            out = sess.run(cnn.fetches[0], {cnn.feeds[0]: x})
            (compiled,) = sess.compiled_signatures.values()
        assert compiled.hit == (attempt == 1)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert pinned == []  # the parsed path pins every graph it imports: this one took the bytes path
    assert session_module._shares_state({"VarHandleOp"}) and session_module._shares_state({"a_function_name"})
    assert not session_module._shares_state({"Conv2D", "Const", "Placeholder", "Identity"})
