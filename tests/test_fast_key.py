"""Fast keys of node-heavy graphs (compile/keys.exact_key): a hit found by the graph's exact bytes through an
alias entry, never a stale one. Every case is a fresh process: the exact bytes must be the same in each
(protobuf's map order is not, unless serialized deterministically), and a changed graph must miss.
"""

from __future__ import annotations

import json

import numpy as np

from graphcache import GraphCache
from graphcache.compile.keys import FAST_MIN_NODES
from graphcache.entry import kinds

from .helpers import run_python

NODES = FAST_MIN_NODES + 40

CHILD = '''
import json, sys
import numpy as np
import tensorflow as tf
import graphcache
from graphcache.compile import keys

def build(scale):
    """A chain of {nodes} small ops on a 4x4 input (node-heavy, tiny weights), one constant scaled."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 4], name="x")
        y = x
        rng = np.random.default_rng(0)
        for i in range({nodes} // 2):
            value = rng.standard_normal((4, 4)).astype(np.float32) * (scale if i == 7 else 1.0)
            y = tf.tanh(y + tf.constant(value, name=f"c{{i}}"), name=f"t{{i}}")
        tf.identity(y, name="out")
    return graph.as_graph_def()

scale, fetch, canonical_allowed = {scale}, {fetch!r}, {canonical_allowed}
graph_def = build(scale)
if not canonical_allowed:  # this process must find its entry by the fast key alone
    def no_canonical(*args, **kwargs):
        raise AssertionError("the canonical key was computed")
    keys.compute = no_canonical
cache = graphcache.GraphCache({cache_dir!r})
compiled = cache.compile(graph_def, [fetch], ["x:0"])
with compiled.session() as sess:
    value = sess.run(fetch, {{"x:0": np.ones((4, 4), np.float32)}})
with tf.compat.v1.Session(graph=tf.Graph()) as plain:
    tf.graph_util.import_graph_def(graph_def, name="")
    expected = plain.run(fetch, {{"x:0": np.ones((4, 4), np.float32)}})
cache.wait_for_writes()
print(json.dumps({{"hit": compiled.hit, "key": compiled.key, "same": bool(np.array_equal(value, expected)),
                  "nodes": len(graph_def.node), "kinds": sorted(r.kind for r in cache.entries())}}))
'''


def child(cache_dir, *, scale=1.0, fetch="out:0", canonical_allowed=True) -> dict:
    return run_python(CHILD.format(cache_dir=str(cache_dir), nodes=NODES, scale=scale, fetch=fetch,
                                   canonical_allowed=canonical_allowed))


def test_a_node_heavy_graph_hits_by_its_exact_bytes_in_a_fresh_process(cache_dir):
    miss = child(cache_dir)
    assert not miss["hit"] and miss["same"] and miss["nodes"] >= FAST_MIN_NODES
    assert miss["kinds"] == [kinds.GRAPH, kinds.GRAPH_ALIAS]
    hit = child(cache_dir, canonical_allowed=False)  # found without computing the canonical key
    assert hit["hit"] and hit["same"] and hit["key"] == miss["key"]
    assert hit["kinds"] == [kinds.GRAPH, kinds.GRAPH_ALIAS]


def test_a_changed_graph_or_signature_never_hits_an_alias_it_does_not_own(cache_dir):
    first = child(cache_dir)
    changed = child(cache_dir, scale=1.5)  # one constant changed: other bytes, another canonical key
    assert not changed["hit"] and changed["same"] and changed["key"] != first["key"]
    other_fetch = child(cache_dir, fetch="t3:0")  # the same graph, another signature
    assert not other_fetch["hit"] and other_fetch["same"]
    again = child(cache_dir, canonical_allowed=False)
    assert again["hit"] and again["key"] == first["key"]


def test_an_alias_whose_target_is_gone_or_corrupt_falls_back_to_the_canonical_key(cache_dir):
    first = child(cache_dir)
    cache = GraphCache(cache_dir)
    alias = next(r for r in cache.entries() if r.kind == kinds.GRAPH_ALIAS)
    assert cache.purge([first["key"]]).entries == 1  # the graph entry goes, its alias stays
    rebuilt = child(cache_dir)  # the alias names nothing: canonical key, a miss, compiled again
    assert not rebuilt["hit"] and rebuilt["same"] and rebuilt["key"] == first["key"]
    assert rebuilt["kinds"] == [kinds.GRAPH, kinds.GRAPH_ALIAS]

    path = cache.store.path_for(alias.key)  # a payload that names no key: refused, the canonical key decides
    from graphcache.entry import codec

    header = codec.read_header(str(path))
    path.write_bytes(b"".join(codec.encode_parts(header, b"not a key at all")))
    found = child(cache_dir)
    assert found["hit"] and found["same"] and found["key"] == first["key"]
    assert child(cache_dir, canonical_allowed=False)["hit"]  # and the alias was written again


def test_small_graphs_keep_no_alias(cache, mlp):
    assert len(mlp.graph_def.node) < FAST_MIN_NODES
    cache.compile(mlp.graph_def, mlp.fetches, mlp.feeds)
    cache.wait_for_writes()
    assert [row.kind for row in cache.entries()] == [kinds.GRAPH], json.dumps([r.kind for r in cache.entries()])


def _chain(first_value, nodes: int):
    """A GraphDef: one constant ``first_value`` (serialized first) and ``nodes`` identities after it."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        y = tf.constant(np.asarray(first_value, np.float32), name="first")
        for i in range(nodes):
            y = tf.identity(y, name=f"i{i}")
    return graph.as_graph_def()


def test_the_fast_key_is_only_tried_where_hashing_bytes_beats_the_canonical_form():
    """Node-heavy small graphs get a fast key; a graph whose bytes are mostly weights, over
    keys.FAST_BYTES_PER_NODE a node, does not. The budget is in bytes, so the answer is the graph's own: a
    graph just under it gets its key however slow this thread runs, one just over never does."""
    from graphcache.compile import keys
    from graphcache.compile.graphs import GraphView, Signature

    signature = Signature.create([f"i{NODES - 1}:0"])
    small = _chain(1.0, NODES)
    fast = keys.exact_key(GraphView(small, signature), None, {})
    assert fast is not None and fast == keys.exact_key(GraphView(small, signature), None, {})
    budget = keys.FAST_BYTES_PER_NODE * (NODES + 1)  # the constant and NODES identities
    under = _chain(np.ones(budget // 4 - 64 * (NODES + 1), np.float32), NODES)  # leaves room for the nodes
    over = _chain(np.ones(budget // 4 + 1, np.float32), NODES)
    assert under.ByteSize() <= budget < over.ByteSize()
    assert keys.exact_key(GraphView(under, signature), None, {}) is not None
    assert keys.exact_key(GraphView(over, signature), None, {}) is None


def test_other_bytes_of_a_compiled_graph_hit_by_the_canonical_key_and_get_their_own_alias(cache_dir):
    """The same graph in other bytes (its nodes in another order) misses the fast key; the canonical key
    finds the entry, nothing is compiled again, and the new bytes get an alias of their own."""
    signature = [f"i{NODES - 1}:0"]
    graph_def = _chain(np.arange(4), NODES)
    reordered = type(graph_def)()
    reordered.CopyFrom(graph_def)
    reordered.node.reverse()
    assert reordered.SerializeToString() != graph_def.SerializeToString()
    first = GraphCache(cache_dir).compile(graph_def, signature)
    cache = GraphCache(cache_dir)
    found = cache.compile(reordered, signature)
    assert not first.hit and found.hit and found.key == first.key
    with found.session() as sess:
        assert np.array_equal(sess.run(signature[0]), np.arange(4, dtype=np.float32))
    cache.wait_for_writes()
    assert cache.stats().compiles == 1
    assert sorted(row.kind for row in cache.entries()) == [kinds.GRAPH, kinds.GRAPH_ALIAS, kinds.GRAPH_ALIAS]


def test_an_invalid_node_heavy_graph_is_refused_and_nothing_is_stored(cache_dir):
    from graphcache.errors import InvalidGraphError

    graph_def = _chain(np.arange(4), NODES)
    graph_def.node[-1].input[0] = "no_such_node"
    cache = GraphCache(cache_dir)
    try:
        cache.compile(graph_def, [f"i{NODES - 1}:0"])
        raise AssertionError("an input that names no node compiled")
    except InvalidGraphError as exc:
        assert "no_such_node" in str(exc)
    cache.wait_for_writes()
    assert cache.entries() == [] and cache.stats().compiles == 0


def test_processes_missing_the_same_node_heavy_graph_at_once_compile_it_once(cache_dir):
    """Single flight holds for graphs looked up by their fast key first."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: child(cache_dir), range(3)))
    assert all(result["same"] for result in results)
    assert sorted(result["hit"] for result in results) == [False, True, True]
    assert GraphCache(cache_dir).stats().compiles == 1


def test_a_first_ever_miss_computes_the_canonical_key_in_its_write(cache_dir, tmp_path, monkeypatch):
    """On an empty store without a remote, a canonical key cannot find anything: the miss compiles without
    it and the entry's write, after the caller's first run, computes it: once, never on the caller's path
    to its first result (a thread beside Grappler slowed the compile: benchmarks/first_ever_ab.py). A caller
    reading ``compiled.key`` early computes it, and the write takes that one. Once the store holds an entry,
    a miss computes its key before compiling."""
    import threading

    from graphcache import cache as cache_module
    from graphcache.compile import keys

    monkeypatch.setattr(cache_module, "BACKGROUND_WRITE_BYTES", 0)  # written in the background, as big graphs are
    threads: list[str] = []
    compute = keys.compute

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return compute(*args, **kwargs)

    monkeypatch.setattr(keys, "compute", recorded)
    signature = [f"i{NODES - 1}:0"]
    graph_def = _chain(np.arange(4), NODES)
    cache = GraphCache(cache_dir)
    compiled = cache.compile(graph_def, signature)
    with compiled.session() as sess:
        assert np.array_equal(sess.run(signature[0]), np.arange(4, dtype=np.float32))
    assert threads in ([], ["graphcache-write"]) and not compiled.hit  # the write may have begun: the run is over
    cache.wait_for_writes()
    assert threads == ["graphcache-write"]  # one pass, by the write
    stored = {row.kind: row.key for row in cache.entries()}
    assert compiled.key == stored[kinds.GRAPH] and sorted(stored) == [kinds.GRAPH, kinds.GRAPH_ALIAS]
    # Written, the result keeps only the key: nothing of the source graph (whose weights a protobuf
    # sub-message would keep alive, all of them) is reachable from it.
    assert not [kind for kind in _reachable_types(compiled) if kind in ("NodeDef", "GraphDef", "GraphView")]

    changed = _chain(np.arange(4) + 1, NODES)  # the store is not empty now: keyed before compiling
    assert not cache.compile(changed, signature).hit and threads[1:] == ["MainThread"]
    cache.wait_for_writes()

    (tmp_path / "elsewhere").mkdir()
    other = GraphCache(tmp_path / "elsewhere")
    assert other.compile(graph_def, signature).key == compiled.key  # read at once: computed by the caller
    other.wait_for_writes()
    assert threads[2:] == ["MainThread"]  # and taken by the write: one pass


def test_a_first_ever_miss_of_a_graph_without_a_fast_key_is_keyed_off_the_callers_path_too(cache_dir, monkeypatch):
    """A graph under FAST_MIN_NODES nodes (or a weight-heavy one: BERT-base's canonical key is ~100 ms) has no
    fast key: on an empty store its canonical key is computed by the write as well, no alias is written,
    and a second process (the store filled) hits it by its canonical key."""
    import threading

    from graphcache import cache as cache_module
    from graphcache.compile import keys

    monkeypatch.setattr(cache_module, "BACKGROUND_WRITE_BYTES", 0)  # written in the background, as big graphs are
    threads: list[str] = []
    compute = keys.compute

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return compute(*args, **kwargs)

    monkeypatch.setattr(keys, "compute", recorded)
    signature = ["i9:0"]
    cache = GraphCache(cache_dir)
    compiled = cache.compile(_chain(np.arange(4), 10), signature)
    assert not compiled.hit and "MainThread" not in threads
    cache.wait_for_writes()
    assert threads == ["graphcache-write"]
    assert [row.kind for row in cache.entries()] == [kinds.GRAPH] and cache.entries()[0].key == compiled.key
    again = GraphCache(cache_dir).compile(_chain(np.arange(4), 10), signature)
    assert again.hit and again.key == compiled.key and threads[1:] == ["MainThread"]


def _reachable_types(root: object, limit: int = 50_000) -> set[str]:
    """The type names of the objects reachable from ``root`` through references the collector sees."""
    import gc
    import types

    seen, names, todo = {id(root)}, set(), [root]
    while todo and len(seen) < limit:
        item = todo.pop()
        names.add(type(item).__name__)
        for referent in gc.get_referents(item):
            if id(referent) not in seen and not isinstance(referent, type | types.ModuleType):
                seen.add(id(referent))
                todo.append(referent)
    return names
