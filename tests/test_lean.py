"""What every process pays for graphcache's own code: the modules a GraphCache, a hit and a miss load.

Speed is measured in benchmarks/ (import_time.py); this pins down what it comes from, deterministically:
each case is a fresh process that imports TensorFlow first (as a user's process has), then lists the
graphcache modules (and third-party ones graphcache would bring in) that the step loaded. A change that
makes the compile path import XLA, explanation, the remote tier, management or the miss pipeline again
fails here, with the module named.
"""

from __future__ import annotations

import json

import pytest

from .helpers import run_python

# What `import graphcache; GraphCache(dir)` and a hit may not load: plugins, wings above the cache, the
# remote tier, management (audit, selection, filters, stats), the miss pipeline, and third-party packages
# only those use.
NOT_ON_THE_HIT_PATH = (
    "graphcache.xla", "graphcache.functions", "graphcache.traces", "graphcache.explain", "graphcache.session",
    "graphcache.share",
    "graphcache.cli", "graphcache.accelerate", "graphcache.store.remote", "graphcache.core.tier",
    "graphcache.core.index.audit", "graphcache.core.selection", "graphcache.core.filters", "graphcache.core.stats",
    "graphcache.compile.pipeline", "graphcache.compile.validation", "graphcache.core.index.misses",
    "filelock", "fsspec", "s3fs", "platformdirs", "click", "rich",
)
# What opening an existing cache dir does not load either ([lean] #23): the compile path (loaded by the first
# compile()), zstandard (loaded to compress or decompress a payload: a hit on an uncompressed entry never loads
# it) and the index's rebuild (an unreadable index, or the hourly check: a new dir's first open runs it).
NOT_AT_OPEN = (
    "graphcache.core.index.rebuild",
    "graphcache.compile.graphs", "graphcache.compile.wire", "graphcache.compile.canonical", "graphcache.compile.keys",
    "graphcache.compile.importing", "graphcache.compile.safety", "graphcache.compile.compiled",
    "graphcache.compile.compilers", "graphcache.core.priority", "zstandard",
)
# A miss also compiles (the pipeline, validation), takes the key's lock, records the miss and its node table.
ON_A_MISS = ("graphcache.compile.pipeline", "graphcache.compile.validation", "filelock", "graphcache.explain",
             "graphcache.core.index.misses")
MODULE_BUDGET = 27  # graphcache modules `import graphcache; GraphCache(dir)` loads (27: the index loads at its first need)

CHILD = '''
import json, sys
import tensorflow as tf
from benchmarks import models

def loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in
                  ("graphcache", "filelock", "fsspec", "s3fs", "platformdirs", "click", "rich", "zstandard"))

frozen = models.freeze_keras("mlp")  # built before anything of graphcache is imported
assert not any(m.startswith("graphcache") for m in sys.modules), "graphcache imported too early"
before = set(loaded())  # what TensorFlow and Keras loaded themselves (Keras loads rich)
import graphcache
cache = graphcache.GraphCache({cache_dir!r})
opened = sorted(set(loaded()) - before)
compiled = cache.compile(frozen.graph_def, frozen.fetches, frozen.feeds)
after = sorted(set(loaded()) - before)
graphcache.GraphCache({cache_dir!r}, functions=True)  # a plugin asked for is loaded: the check can see it
print(json.dumps({{"opened": opened, "after": after, "with_plugin": sorted(set(loaded()) - before),
                  "hit": compiled.hit}}))
'''


def _run(cache_dir) -> dict:
    return run_python(CHILD.format(cache_dir=str(cache_dir)))


def _matches(names: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if any(name == p or name.startswith(p + ".") for p in prefixes))


def test_a_cache_and_a_hit_load_only_what_they_use(cache_dir):
    miss = _run(cache_dir)
    assert not miss["hit"]
    assert _matches(miss["opened"], NOT_ON_THE_HIT_PATH) == [], "loaded by import graphcache + GraphCache(dir)"
    assert set(_matches(miss["after"], ON_A_MISS)) >= {"filelock", "graphcache.compile.pipeline"}, miss["after"]

    hit = _run(cache_dir)
    assert hit["hit"]
    assert _matches(hit["opened"], NOT_ON_THE_HIT_PATH + NOT_AT_OPEN) == [], "loaded by GraphCache(existing dir)"
    graphcache_modules = [name for name in hit["opened"] if name.startswith("graphcache")]
    assert len(graphcache_modules) <= MODULE_BUDGET, json.dumps(graphcache_modules)
    assert "graphcache.core.index.rebuild" not in hit["after"], "loaded by a hit"
    assert _matches(hit["after"], NOT_ON_THE_HIT_PATH) == [], "loaded by a hit"
    assert "graphcache.functions" in _matches(hit["with_plugin"], NOT_ON_THE_HIT_PATH)


INSTALL_CHILD = '''
import json, sys
import tensorflow as tf
before = set(sys.modules)
import graphcache
graphcache.install(cache_dir={cache_dir!r}, traces={traces})
installed = sorted(m for m in set(sys.modules) - before if m.startswith("graphcache"))
sess = tf.compat.v1.Session()  # the first TF1 session loads the drop-in
print(json.dumps({{"installed": installed, "session": type(sess).__module__,
                  "after": sorted(m for m in sys.modules if m.startswith("graphcache"))}}))
'''


def test_install_loads_the_session_drop_in_only_for_a_tf1_session(cache_dir):
    """A TF2 program under install() pays for the functions and (asked for) traces plugins, not for the TF1 drop-in
    or XLA; by default (traces off) not for the traces plugin either."""
    default = run_python(INSTALL_CHILD.format(cache_dir=str(cache_dir), traces=None))
    assert "graphcache.functions" in default["installed"] and "graphcache.traces" not in default["installed"]
    out = run_python(INSTALL_CHILD.format(cache_dir=str(cache_dir), traces=True))
    assert "graphcache.functions" in out["installed"] and "graphcache.traces" in out["installed"]
    assert _matches(out["installed"], ("graphcache.session.drop_in", "graphcache.xla", "graphcache.accelerate.mode",
                                       "graphcache.share", "graphcache.explain", "graphcache.cli",
                                       "graphcache.traces.hook")) == []  # hook.py: at the first trace
    assert out["session"] == "graphcache.session.drop_in" and "graphcache.session.drop_in" in out["after"]


SMALL_SESSION_CHILD = '''
import json, os, sys
import tensorflow as tf
graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    tf.identity(x * 2.0, name="y")
os.environ.pop("GRAPHCACHE_MIN_NODES", None)  # the default rule: this graph is too small to cache
import graphcache
with graphcache.Session(graph=graph, cache_dir={cache_dir!r}) as sess:
    value = sess.run("y:0", {{"x:0": [1.0, 2.0]}}).tolist()
print(json.dumps({{"value": value, "loaded": sorted(m for m in sys.modules if m.startswith("graphcache")),
                  "small": graphcache.GraphCache({cache_dir!r}).stats().uncacheable.get("small_graph")}}))
'''


def test_a_session_that_runs_plain_never_loads_the_compile_path(cache_dir):
    out = run_python(SMALL_SESSION_CHILD.format(cache_dir=str(cache_dir)), env={"GRAPHCACHE_MIN_NODES": ""})
    assert out["value"] == [2.0, 4.0] and out["small"] == 1
    # "loaded" is taken before the child opens a GraphCache for its stats (dict values evaluate in order)
    assert _matches(out["loaded"], ("graphcache.cache", "graphcache.compile.canonical", "graphcache.compile.keys",
                                    "graphcache.core.service", "graphcache.compile.compilers")) == [], out["loaded"]


# -- the index opens at its first need; a hit's uses and counts leave the caller's path ([lean] #23) -------------
INDEX_MODULES = ("sqlite3", "graphcache.core.index.database")
HIT_CHILD = '''
import json, sys
import numpy as np
import tensorflow as tf
graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="x")
    tf.nn.relu(tf.matmul(x, tf.constant(np.ones((64, 64), np.float32))), name="y")
graph_def = graph.as_graph_def()
watched = {watched!r}
before = [m for m in watched if m in sys.modules]
import graphcache
cache = graphcache.GraphCache({cache_dir!r})
opened = [m for m in watched if m in sys.modules]
compiled = cache.compile(graph_def, ["y:0"], ["x:0"])
after = [m for m in watched if m in sys.modules]  # before the first run: the caller's critical path
with compiled.session() as sess:
    sess.run("y:0", {{"x:0": np.ones((1, 64), np.float32)}})
print(json.dumps({{"before": before, "opened": opened, "after": after, "hit": compiled.hit}}))
'''


def _hit_child(cache_dir) -> dict:
    return run_python(HIT_CHILD.format(cache_dir=str(cache_dir), watched=INDEX_MODULES))


def test_opening_a_cache_and_a_hit_leave_the_index_for_later(cache_dir):
    """``GraphCache(dir)`` on an existing dir and a hit up to its first run load neither sqlite3 nor the index;
    the hit's use and count are written by the time the process has exited normally."""
    from graphcache.core.cachedir import CacheDir

    assert not _hit_child(cache_dir)["hit"]  # the miss stores the entry (and opens the index to do so)
    [row] = CacheDir(cache_dir).entries()
    hit = _hit_child(cache_dir)
    assert hit["hit"] and hit["before"] == []
    assert hit["opened"] == [] and hit["after"] == [], hit
    later = CacheDir(cache_dir)
    [used] = later.entries()
    assert used.key == row.key and used.last_used > row.last_used  # the LRU position moved
    stats = later.stats()
    assert (stats.hits, stats.misses) == (1, 1)


def test_a_hit_in_this_process_shows_in_its_stats_at_once(cache_dir, mlp):
    """What a hit owes the index waits off the caller's path, but stats() (and flush()) in the same process
    see it: they write it first."""
    import graphcache

    graphcache.GraphCache(cache_dir).compile(mlp.graph_def, mlp.fetches, mlp.feeds)  # a miss, then a hit
    cache = graphcache.GraphCache(cache_dir)
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    assert cache.stats().hits == 1
    assert cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds).hit
    assert cache.flush() and graphcache.GraphCache(cache_dir).stats().hits == 2


DAMAGED_CHILD = '''
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import graphcache
    cache = graphcache.GraphCache({cache_dir!r})
    at_open = [str(w.message) for w in caught]
    loaded = [m for m in {watched!r} if m in sys.modules]
    stats = cache.stats()  # the first operation that needs the index
print(json.dumps({{"at_open": at_open, "loaded": loaded, "entries": stats.entries,
                  "warnings": [str(w.message) for w in caught]}}))
'''


@pytest.mark.parametrize("how", ["bit flips", "random bytes"])
def test_a_damaged_index_is_rebuilt_with_one_warning_at_the_first_operation_that_needs_it(cache_dir, how):
    from .test_index_healing import damage, write_entries

    write_entries(cache_dir, 20)
    damage(cache_dir, how)
    out = run_python(DAMAGED_CHILD.format(cache_dir=str(cache_dir), watched=INDEX_MODULES))
    assert out["at_open"] == [] and out["loaded"] == [], out
    assert out["entries"] == 20
    [warning] = [w for w in out["warnings"] if "graphcache" in w]
    assert "rebuilt it from the entry files" in warning and "20 entries re-indexed" in warning, warning
