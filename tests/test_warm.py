"""``graphcache warm``: CI cache warming of SavedModels and frozen GraphDefs, driven through the CLI."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from google.protobuf import text_format

import graphcache
from graphcache import GraphCache, cli
from graphcache.share.warm import guess_signature, warm

from .test_saved_model import assert_outputs_equal, build_saved_model, reference


def invoke(*args: str):
    return CliRunner().invoke(cli.cli, list(args))


def warm_json(cache_dir, *args: str, exit_code: int = 0) -> list[dict]:
    result = invoke("warm", *args, "--json", "--cache-dir", str(cache_dir))
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    return build_saved_model(tmp_path_factory.mktemp("models") / "small")


@pytest.fixture
def frozen_pb(tmp_path, mlp):
    path = tmp_path / "mlp.pb"
    path.write_bytes(mlp.graph_def.SerializeToString())
    return path


def test_warm_a_saved_model_twice_then_load_it_without_loading(saved_model, tmp_path):
    cache_dir = tmp_path / "fresh" / "cache"  # missing: warm creates it, mode 0700
    first = warm_json(cache_dir, str(saved_model))
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert [(r["signature"], r["status"]) for r in first] == [("scaled", "compiled"),
                                                             ("serving_default", "compiled")]
    for r in first:
        assert r["path"] == str(saved_model) and r["reason"] is None and len(r["key"]) == 32 and r["alias"]
    cache = GraphCache(cache_dir)
    compiles = cache.stats().compiles

    second = warm_json(cache_dir, str(saved_model))
    assert [r["status"] for r in second] == ["cached", "cached"]
    assert [r["key"] for r in second] == [r["key"] for r in first]
    assert cache.stats().compiles == compiles  # nothing compiled the second time

    one = warm_json(cache_dir, str(saved_model), "--signature", "serving_default")
    assert [(r["signature"], r["status"]) for r in one] == [("serving_default", "cached")]

    # warm wrote the alias load_saved_model reads
    x = np.random.RandomState(0).rand(2, 4).astype(np.float32)
    fn = graphcache.load_saved_model(saved_model, cache=cache)
    assert fn.hit and fn.key == first[1]["key"]
    assert_outputs_equal(fn(x=x), reference(saved_model, "serving_default", x=x))

    table = invoke("warm", str(saved_model), "--cache-dir", str(cache_dir))
    assert table.exit_code == 0
    assert "already cached" in table.stdout and "[serving_default]" in table.stdout
    assert "2 already cached" in table.stderr


def test_warm_a_frozen_graph_guesses_its_signature_and_says_so(frozen_pb, mlp, cache_dir):
    result = invoke("warm", str(frozen_pb), "--json", "--cache-dir", str(cache_dir))
    assert result.exit_code == 0, result.output
    assert "guessed" in result.stderr and "input:0" in result.stderr and "Identity:0" in result.stderr
    [entry] = json.loads(result.stdout)
    assert entry["status"] == "compiled" and entry["signature"] is None
    assert entry["feeds"] == mlp.feeds and entry["fetches"] == mlp.fetches
    assert sorted(entry["guessed"]) == ["feeds", "fetches"]
    assert entry["key"] == graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert GraphCache(cache_dir).compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # a consumer hits

    assert [r["status"] for r in warm_json(cache_dir, str(frozen_pb))] == ["cached"]

    # the same graph as text, with the signature named: same key, nothing guessed, nothing compiled
    pbtxt = frozen_pb.with_suffix(".pbtxt")
    pbtxt.write_text(text_format.MessageToString(mlp.graph_def))
    named = invoke("warm", str(pbtxt), "--feed", "input:0", "--fetch", "Identity:0", "--json",
                   "--cache-dir", str(cache_dir))
    assert named.exit_code == 0 and "guessed" not in named.stderr
    [entry] = json.loads(named.stdout)
    assert (entry["status"], entry["key"], entry["guessed"]) == ("cached", GraphCache(cache_dir).compile(
        mlp.graph_def, mlp.fetches, mlp.feeds).key, [])


def _table_graph(path):
    graph = tf.Graph()
    with graph.as_default():
        keys = tf.compat.v1.placeholder(tf.string, [None], name="keys")
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["a", "b"], [1, 2]), -1)
        tf.identity(table.lookup(keys), name="ids")
    path.write_bytes(graph.as_graph_def().SerializeToString())
    return path


def test_warm_reports_uncacheable_and_failed_graphs(tmp_path, cache_dir, frozen_pb, saved_model):
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\x00 not a graph" * 10)
    table = _table_graph(tmp_path / "table.pb")
    results = warm_json(cache_dir, str(frozen_pb), str(table), str(garbage), str(tmp_path / "missing.pb"),
                        str(tmp_path), exit_code=1)
    by_path = {r["path"]: r for r in results}
    assert by_path[str(frozen_pb)]["status"] == "compiled"
    assert by_path[str(table)]["status"] == "uncacheable"
    assert "HashTable" in by_path[str(table)]["reason"]
    assert by_path[str(garbage)]["status"] == "failed" and "GraphDef" in by_path[str(garbage)]["reason"]
    assert by_path[str(tmp_path / "missing.pb")]["reason"] == "no such file or directory"
    assert "not a SavedModel" in by_path[str(tmp_path)]["reason"]

    human = invoke("warm", str(table), str(garbage), "--cache-dir", str(cache_dir))
    assert human.exit_code == 1
    assert "not cacheable" in human.stdout and "failed" in human.stdout
    assert "1 failed" in human.stderr and "graphcache: error:" in human.stderr

    bad = warm_json(cache_dir, str(saved_model), "--signature", "nope", exit_code=1)
    assert bad[0]["status"] == "failed" and "scaled, serving_default" in bad[0]["reason"]
    usage = invoke("warm", str(saved_model), "--fetch", "y:0", "--cache-dir", str(cache_dir))
    assert usage.exit_code == 2 and "SavedModel" in usage.stderr
    usage = invoke("warm", str(frozen_pb), "--signature", "serving_default", "--cache-dir", str(cache_dir))
    assert usage.exit_code == 2


def test_warm_python_api_and_guessing(saved_model, frozen_pb, mlp, cache, monkeypatch):
    statuses = [r.status for r in warm([saved_model, frozen_pb], cache)]
    assert statuses == ["compiled", "compiled", "compiled"]
    assert [r.status for r in warm([saved_model, frozen_pb], cache)] == ["cached"] * 3
    feeds, fetches, targets = guess_signature(mlp.graph_def)
    assert (feeds, fetches, targets) == (mlp.feeds, mlp.fetches, [])

    monkeypatch.setenv("GRAPHCACHE_READ_ONLY", "1")
    [result] = warm([frozen_pb], GraphCache(cache.cache_dir))
    assert result.status == "uncacheable" and "read-only" in result.reason


NATIVE_NOISE = ("oneDNN custom operations", "cudart_stub", "absl::InitializeLog", "cpu_feature_guard")


def _warm_in_a_child(tmp_path, path, **env):
    """``graphcache warm`` as a user runs it: its own process, TensorFlow's logging as the user left it."""
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", "graphcache", "warm", str(path), "--cache-dir",
                           str(tmp_path / "cache")], capture_output=True, text=True, timeout=300,
                          env={**clean, **env})


def test_warm_keeps_tensorflows_start_up_lines_off_the_terminal(frozen_pb, tmp_path):
    quiet = _warm_in_a_child(tmp_path, frozen_pb)
    assert quiet.returncode == 0, quiet.stderr
    assert "Warmed 1 graph" in quiet.stderr  # graphcache's own lines still show
    assert not [line for line in quiet.stderr.splitlines() if any(word in line for word in NATIVE_NOISE)]
    asked = _warm_in_a_child(tmp_path, frozen_pb, TF_CPP_MIN_LOG_LEVEL="0")  # the user asked for them
    assert any(word in asked.stderr for word in NATIVE_NOISE) and "Warmed 1 graph" in asked.stderr
    (tmp_path / "bad.pb").write_bytes(b"not a GraphDef")
    failed = _warm_in_a_child(tmp_path, tmp_path / "bad.pb")  # a failure shows what TensorFlow said too
    assert failed.returncode == 1 and "failed to warm" in failed.stderr
    assert any(word in failed.stderr for word in NATIVE_NOISE), failed.stderr
