"""The hit path's importer (importing.py) and the background entry writes of big misses (background.py)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, node_def_pb2

import graphcache
from graphcache import GraphCache
from graphcache import cache as cache_module
from graphcache.compile import importing, safety
from graphcache.entry import codec

from .helpers import BIG_GRAPH, CONTROL_FLOW_MODEL, big_graph_def, run_python


def _public_import(graph_def: graph_pb2.GraphDef, name: str = "") -> tf.Graph:
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name=name)
    return graph


def _control_flow_graph():
    scope: dict = {}
    exec(CONTROL_FLOW_MODEL, scope)  # noqa: S102 - our own test model
    return scope["build_control_flow_graph"]()


@pytest.mark.parametrize("name", ["", "scope"])
def test_import_serialized_builds_the_graph_import_graph_def_builds(mlp, name):
    data = mlp.graph_def.SerializeToString()
    fast = tf.Graph()
    importing.import_serialized(fast, data, name=name)
    assert fast.as_graph_def() == _public_import(mlp.graph_def, name).as_graph_def()
    prefix = f"{name}/" if name else ""
    x = mlp.example_input()
    with tf.compat.v1.Session(graph=fast) as sess:
        out = sess.run(prefix + mlp.fetches[0], {prefix + mlp.feeds[0]: x})
    with tf.compat.v1.Session(graph=_public_import(mlp.graph_def)) as sess:
        np.testing.assert_array_equal(out, sess.run(mlp.fetches[0], {mlp.feeds[0]: x}))


def test_import_serialized_registers_library_functions():
    graph_def, feeds, fetches = _control_flow_graph()
    assert graph_def.library.function  # the case this test is about
    fast = tf.Graph()
    importing.import_serialized(fast, graph_def.SerializeToString())
    public = _public_import(graph_def)
    assert fast.as_graph_def() == public.as_graph_def()
    assert set(fast._functions) == set(public._functions)  # the Python graph knows the functions too
    x = np.ones([1, 4], np.float32)
    with tf.compat.v1.Session(graph=fast) as a, tf.compat.v1.Session(graph=public) as b:
        np.testing.assert_array_equal(a.run(fetches[0], {feeds[0]: x}), b.run(fetches[0], {feeds[0]: x}))


def test_import_serialized_rejects_garbage_without_touching_the_graph():
    graph = tf.Graph()
    with pytest.raises(ValueError):
        importing.import_serialized(graph, b"\xff\xff\xff\xff not a graph")
    assert graph.get_operations() == []


def test_wire_op_types_match_the_parsed_graph(mlp, cnn):
    graph_def, _, _ = _control_flow_graph()
    for g in (mlp.graph_def, cnn.graph_def, graph_def):
        assert importing.wire_op_types(g.SerializeToString()) == safety.graph_ops(g)


def test_wire_op_types_reads_an_op_given_twice_as_protobuf_does():
    node = node_def_pb2.NodeDef(name="n", op="Identity").SerializeToString()
    twice = node + b"\x12\x09WriteFile"  # field 2 (op) again: the parser keeps the last value
    data = b"\x0a" + bytes([len(twice)]) + twice
    assert graph_pb2.GraphDef.FromString(data).node[0].op == "WriteFile"
    assert importing.wire_op_types(data) == {"WriteFile"}


@pytest.mark.parametrize("data", [b"\x08\x01", b"\x0a\x02\x10\x01", b"\x0a\x05", b"\x0a\x04\x12\x02Hi"],
                         ids=["node_as_varint", "op_as_varint", "truncated", "well_formed"])
def test_wire_op_types_agree_with_the_parser_on_odd_framing(data):
    """A known field with another wire type is an unknown field to protobuf (skipped, not an error)."""
    try:
        expected = safety.graph_ops(graph_pb2.GraphDef.FromString(data))
    except Exception:  # noqa: BLE001 - protobuf's DecodeError has no stable import path
        with pytest.raises(ValueError):
            importing.wire_op_types(data)
    else:
        assert importing.wire_op_types(data) == expected


def test_payload_that_is_not_a_graph_def_is_discarded_and_recompiled(cache, mlp):
    key = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    path = cache.store.path_for(key)
    header, _ = codec.decode(path.read_bytes(), key)
    path.write_bytes(codec.encode(header, b"\x0a\xff\xff\xff\xff\x0f"))  # checksums fine, framing broken
    with pytest.warns(UserWarning, match="not a GraphDef"):
        again = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not again.hit
    with again.session() as sess:
        assert np.isfinite(sess.run(mlp.fetches[0], {mlp.feeds[0]: mlp.example_input()})).all()
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit


def test_graph_def_is_parsed_lazily_and_edits_are_honoured(cache, mlp):
    cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    hit = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert hit.hit and hit._graph_def is None  # nothing parsed for a hit that is only run
    with hit.session() as sess:
        sess.run(mlp.fetches[0], {mlp.feeds[0]: mlp.example_input()})
    assert hit._graph_def is None
    extra = hit.graph_def.node.add(name="added_by_the_user", op="NoOp")
    assert "added_by_the_user" in {op.name for op in hit.import_graph().get_operations()}
    assert extra.name == "added_by_the_user"


# -- background writes of big entries ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_graph():
    graph_def = big_graph_def()
    assert graph_def.ByteSize() >= cache_module.BACKGROUND_WRITE_BYTES
    return graph_def


def test_big_miss_is_written_in_the_background_and_flush_waits(cache, big_graph):
    compiled = cache.compile(big_graph, ["y:0"], ["x:0"])
    assert not compiled.hit
    with compiled.session() as sess:  # runs while the entry may still be being written
        out = sess.run("y:0", {"x:0": np.ones([1, 1024], np.float32)})
    assert cache.flush(timeout=120)
    assert cache.pending_writes == 0
    header, _ = codec.decode(cache.store.path_for(compiled.key).read_bytes(), compiled.key)
    assert header.payload_size >= cache_module.BACKGROUND_WRITE_BYTES
    again = cache.compile(big_graph, ["y:0"], ["x:0"])
    assert again.hit
    with again.session() as sess:
        np.testing.assert_array_equal(sess.run("y:0", {"x:0": np.ones([1, 1024], np.float32)}), out)


def _written_within(cache, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while cache.pending_writes and time.monotonic() < deadline:
        time.sleep(0.02)
    return cache.pending_writes == 0


def test_a_big_miss_is_written_after_its_first_run_not_during_it(cache, big_graph, monkeypatch):
    monkeypatch.setattr(cache_module, "WRITE_GRACE", 120.0)  # only the first run (or a flush) may start it
    compiled = cache.compile(big_graph, ["y:0"], ["x:0"])
    time.sleep(0.3)
    assert cache.pending_writes == 1 and not cache.store.path_for(compiled.key).exists()
    with compiled.session() as sess:
        sess.run("y:0", {"x:0": np.ones([1, 1024], np.float32)})
        assert _written_within(cache, 60) and cache.store.path_for(compiled.key).exists()
        sess.run("y:0", {"x:0": np.ones([1, 1024], np.float32)})  # the class's run again


def test_graphcache_session_lets_its_misses_be_written_after_their_first_run(cache, big_graph, monkeypatch):
    monkeypatch.setattr(cache_module, "WRITE_GRACE", 120.0)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(big_graph, name="")
    with graphcache.Session(graph=graph, cache=cache) as sess:
        sess.run("y:0", {"x:0": np.ones([1, 1024], np.float32)})
        assert _written_within(cache, 60)
    assert cache.stats().entries == 1


def test_without_a_first_run_the_grace_or_a_flush_starts_the_write(cache, big_graph, monkeypatch):
    monkeypatch.setattr(cache_module, "WRITE_GRACE", 0.2)
    compiled = cache.compile(big_graph, ["y:0"], ["x:0"])
    assert _written_within(cache, 60) and cache.store.path_for(compiled.key).exists()  # the grace
    cache.purge()
    monkeypatch.setattr(cache_module, "WRITE_GRACE", 120.0)
    started = time.monotonic()
    compiled = cache.compile(big_graph, ["y:0"], ["x:0"])
    assert cache.flush(timeout=60) and time.monotonic() - started < 60  # a flush opens the gate
    assert cache.store.path_for(compiled.key).exists()


def test_threads_asking_during_the_background_write_wait_and_hit(cache, big_graph):
    results = []
    barrier = threading.Barrier(4)

    def ask():
        barrier.wait()
        results.append(cache.compile(big_graph, ["y:0"], ["x:0"]))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cache.flush()
    assert sum(not r.hit for r in results) == 1  # single flight: the lock went with the write
    assert cache.stats().compiles == 1


def test_strict_mode_writes_before_compile_returns(cache_dir, big_graph):
    cache = GraphCache(cache_dir, strict=True)
    compiled = cache.compile(big_graph, ["y:0"], ["x:0"])
    assert cache.pending_writes == 0 and cache.store.path_for(compiled.key).exists()


def test_a_process_that_exits_right_after_a_big_miss_leaves_its_entry(cache_dir):
    child = BIG_GRAPH + f'''
import json
import graphcache
compiled = graphcache.GraphCache({str(cache_dir)!r}).compile(build_big_graph(), ["y:0"], ["x:0"])
print(json.dumps({{"key": compiled.key, "hit": compiled.hit}}))
'''
    first = run_python(child)  # exits without flush: the write is joined at interpreter exit
    assert not first["hit"]
    cache = GraphCache(cache_dir)
    assert cache.verify() == []
    assert cache.store.path_for(first["key"]).exists()
    assert run_python(child)["hit"]


def test_without_the_private_importer_the_public_one_is_used(cache, mlp, monkeypatch):
    cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    hit = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)

    def unavailable():  # what another TensorFlow without these private helpers looks like
        raise importing.FastImportUnavailable("no _ProcessNewOps here")

    monkeypatch.setattr(importing, "_importer", unavailable)
    with hit.session() as sess:
        out = sess.run(mlp.fetches[0], {mlp.feeds[0]: mlp.example_input()})
    with tf.compat.v1.Session(graph=_public_import(mlp.graph_def)) as sess:
        expected = sess.run(mlp.fetches[0], {mlp.feeds[0]: mlp.example_input()})
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # graphcache.Session imports under scopes it names first: the fallback must land in the same scope
    with graphcache.Session(graph=_public_import(mlp.graph_def), cache=cache) as sess:
        np.testing.assert_allclose(sess.run(mlp.fetches[0], {mlp.feeds[0]: mlp.example_input()}), expected,
                                   rtol=1e-5, atol=1e-6)


def test_stats_right_after_a_big_miss_count_its_entry(cache, big_graph):
    cache.compile(big_graph, ["y:0"], ["x:0"])
    stats = cache.stats()  # management calls wait for the background write
    assert stats.entries == 1 and stats.bytes >= cache_module.BACKGROUND_WRITE_BYTES
