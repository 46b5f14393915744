"""Misses that explain themselves: ``graphcache explain``, ``graphcache misses`` and GRAPHCACHE_EXPLAIN.

The done-when flow runs the real CLI (``python -m graphcache``) and compiles in fresh processes; the node
diff's cases (a changed attribute, added and removed nodes, a renamed graph) run in-process on small
TF1 graphs; the index side (a bounded table, migrations, rebuilds, read-only indexes) without TensorFlow.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

from graphcache import GraphCache, cli
from graphcache.compile import keys
from graphcache.core.cachedir import CacheDir
from graphcache.core.index import misses
from graphcache.core.index.database import INDEX_FILE, CacheIndex, IndexRow
from graphcache.core.index.schema import MIGRATIONS, SCHEMA_V1, SCHEMA_V2, SCHEMA_VERSION, statements
from graphcache.entry import codec
from graphcache.explain import explain, nodes

from .helpers import ROOT, run_python
from .test_inputs import _hash_table_graph
from .test_saved_model import build_saved_model

v1 = tf.compat.v1


def graphcache_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m graphcache ARGS`` in a fresh process, as a user runs it."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "graphcache", *args], capture_output=True, text=True,
                          env=full_env, timeout=300, cwd=ROOT)


def cli_json(*args: str, env: dict[str, str] | None = None):
    proc = graphcache_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def invoke(*args: str):
    return CliRunner().invoke(cli.cli, list(args))


def changed_copy(graph_def):
    """``graph_def`` with one weight constant's values changed: (the copy, that node's name)."""
    changed = type(graph_def)()
    changed.CopyFrom(graph_def)
    node = next(n for n in changed.node if n.op == "Const" and n.attr["value"].tensor.tensor_content)
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(tf.make_ndarray(node.attr["value"].tensor) + 1.0))
    return changed, node.name


# -- the done-when flow, through the real CLI and fresh processes ----------------------------------------------
def test_a_changed_constant_is_explained_and_its_miss_recorded(mlp, tmp_path, cache_dir):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    original, changed = tmp_path / "v1" / "model.pb", tmp_path / "v2" / "model.pb"  # one model, two versions
    original.write_bytes(mlp.graph_def.SerializeToString())
    changed_def, changed_node = changed_copy(mlp.graph_def)
    changed.write_bytes(changed_def.SerializeToString())
    where = ["--cache-dir", str(cache_dir)]

    [warmed] = cli_json("warm", str(original), *where)
    assert warmed["status"] == "compiled"
    first = warmed["key"]

    explained = cli_json("explain", str(changed), *where)
    assert explained["cached"] is False and explained["name"] == "model.pb"
    nearest = explained["nearest"][0]
    assert nearest["key"] == first and nearest["name"] == "model.pb"
    assert nearest["differs"] == ["graph"]
    assert nearest["nodes"]["changed"] == {changed_node: ["attr:value"]}
    assert nearest["nodes"]["added"] == [] and nearest["nodes"]["removed"] == []

    same = cli_json("explain", str(original), *where)
    assert same["cached"] is True and same["key"] == first

    salted = cli_json("explain", str(original), *where, env={"GRAPHCACHE_IDENTITY_SALT": "other"})
    assert salted["cached"] is False and salted["key"] != first
    assert salted["nearest"][0]["key"] == first and salted["nearest"][0]["differs"] == ["identity"]
    assert salted["nearest"][0]["detail"]["identity"] == "salt '' -> 'other'"

    compiled = run_python(f"""
        import json
        from graphcache import GraphCache
        compiled = GraphCache({str(cache_dir)!r}).compile({str(changed)!r}, {mlp.fetches!r}, {mlp.feeds!r},
                                                        name="model.pb")
        print(json.dumps({{"key": compiled.key, "hit": compiled.hit}}))
    """)
    assert compiled["hit"] is False and compiled["key"] == explained["key"]
    recent = cli_json("misses", *where)
    assert recent[0]["key"] == compiled["key"] and recent[0]["name"] == "model.pb"
    assert recent[0]["nearest"] == first and recent[0]["differs"] == ["graph"]
    assert recent[1]["key"] == first and recent[1]["nearest"] is None  # the first compile: nothing to compare
    assert set(recent[0]) >= {"time", "name", "key", "nearest", "differs"}


# -- the node diff -------------------------------------------------------------------------------------------
def small_graph(*, prefix: str = "", scale: float = 1.0, transpose: bool = False, extra: bool = False):
    """x -> MatMul(w) [-> Add(bias)] -> Relu ``out``; ``prefix`` renames every internal node (as a model
    built after another gets ``dense_1/...``), the signature's names stay."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) * scale, name=prefix + "w")
        h = tf.matmul(x, w, transpose_b=transpose, name=prefix + "mm")
        if extra:
            h = tf.add(h, tf.constant(0.5, name=prefix + "bias"), name=prefix + "biased")
        tf.nn.relu(h, name="out")
    return graph.as_graph_def()


def compile_small(cache, name="small", **variant):
    return cache.compile(small_graph(**variant), ["out:0"], ["x:0"], name=name)


def explain_small(cache_dir, name="small", **variant):
    result = explain(small_graph(**variant), ["out:0"], ["x:0"], cache=GraphCache(cache_dir, read_only=True),
                     name=name)
    assert result.cacheable and not result.cached
    assert result.nearest[0].differs == ["graph"]
    return result.nearest[0].nodes


def test_a_changed_attribute_is_named(cache, cache_dir):
    compile_small(cache)
    diff = explain_small(cache_dir, transpose=True)
    assert diff.changed == {"mm": ["attr:transpose_b"]} and not diff.added and not diff.removed


def test_added_nodes_are_named(cache, cache_dir):
    compile_small(cache)
    diff = explain_small(cache_dir, extra=True)
    assert sorted(diff.added) == ["bias", "biased"] and not diff.removed
    assert diff.changed == {"out": ["inputs"]}  # the consumer now reads the new node


def test_removed_nodes_are_named(cache, cache_dir):
    compile_small(cache, extra=True)
    diff = explain_small(cache_dir)
    assert sorted(diff.removed) == ["bias", "biased"] and not diff.added
    assert diff.changed == {"out": ["inputs"]}


def test_a_renamed_graph_is_matched_by_structure(cache, cache_dir):
    """A model built after another one: every internal name differs (canonical ids match upstream, a matched
    consumer's input slot pairs the renamed constant); only the constant whose value changed is named."""
    compile_small(cache)
    renamed = explain(small_graph(prefix="model_7/"), ["out:0"], ["x:0"],
                      cache=GraphCache(cache_dir, read_only=True), name="small")
    assert renamed.cached  # names do not enter the key
    diff = explain_small(cache_dir, prefix="model_7/", scale=2.0)
    assert diff.changed == {"model_7/w": ["attr:value"]} and not diff.added and not diff.removed


def test_node_lists_are_capped_with_the_count_of_the_rest():
    old = [nodes.Node(f"n{i}", f"{i:012x}", "Const", "", {"value": "0"}, ()) for i in range(30)]
    diff = nodes.diff([], old)
    capped = diff.capped(20)
    assert len(capped["removed"]) == 20 and capped["more"] == {"added": 0, "removed": 10, "changed": 0}


def test_the_node_table_round_trips_and_refuses_damage(cnn):
    fp = keys.compute(keys_view(cnn), None, {"test": 1})
    table = nodes.encode(nodes.from_summaries(fp.details))
    decoded = nodes.decode(table)
    assert [n.name for n in decoded] == list(fp.details) and table["nodes"] == len(fp.details)
    assert nodes.diff(nodes.from_summaries(fp.details), decoded).empty
    for damaged in ({**table, "data": table["data"][:-8]}, {**table, "format": 99}, {"data": "!!"}, None):
        with pytest.raises(ValueError):
            nodes.decode(damaged)


def keys_view(model):
    from graphcache.compile.graphs import GraphView, Signature

    return GraphView(model.graph_def, Signature.create(model.fetches, model.feeds))


def test_the_entry_keeps_a_small_node_table(cache, cnn):
    compiled = cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds, name="cnn")
    path = cache.store.path_for(compiled.key)
    header = codec.read_header(str(path))
    table = header.extra[nodes.EXTRA_KEY]
    assert table["nodes"] == len(nodes.decode(table)) > 10
    assert len(json.dumps(table)) < 64 * table["nodes"]  # ResNet50: 14 bytes a node (benchmarks/miss_explain.py)
    shown = invoke("show", compiled.key, "--cache-dir", str(cache.cache_dir))
    assert shown.exit_code == 0 and f"{table['nodes']} nodes" in shown.stdout


# -- at the moment of a miss -----------------------------------------------------------------------------------
def test_graphcache_explain_logs_each_miss(cache, monkeypatch, caplog):
    first = compile_small(cache)
    monkeypatch.setenv("GRAPHCACHE_EXPLAIN", "1")
    with caplog.at_level(logging.WARNING, logger="graphcache"):
        compile_small(cache, transpose=True)
    [line] = [r.getMessage() for r in caplog.records if "nearest entry" in r.getMessage()]
    assert f"nearest entry {first.key} (small) differs in graph (changed mm (attr:transpose_b))" in line
    [recorded] = misses.recent(cache.index, 1)
    assert recorded.differs == ("graph",) and recorded.nearest == first.key


def test_logging_at_info_explains_each_miss(cache, caplog):
    compile_small(cache)
    caplog.set_level(logging.INFO, logger="graphcache")
    compile_small(cache, extra=True)
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "INFO" and "nearest entry" in r.getMessage()]
    assert "added bias, biased" in line or "added biased, bias" in line


def test_a_miss_under_another_signature_says_which_names_changed(cache):
    compile_small(cache)
    cache.compile(small_graph(), ["out:0", "mm:0"], ["x:0"], name="small")
    [recorded] = misses.recent(cache.index, 1)
    assert "fetches" in recorded.differs and "fetches: out:0 -> mm:0, out:0" in recorded.detail


# -- the CLI, in-process -----------------------------------------------------------------------------------------
def test_a_saved_model_is_explained_by_signature(tmp_path, cache_dir):
    import graphcache

    first = build_saved_model(tmp_path / "a" / "small")
    assert graphcache.load_saved_model(first, cache=GraphCache(cache_dir)).wait()  # built in the background
    result = invoke("explain", str(first), "--json", "--cache-dir", str(cache_dir))
    assert result.exit_code == 0, result.output
    same = json.loads(result.stdout)
    assert same["cached"] is True and same["name"] == "small:serving_default"

    second = build_saved_model(tmp_path / "b" / "small", scale=2.0)  # retrained: other weights
    result = invoke("explain", str(second), "--signature", "serving_default", "--json", "--cache-dir", str(cache_dir))
    assert result.exit_code == 0, result.output
    other = json.loads(result.stdout)
    assert other["cached"] is False
    nearest = other["nearest"][0]
    assert nearest["key"] == same["key"] and nearest["differs"] == ["graph"]
    assert nearest["nodes"]["changed"] and all(what == ["attr:value"] for what in nearest["nodes"]["changed"].values())

    table = invoke("explain", str(second), "--cache-dir", str(cache_dir))
    assert table.exit_code == 0 and "attr:value" in table.stdout and "Cached      no" in table.stdout
    wrong = invoke("explain", str(second), "--fetch", "y:0", "--cache-dir", str(cache_dir))
    assert wrong.exit_code == 2 and "SavedModel" in wrong.output


def test_a_graph_that_cannot_be_cached_says_why(tmp_path, cache_dir):
    path = tmp_path / "table.pb"
    path.write_bytes(_hash_table_graph().as_graph_def().SerializeToString())
    result = invoke("explain", str(path), "--feed", "query:0", "--fetch", "ids:0", "--json", "--cache-dir",
                    str(cache_dir))
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert said["cacheable"] is False and said["cached"] is False and said["nearest"] == []
    assert "my_table" in said["reason"] and "HashTable" in said["reason"]
    human = invoke("explain", str(path), "--feed", "query:0", "--fetch", "ids:0", "--cache-dir", str(cache_dir))
    assert "not cacheable" in human.stdout


def test_misses_lists_newest_first_and_clears(cache, cache_dir):
    compile_small(cache)
    compile_small(cache, scale=3.0)
    listed = invoke("misses", "--cache-dir", str(cache_dir))
    assert listed.exit_code == 0 and listed.stdout.count("small") == 2 and "graph" in listed.stdout
    one = json.loads(invoke("misses", "--limit", "1", "--json", "--cache-dir", str(cache_dir)).stdout)
    assert len(one) == 1 and one[0]["differs"] == ["graph"]
    assert invoke("misses", "--clear", "--cache-dir", str(cache_dir)).exit_code == 0
    assert json.loads(invoke("misses", "--json", "--cache-dir", str(cache_dir)).stdout) == []


# -- the index side (no TensorFlow needed) ---------------------------------------------------------------------
def test_the_parts_named_in_core_are_the_key_s():
    assert misses.PARTS == keys.PART_ORDER


def test_the_misses_table_keeps_the_newest(cache_dir):
    index = CacheIndex(cache_dir)
    for i in range(8):
        misses.record(index, misses.Miss(1000.0 + i, f"g{i}", f"{i:032x}", None, ("graph",)), keep=5)
    kept = misses.recent(index)
    assert [m.name for m in kept] == ["g7", "g6", "g5", "g4", "g3"]
    assert misses.recent(index, 2)[1].differs == ("graph",)


def _schema_2_index(cache_dir):
    with sqlite3.connect(cache_dir / INDEX_FILE) as conn:
        for step in (SCHEMA_V1, SCHEMA_V2):
            for statement in statements(step):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 2")


def test_a_schema_2_index_reads_as_no_misses_read_only_and_is_migrated_writable(cache_dir):
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 3
    _schema_2_index(cache_dir)
    read_only = CacheIndex(cache_dir, read_only=True)
    assert misses.recent(read_only) == []
    assert misses.nearest(read_only, "g", dict.fromkeys(misses.PARTS, "x")) == ([], 0)
    listed = invoke("misses", "--json", "--cache-dir", str(cache_dir))
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []
    index = CacheIndex(cache_dir)
    misses.record(index, misses.Miss(time.time(), "g", "0" * 32))
    assert [m.name for m in misses.recent(index)] == ["g"]


def test_a_rebuilt_index_starts_without_misses_and_refills_parts_from_headers(cache, cache_dir):
    compile_small(cache)
    second = compile_small(cache, scale=2.0)
    assert len(misses.recent(cache.index)) == 2
    cache.close()
    (cache_dir / INDEX_FILE).write_bytes(b"this is not a database" * 100)
    rebuilt = CacheDir(cache_dir)
    assert rebuilt.rebuilt is not None and rebuilt.rebuilt.usable
    assert misses.recent(rebuilt.index) == []
    reopened = GraphCache(cache_dir)
    third = compile_small(reopened, scale=3.0)  # the nearest entry is found from its header, parts refilled
    [recorded] = misses.recent(reopened.index)
    assert recorded.key == third.key and recorded.differs == ("graph",)
    assert recorded.nearest == second.key  # same name, same parts shared: the newest
    with sqlite3.connect(cache_dir / INDEX_FILE) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entry_parts").fetchone()[0] == 3


def test_removing_an_entry_removes_its_parts(cache, cache_dir):
    first = compile_small(cache)
    cache.purge([first.key])
    with sqlite3.connect(cache_dir / INDEX_FILE) as conn:
        assert conn.execute("SELECT COUNT(*) FROM entry_parts").fetchone()[0] == 0


def test_the_onednn_switch_as_tensorflow_resolved_it_is_part_of_the_identity(mlp, tmp_path, cache_dir):
    """Unset, TF_ENABLE_ONEDNN_OPTS leaves oneDNN's rewrites to TensorFlow's reading of the CPU, so two hosts
    with one environment can differ, and a Session's collected graph carries the rewrites (and their numerics).
    The identity holds the switch as TensorFlow resolved it in each process; entries compiled with it on are
    not served with it off, and the miss says so."""
    model = tmp_path / "model.pb"
    model.write_bytes(mlp.graph_def.SerializeToString())
    where = ["--cache-dir", str(cache_dir)]
    probe = "from tensorflow.python.util import _pywrap_util_port as p; print(p.IsMklEnabled())"

    def resolved(value: str) -> bool:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": value})
        return proc.stdout.split()[-1] == "True"

    on, off = {"TF_ENABLE_ONEDNN_OPTS": "1"}, {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert [row["status"] for row in cli_json("warm", str(model), *where, env=on)] == ["compiled"]
    assert [row["status"] for row in cli_json("warm", str(model), *where, env=on)] == ["cached"]
    explained = cli_json("explain", str(model), *where, env=off)
    assert explained["cached"] is False and explained["nearest"][0]["differs"] == ["identity"]
    detail = explained["nearest"][0]["detail"]["identity"]
    assert "TF_ENABLE_ONEDNN_OPTS 1 -> 0" in detail
    if resolved("1"):  # a TensorFlow built with oneDNN (x86 Linux wheels): the resolved switch differs too
        assert "oneDNN rewrites True -> False" in detail


def test_identity_changes_in_words():
    old = {"version": "a", "version_info": {"tensorflow": "2.20.0", "salt": ""}, "device": "cpu"}
    new = {"version": "b", "version_info": {"tensorflow": "2.21.0", "salt": ""}, "device": "gpu:H100:cc9.0"}
    assert misses.identity_changes(old, new) == "tensorflow 2.20.0 -> 2.21.0, device kind cpu -> gpu:H100:cc9.0"
    assert misses.identity_changes({"tensorflow": "2.21.0", "salt": "a"}, {"tensorflow": "2.21.0", "salt": "b"}) \
        == "salt 'a' -> 'b'"


def test_nearest_ranks_same_name_first_then_parts_shared(cache_dir):
    index = CacheIndex(cache_dir)
    wanted = {part: f"{part}-now" for part in misses.PARTS}
    now = time.time()
    for key, name, stale in (("a" * 32, "m", ("graph", "identity")), ("b" * 32, "other", ("identity",)),
                             ("c" * 32, "m", ("graph",)), ("d" * 32, "other", ("graph", "feeds", "fetches"))):
        row = IndexRow(key, name, "graph", 100, now, now, "v", "id", 0.0)
        misses.upsert_entry(index, row, {part: f"{part}-old" if part in stale else value
                                         for part, value in wanted.items()})
    found, more = misses.nearest(index, "m", wanted, limit=3, everything=True)
    assert [c.key[0] for c in found] == ["c", "a", "b"] and more == 1
    assert found[0].differs(wanted) == ["graph"] and found[2].differs(wanted) == ["identity"]
    at_a_miss, _ = misses.nearest(index, "m", wanted)  # same name: one indexed lookup
    assert [c.key[0] for c in at_a_miss] == ["c"]
    by_graph, _ = misses.nearest(index, "new", wanted)  # no entry of that name: the same graph part
    assert [c.key[0] for c in by_graph] == ["b"]
