"""GraphCache: hits across processes, corrupt entries, versions, settings, fail-open."""

from __future__ import annotations

import os
import stat
import warnings

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from graphcache import CacheDirError, CacheIOError, GraphCache, GraphCacheWarning

from .helpers import run_python

TWO_PROCESS_CHILD = '''
import json, sys, numpy as np, tensorflow as tf
import graphcache
from benchmarks import models
m = models.freeze_keras("cnn")
x = m.example_input(3)
compiled = graphcache.GraphCache(sys.argv[1] if len(sys.argv) > 1 else {cache_dir!r}).compile(
    m.graph_def, m.fetches, m.feeds, name="cnn")
with compiled.session() as s:
    cached = s.run(m.fetches[0], {{m.feeds[0]: x}})
g = tf.Graph()
with g.as_default():
    tf.graph_util.import_graph_def(m.graph_def, name="")
with tf.compat.v1.Session(graph=g) as s:
    plain = s.run(m.fetches[0], {{m.feeds[0]: x}})
print(json.dumps({{"key": compiled.key, "hit": compiled.hit, "max_diff": float(np.abs(cached - plain).max()),
                  "allclose": bool(np.allclose(cached, plain, rtol=1e-5, atol=1e-6)),
                  "compile_seconds": compiled.compile_seconds}}))
'''


def _run_plain(model, x):
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(model.graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(model.fetches[0], {model.feeds[0]: x})


def _run_compiled(compiled, model, x):
    with compiled.session() as sess:
        return sess.run(model.fetches[0], {model.feeds[0]: x})


def test_two_fresh_processes_miss_then_hit(cache_dir):
    first = run_python(TWO_PROCESS_CHILD.format(cache_dir=str(cache_dir)))
    second = run_python(TWO_PROCESS_CHILD.format(cache_dir=str(cache_dir)))
    assert (first["hit"], second["hit"]) == (False, True)
    assert first["key"] == second["key"]
    assert first["allclose"] and second["allclose"], (first, second)
    assert second["compile_seconds"] == pytest.approx(first["compile_seconds"])
    stats = GraphCache(cache_dir).stats()
    assert (stats.hits, stats.misses, stats.compiles, stats.entries) == (1, 1, 1, 1)


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_outputs_equal_uncached_run(cache, request, model_name):
    model = request.getfixturevalue(model_name)
    x = model.example_input(1)
    cold = cache.compile(model.graph_def, model.fetches, model.feeds)
    warm = cache.compile(model.graph_def, model.fetches, model.feeds)
    assert (cold.hit, warm.hit) == (False, True)
    expected = _run_plain(model, x)
    for compiled in (cold, warm):
        np.testing.assert_allclose(_run_compiled(compiled, model, x), expected, rtol=1e-5, atol=1e-6)


def test_resnet50_outputs_equal_uncached_run(cache):
    from benchmarks import models

    model = models.freeze_keras("resnet50")
    x = model.example_input(2)
    cold = cache.compile(model.graph_def, model.fetches, model.feeds, name="resnet50")
    warm = cache.compile(model.graph_def, model.fetches, model.feeds, name="resnet50")
    assert warm.hit and len(warm.graph_def.node) < len(model.graph_def.node)  # Grappler really ran
    np.testing.assert_allclose(_run_compiled(warm, model, x), _run_plain(model, x), rtol=1e-5, atol=1e-6)
    assert cold.key == warm.key


def _entry_path(cache, key):
    return cache.store.path_for(key)


def _flip_bit(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])


@pytest.mark.parametrize("damage", ["bit_flip", "truncate", "swap"])
def test_corrupt_entry_is_detected_recompiled_and_warned(cache, mlp, cnn, damage):
    key = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    path = _entry_path(cache, key)
    if damage == "bit_flip":
        _flip_bit(path)
    elif damage == "truncate":
        _truncate(path)
    else:  # another valid entry's file copied over this key's
        other = cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds).key
        path.write_bytes(_entry_path(cache, other).read_bytes())
    with pytest.warns(GraphCacheWarning, match="corrupt"):
        again = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not again.hit and again.key == key
    x = mlp.example_input()
    np.testing.assert_allclose(_run_compiled(again, mlp, x), _run_plain(mlp, x), rtol=1e-5, atol=1e-6)
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # rewritten, good again
    assert cache.stats().uncacheable["corrupt_entry"] == 1
    assert cache.verify() == []


def test_strict_mode_raises_on_corrupt_entry(cache_dir, mlp):
    cache = GraphCache(cache_dir, strict=True)
    key = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    _flip_bit(_entry_path(cache, key))
    with pytest.raises(CacheIOError, match=key):
        cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)


def test_missing_explicit_cache_dir_raises_naming_it(tmp_path):
    missing = tmp_path / "does" / "not" / "exist"
    with pytest.raises(CacheDirError) as info:
        GraphCache(missing)
    assert str(missing) in str(info.value)
    assert info.value.cache_dir == str(missing)


def test_default_cache_dir_is_created_private(tmp_path, monkeypatch):
    target = tmp_path / "fresh" / "gc"
    monkeypatch.setenv("GRAPHCACHE_DIR", str(target))
    cache = GraphCache()
    assert cache.cache_dir == target and target.is_dir()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_version_change_purges_old_entries_when_stale(cache_dir, mlp):
    old = GraphCache(cache_dir, identity_salt="v1")
    key = old.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    new = GraphCache(cache_dir, identity_salt="v2", stale_after=0)
    assert new.last_purge.entries == 1 and new.last_purge.bytes > 0
    assert not _entry_path(new, key).exists()
    assert new.stats().entries == 0


def test_recently_opened_version_keeps_its_entries(cache_dir, mlp):
    old = GraphCache(cache_dir, identity_salt="v1")
    key = old.compile(mlp.graph_def, mlp.fetches, mlp.feeds).key
    # stats() opens the index, whose once-per-process housekeeping purges stale versions' entries
    GraphCache(cache_dir, identity_salt="v2").stats()  # default stale_after: 24 h
    assert _entry_path(old, key).exists()
    GraphCache(cache_dir, identity_salt="v2", stale_after=0, on_version_change="keep").stats()
    assert _entry_path(old, key).exists()
    assert GraphCache(cache_dir, identity_salt="v1").compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    GraphCache(cache_dir, identity_salt="v2", stale_after=0).stats()  # what the steps above did not do
    assert not _entry_path(old, key).exists()


def test_salt_from_environment_and_explicit_argument_wins(cache_dir, mlp, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_IDENTITY_SALT", "from-env")
    assert GraphCache(cache_dir).identity_salt == "from-env"
    assert GraphCache(cache_dir, identity_salt="explicit").identity_salt == "explicit"


def test_disable_env_bypasses_the_cache(cache_dir, mlp, monkeypatch):
    monkeypatch.setenv("GRAPHCACHE_DISABLE", "1")
    cache = GraphCache(cache_dir, read_only=False)
    compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not compiled.hit and compiled.key == ""
    assert not (cache_dir / "entries").exists() and not (cache_dir / "index.db").exists()


def test_read_only_serves_hits_and_never_writes(cache_dir, mlp, cnn):
    writer = GraphCache(cache_dir)
    writer.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    writer.close()
    before = sorted(p.name for p in cache_dir.rglob("*"))
    reader = GraphCache(cache_dir, read_only=True)
    assert reader.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    assert not reader.compile(cnn.graph_def, cnn.fetches, cnn.feeds).hit
    assert not reader.compile(cnn.graph_def, cnn.fetches, cnn.feeds).hit
    assert sorted(p.name for p in cache_dir.rglob("*")) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_dir_fails_open(cache_dir, mlp):
    cache_dir.chmod(0o500)
    try:
        with pytest.warns(GraphCacheWarning):
            compiled = GraphCache(cache_dir).compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        assert not compiled.hit
    finally:
        cache_dir.chmod(0o700)


def test_write_failure_fails_open_with_one_warning(cache, mlp, cnn, monkeypatch):
    import errno

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.store, "write_parts", no_space)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
        cache.compile(cnn.graph_def, cnn.fetches, cnn.feeds)
    ours = [w for w in caught if issubclass(w.category, GraphCacheWarning)]
    assert len(ours) == 1 and "No space left" in str(ours[0].message)
    assert not first.hit and len(first.graph_def.node) > 0
    assert cache.stats().uncacheable["io_error"] == 2 and cache.stats().errors == 2


@pytest.mark.parametrize("store", ["empty", "filled"])
def test_lock_timeout_compiles_without_cache(cache, mlp, store):
    """On a filled store the miss locks its key; on an empty one (a first-ever run, keyed in a thread) the
    lock named by its fan-in's node names (keys.flight_key)."""
    import filelock

    from graphcache.compile import graphs, keys

    cache.lock_timeout = 0.2
    if store == "filled":
        import tensorflow as tf

        other = tf.Graph()
        with other.as_default():
            tf.identity(tf.constant(1.0), name="y")
        cache.compile(other, ["y:0"])
        cache.wait_for_writes()
        key = graphcache.fingerprint(mlp.graph_def, mlp.fetches, mlp.feeds)
    else:
        view = graphs.GraphView(mlp.graph_def, graphs.Signature.create(mlp.fetches, mlp.feeds, ()))
        key = keys.flight_key(view, None, cache.identity)
    holder = filelock.FileLock(str(cache.store.locks_dir / f"{key[:2]}.lock"))
    cache.store.locks_dir.mkdir(exist_ok=True)
    with holder, pytest.warns(GraphCacheWarning, match="compile lock"):
        compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    assert not compiled.hit and len(compiled.graph_def.node) > 0
    assert cache.stats().uncacheable["lock_timeout"] == 1
    assert not cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit  # nothing was stored


def test_lookup_logs_one_info_line(cache, mlp, caplog):
    caplog.set_level("INFO", logger="graphcache")
    compiled = cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds, name="my-mlp")
    lines = [r.getMessage() for r in caplog.records if r.levelname == "INFO" and compiled.key in r.getMessage()]
    assert len(lines) == 1 and "miss" in lines[0] and "my-mlp" in lines[0]


def test_threads_share_one_cache(cache, mlp):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds), range(8)))
    assert len({r.key for r in results}) == 1
    assert sum(not r.hit for r in results) == 1
    assert cache.stats().compiles == 1
