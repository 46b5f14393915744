"""Poisoning defence and optional signing: an artifact is used only if it can be trusted."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from graphcache import GraphCache, GraphCacheWarning
from graphcache.compile import safety
from graphcache.core import failures
from graphcache.entry import codec
from graphcache.errors import UntrustedEntryError


def _rewrite_entry(cache, key, mutate, *, signing_key=None):
    """Replace an entry's payload with a mutated graph, re-encoded as a valid (checksummed) entry."""
    path = cache.store.path_for(key)
    header, payload = codec.decode(path.read_bytes(), key, signing_key=signing_key)
    graph_def = graph_pb2.GraphDef.FromString(payload)
    mutate(graph_def)
    path.write_bytes(codec.encode(header, graph_def.SerializeToString(), signing_key=signing_key))


def _add_write_file(graph_def):
    filename = graph_def.node.add(name="evil/filename", op="Const")
    filename.attr["dtype"].type = tf.string.as_datatype_enum
    filename.attr["value"].tensor.dtype = tf.string.as_datatype_enum
    filename.attr["value"].tensor.string_val.append(b"/tmp/graphcache-poisoned")
    writer = graph_def.node.add(name="evil/write", op="WriteFile", input=["evil/filename", "evil/filename"])
    fetch = next(n for n in graph_def.node if n.op == "Identity")
    fetch.input.append("^" + writer.name)


def _run(compiled, model, x):
    with compiled.session() as sess:
        return sess.run(model.fetches[0], {model.feeds[0]: x})


def test_poisoned_artifact_is_rejected_and_recompiled(cache, mlp, tmp_path):
    key = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    _rewrite_entry(cache, key, _add_write_file)
    assert codec.decode(cache.store.path_for(key).read_bytes(), key)  # intact as bytes: only ops betray it
    with pytest.warns(GraphCacheWarning, match="WriteFile"):
        again = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not again.hit
    assert "WriteFile" not in safety.graph_ops(again.graph_def)
    _run(again, mlp, mlp.example_input())
    assert cache.stats().uncacheable["untrusted_entry"] == 1
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # the rebuilt entry is clean


def test_introduced_ops_rules():
    source = {"Placeholder", "MatMul", "Const", "Identity", "PrintV2"}
    graph = graph_pb2.GraphDef()
    for op in ["_FusedMatMul", "Cast", "NoOp", "PrintV2", "ReadFile", "RandomUniform", "NoSuchOpAnywhere"]:
        graph.node.add(name=op.lower(), op=op)
    # stateless rewrites are fine, an op the source had is fine; I/O, stateful and unknown ops are not
    assert safety.introduced_ops(source, graph) == ["NoSuchOpAnywhere", "RandomUniform", "ReadFile"]


def test_signed_entries(cache_dir, mlp, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_SIGNING_KEY", "team-secret")
    signer = GraphCache(cache_dir)
    key = signer.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    assert signer.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    data = signer.store.path_for(key).read_bytes()
    with pytest.raises(UntrustedEntryError):
        codec.decode(data, key, signing_key=b"another-key")

    # an unsigned entry (written without the key) is ignored and replaced while the key is set
    monkeypatch.delenv("GRAPHCACHE_SIGNING_KEY")
    unsigned = GraphCache(cache_dir)
    unsigned.purge(all=True)
    unsigned.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    monkeypatch.setenv("GRAPHCACHE_SIGNING_KEY", "team-secret")
    checker = GraphCache(cache_dir)
    with pytest.warns(GraphCacheWarning, match="not signed"):
        assert not checker.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    assert checker.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    assert checker.stats().uncacheable["untrusted_entry"] == 1

    # badly signed: the right format and checksums, a signature from another key
    _rewrite_entry(checker, key, lambda gd: None, signing_key=b"team-secret")
    path = checker.store.path_for(key)
    header, payload = codec.decode(path.read_bytes(), key)
    path.write_bytes(codec.encode(header, payload, signing_key=b"attacker"))
    failures.reset_warnings()  # warnings are once per process and kind; this is a new case to see
    with pytest.warns(GraphCacheWarning, match="signature does not verify"):
        assert not GraphCache(cache_dir).compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit


def test_outputs_unchanged_with_signing(cache_dir, mlp, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_SIGNING_KEY", "k")
    cache = GraphCache(cache_dir)
    x = mlp.example_input(4)
    first = _run(cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds), mlp, x)
    second = _run(cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds), mlp, x)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("mode, who", [(0o777, "other users"), (0o770, "its group")])
def test_shared_writable_cache_dir_warns(cache_dir, mode, who):
    cache_dir.chmod(mode)
    with pytest.warns(GraphCacheWarning, match=f"writable by {who}"):
        GraphCache(cache_dir)


def test_private_cache_dir_does_not_warn(cache_dir):
    import warnings

    cache_dir.chmod(0o700)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphCacheWarning)
        GraphCache(cache_dir)
