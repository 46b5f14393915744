"""Bad input gets a clear InvalidGraphError; resource state gets UnsupportedGraphError naming the nodes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from graphcache import InvalidGraphError, UnsupportedGraphError


def test_garbage_bytes(cache):
    with pytest.raises(InvalidGraphError, match="not a serialized GraphDef|no nodes"):
        cache.compile(b"\xff\x00 definitely not a graph \x13\x37" * 10, ["x:0"])


def test_truncated_pb_file(cache, mlp, tmp_path):
    data = mlp.graph_def.SerializeToString()
    path = tmp_path / "truncated.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidGraphError) as info:
        cache.compile(str(path), mlp.fetches, mlp.feeds)
    assert "truncated.pb" in str(info.value) or "not in the graph" in str(info.value)


def test_missing_file(cache, tmp_path):
    with pytest.raises(InvalidGraphError, match="cannot read graph file"):
        cache.compile(tmp_path / "nope.pb", ["x:0"])


def test_wrong_argument_type(cache):
    with pytest.raises(InvalidGraphError, match="cannot use a builtins.dict"):
        cache.compile({"not": "a graph"}, ["x:0"])


def test_fetch_and_feed_not_in_graph(cache, mlp):
    with pytest.raises(InvalidGraphError, match="fetch 'nope:0'"):
        cache.compile(mlp.graph_def, ["nope:0"], mlp.feeds)
    with pytest.raises(InvalidGraphError, match="feed 'ghost:0'"):
        cache.compile(mlp.graph_def, mlp.fetches, ["ghost:0"])


def test_output_index_out_of_range(cache, mlp):
    node = mlp.fetches[0].split(":")[0]
    with pytest.raises(InvalidGraphError, match=f"{node}:7"):
        cache.compile(mlp.graph_def, [f"{node}:7"], mlp.feeds)


def test_pbtxt_file_works(cache, mlp, tmp_path):
    from google.protobuf import text_format

    path = tmp_path / "model.pbtxt"
    path.write_text(text_format.MessageToString(mlp.graph_def))
    assert cache.compile(path, mlp.fetches, mlp.feeds).key == cache.compile(mlp.graph_def, mlp.fetches,
                                                                            mlp.feeds).key


def _hash_table_graph():
    graph = tf.Graph()
    with graph.as_default():
        keys = tf.constant(["a", "b"])
        values = tf.constant([1, 2], tf.int64)
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1, name="my_table")
        query = tf.compat.v1.placeholder(tf.string, [None], name="query")
        tf.identity(table.lookup(query), name="ids")
        tf.compat.v1.tables_initializer(name="init_tables")
    return graph


def _iterator_graph():
    graph = tf.Graph()
    with graph.as_default():
        dataset = tf.data.Dataset.range(10).map(lambda x: x * 2)
        iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
        tf.identity(iterator.get_next(), name="next_value")
    return graph


def test_hash_table_is_rejected_naming_the_node(cache):
    with pytest.raises(UnsupportedGraphError) as info:
        cache.compile(_hash_table_graph(), ["ids:0"], ["query:0"])
    message = str(info.value)
    assert "my_table" in message and "HashTable" in message
    assert "Freeze the graph" in message or "split it" in message
    assert any("my_table" in name for name, _ in info.value.nodes)


def test_iterator_is_rejected_naming_the_node(cache):
    with pytest.raises(UnsupportedGraphError) as info:
        cache.compile(_iterator_graph(), ["next_value:0"])
    assert "Iterator" in str(info.value)
    assert cache.stats().uncacheable["resource_ops"] == 1


def _function_table_graph(call_it: bool) -> tf.Graph:
    """A TF1 graph with a library function that creates and reads a hash table; ``call_it``: the fetched
    tensor goes through the function, else the call hangs off the graph outside the fetch's fan-in."""
    graph = tf.Graph()
    with graph.as_default():
        @tf.function
        def lookup(query):
            table = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64, shared_name="fn_table")
            return tf.raw_ops.LookupTableFindV2(table_handle=table, keys=query,
                                                default_value=tf.constant(-1, tf.int64))

        query = tf.compat.v1.placeholder(tf.string, [None], name="query")
        found = lookup(query)
        tf.identity(found if call_it else tf.strings.length(query), name="out")
    return graph


def test_resource_state_inside_a_called_function_is_rejected_naming_it(cache):
    with pytest.raises(UnsupportedGraphError) as info:
        cache.compile(_function_table_graph(call_it=True), ["out:0"], ["query:0"])
    named = dict(info.value.nodes)
    assert any(name.endswith("/HashTableV2") for name in named), named  # "<function>/<node>"
    assert "HashTableV2" in named.values() and "LookupTableFindV2" in named.values()
    assert cache.stats().uncacheable["resource_ops"] == 1


def test_resource_state_outside_the_fetches_fan_in_is_not_in_the_way(cache):
    compiled = cache.compile(_function_table_graph(call_it=False), ["out:0"], ["query:0"])
    assert not compiled.hit
    assert cache.compile(_function_table_graph(call_it=False), ["out:0"], ["query:0"]).hit


def test_resource_and_ref_variables_are_supported(cache):
    from benchmarks import models

    for resource in (True, False):
        training = models.tf1_training_graph(resource_variables=resource)
        compiled = cache.compile(training.graph, [training.loss], [training.x, training.y])
        assert not compiled.hit


def test_session_falls_back_on_uncacheable_graph(cache):
    graph = _hash_table_graph()
    with pytest.warns(graphcache.GraphCacheWarning, match="my_table"), graphcache.Session(graph=graph,
                                                                                         cache=cache) as sess:
        sess.run("init_tables")
        out = sess.run("ids:0", {"query:0": np.array([b"b", b"zz"])})
    assert out.tolist() == [2, -1]
    assert cache.stats().uncacheable["resource_ops"] == 1
