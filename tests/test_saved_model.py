"""graphcache.load_saved_model: a SavedModel signature served from the cache, skipping the SavedModel load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import graphcache
from graphcache import GraphCache
from graphcache.core.cachedir import CacheDir
from graphcache.entry import codec
from graphcache.share.saved_model import ALIAS_KIND, SavedModelError, alias_key, read_alias

from .helpers import run_python

RTOL, ATOL = 1e-5, 1e-6


def build_saved_model(path: Path, scale: float = 1.0) -> Path:
    """A small tf.Module SavedModel with two signatures (one input -> two outputs; two inputs -> one)."""

    class Model(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0 * scale, name="w")
            self.b = tf.Variable(np.linspace(-1.0, 1.0, 3).astype(np.float32), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.nn.relu(tf.matmul(x, self.w) + self.b), "total": tf.reduce_sum(x, axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="a"),
                                      tf.TensorSpec([None, 3], tf.float32, name="b")])
        def scaled(self, a, b):
            return {"out": tf.matmul(a, self.w) * b}

    model = Model()
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve, "scaled": model.scaled})
    return path


def reference(path: Path, signature: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    fn = tf.saved_model.load(str(path)).signatures[signature]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


def assert_outputs_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    return build_saved_model(tmp_path_factory.mktemp("models") / "small")


def x_input(seed: int = 0, rows: int = 3) -> np.ndarray:
    return np.random.RandomState(seed).rand(rows, 4).astype(np.float32)


def test_outputs_match_tensorflow_and_the_second_load_hits(saved_model, cache):
    x = x_input()
    cold = graphcache.load_saved_model(saved_model, cache=cache)
    assert not cold.hit and cold.key
    want = reference(saved_model, "serving_default", x=x)
    assert_outputs_equal(cold(x=x), want)
    assert set(cold.inputs) == {"x"} and set(cold.outputs) == {"y", "total"}

    warm = graphcache.load_saved_model(saved_model, cache=cache)
    assert warm.hit and warm.key == cold.key and warm.alias_key == cold.alias_key
    assert_outputs_equal(warm(x=x), want)
    assert_outputs_equal(warm({"x": tf.constant(x)}), want)  # a mapping, and tensors, work too

    # a two-input signature
    a, b = x_input(1), np.random.RandomState(2).rand(3, 3).astype(np.float32)
    scaled = graphcache.load_saved_model(saved_model, "scaled", cache=cache)
    assert_outputs_equal(scaled(a=a, b=b), reference(saved_model, "scaled", a=a, b=b))

    kinds = {row.key: row.kind for row in cache.entries()}
    assert kinds[cold.key] == "graph" and kinds[cold.alias_key] == ALIAS_KIND
    header, alias = read_alias(cache, cold.alias_key)
    assert alias.target == cold.key and header.extra["target"] == cold.key
    assert header.name == f"saved_model:{saved_model.name}:serving_default"
    assert cache.stats().hits >= 1

    with pytest.raises(TypeError, match="missing x"):
        warm(y=x)
    with pytest.raises(SavedModelError, match="serving_default, scaled|scaled, serving_default"):
        graphcache.load_saved_model(saved_model, "nope", cache=cache)
    with pytest.raises(SavedModelError, match="not a SavedModel"):
        graphcache.load_saved_model(saved_model / "variables", cache=cache)
    for fn in (cold, warm, scaled):
        fn.close()


HIT_CHILD = """
import json
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants
from tensorflow.python.saved_model import load as sm_load, loader_impl

called = []
def forbidden(name):
    def fail(*args, **kwargs):
        called.append(name)
        raise AssertionError(name + " was called on a hit")
    return fail

# every way to load a SavedModel or freeze a function raises
tf.saved_model.load = forbidden("tf.saved_model.load")
sm_load.load = forbidden("load.load")
sm_load.load_partial = forbidden("load.load_partial")
sm_load.Loader.__init__ = forbidden("load.Loader")
loader_impl.SavedModelLoader.__init__ = forbidden("loader_impl.SavedModelLoader")
tf.compat.v1.saved_model.load = forbidden("tf.compat.v1.saved_model.load")
convert_to_constants.convert_variables_to_constants_v2 = forbidden("convert_variables_to_constants")

import graphcache
from graphcache.share import saved_model
saved_model.load_model = forbidden("graphcache.share.saved_model.load_model")
saved_model.freeze_signature = forbidden("graphcache.share.saved_model.freeze_signature")

cache = graphcache.GraphCache(CACHE_DIR)
fn = graphcache.load_saved_model(MODEL, cache=cache)
out = fn(x=np.load(X_PATH))
print(json.dumps({"hit": fn.hit, "key": fn.key, "called": called,
                  "out": {k: v.tolist() for k, v in out.items()}, "hits": cache.stats().hits}))
"""


def _hit_in_fresh_process(saved_model: Path, cache_dir: Path, x: np.ndarray) -> dict:
    """A fresh process that loads ``saved_model`` through ``cache_dir`` where every SavedModel load or
    freeze raises; its result (hit, key, what it called, outputs, hits counted)."""
    x_path = cache_dir.parent / "x.npy"
    np.save(x_path, x)
    return run_python(f"CACHE_DIR, MODEL, X_PATH = {str(cache_dir)!r}, {str(saved_model)!r}, {str(x_path)!r}\n"
                      + HIT_CHILD)


def test_a_hit_in_a_fresh_process_never_loads_the_saved_model(saved_model, cache_dir):
    x = x_input(3)
    cold = graphcache.load_saved_model(saved_model, cache=GraphCache(cache_dir))
    assert not cold.hit
    assert cold.wait()  # a miss builds the entry in the background (after the first call, or when asked)
    want = reference(saved_model, "serving_default", x=x)
    result = _hit_in_fresh_process(saved_model, cache_dir, x)
    assert result["called"] == [] and result["hit"] is True and result["key"] == cold.key
    assert result["hits"] == 1
    assert_outputs_equal({k: np.asarray(v, np.float32) for k, v in result["out"].items()}, want)


MISS_CHILD = """
import json, threading, time
import numpy as np
import graphcache
from graphcache.share import saved_model

events = []  # (what, seconds since start, thread)
start = time.perf_counter()
def note(what):
    events.append((what, time.perf_counter() - start, threading.current_thread().name))
real_freeze, real_compile = saved_model.freeze_signature, graphcache.GraphCache.compile
def freeze(*args, **kwargs):
    note("freeze")
    return real_freeze(*args, **kwargs)
def compile(self, *args, **kwargs):
    note("compile")
    return real_compile(self, *args, **kwargs)
real_signature = saved_model.signature_function
class Noted:  # the loaded signature function, noting when it answered
    def __init__(self, function):
        self.function = function
    def __call__(self, **inputs):
        result = self.function(**inputs)
        note("tensorflow answered")
        return result
    def __getattr__(self, name):
        return getattr(self.function, name)
def signature(*args, **kwargs):
    return Noted(real_signature(*args, **kwargs))
saved_model.freeze_signature = freeze
graphcache.GraphCache.compile = compile
saved_model.signature_function = signature

fn = graphcache.load_saved_model(MODEL, cache=graphcache.GraphCache(CACHE_DIR))
note("loaded")
out = fn(x=np.load(X_PATH)) if CALL else None
note("answered")
before = list(events)
print(json.dumps({"hit": fn.hit, "events": before, "out": None if out is None else {k: v.tolist() for k, v in out.items()}}))
# the process ends here: the exit drain builds (if the call did not start it) and waits for the entry
"""


@pytest.mark.parametrize("call", [True, False])
def test_a_miss_answers_like_tensorflow_and_builds_for_the_next_process(tmp_path, call):
    """A first-ever process answers from TensorFlow's loaded SavedModel (nothing frozen or compiled before
    its first answer), builds the entry off that path, and its exit waits for the build: the next process
    hits without loading the SavedModel. A process that never calls leaves the entry behind too."""
    model = build_saved_model(tmp_path / "model")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    x = x_input(7)
    np.save(tmp_path / "x.npy", x)
    want = reference(model, "serving_default", x=x)
    first = run_python(f"CACHE_DIR, MODEL, X_PATH, CALL = {str(cache_dir)!r}, {str(model)!r}, "
                       f"{str(tmp_path / 'x.npy')!r}, {call}\n" + MISS_CHILD)
    assert first["hit"] is False
    events = first["events"]
    main = [what for what, _, thread in events if thread == "MainThread"]
    assert main == (["loaded", "tensorflow answered", "answered"] if call else ["loaded", "answered"])
    answered = next(at for what, at, _ in events if what == ("tensorflow answered" if call else "answered"))
    assert all(at >= answered for what, at, _ in events if what in ("freeze", "compile"))  # built after it
    if call:
        assert_outputs_equal({k: np.asarray(v, np.float32) for k, v in first["out"].items()}, want)
    second = _hit_in_fresh_process(model, cache_dir, x)
    assert second["hit"] is True and second["called"] == [] and second["hits"] == 1
    assert_outputs_equal({k: np.asarray(v, np.float32) for k, v in second["out"].items()}, want)
    stats = GraphCache(cache_dir).stats()
    assert stats.compiles == 1 and stats.entries == 2  # the graph and its alias


def test_a_second_load_in_the_process_waits_for_the_build(tmp_path, cache):
    """In one process a SavedModel is loaded once: a second load of the same files waits for the pending
    build and hits (deferred.py's single flight), it does not load the SavedModel again."""
    from graphcache.share import saved_model as sm

    model = build_saved_model(tmp_path / "model")
    x = x_input(8)
    first = graphcache.load_saved_model(model, cache=cache)
    first(x=x)  # starts the build
    loads = []
    real = sm.load_model
    sm.load_model = lambda path: loads.append(path) or real(path)
    try:
        second = graphcache.load_saved_model(model, cache=cache)
    finally:
        sm.load_model = real
    assert second.hit and loads == [] and second.key == first.key
    assert_outputs_equal(second(x=x), first(x=x))


def test_a_changed_variables_file_misses(tmp_path, cache):
    model = build_saved_model(tmp_path / "model", scale=1.0)
    other = build_saved_model(tmp_path / "other", scale=2.0)
    x = x_input(4)
    first = graphcache.load_saved_model(model, cache=cache)
    assert graphcache.load_saved_model(model, cache=cache).hit
    for name in ("variables.data-00000-of-00001", "variables.index"):  # new weights, same saved_model.pb
        shutil.copyfile(other / "variables" / name, model / "variables" / name)
    changed = graphcache.load_saved_model(model, cache=cache)
    assert not changed.hit and changed.alias_key != first.alias_key and changed.key != first.key
    assert_outputs_equal(changed(x=x), reference(model, "serving_default", x=x))
    assert not np.allclose(changed(x=x)["y"], first(x=x)["y"])
    assert graphcache.load_saved_model(model, cache=cache).hit


def test_a_dangling_or_corrupt_alias_is_a_miss_that_rebuilds(tmp_path, cache):
    model = build_saved_model(tmp_path / "model")
    x = x_input(5)
    want = reference(model, "serving_default", x=x)
    first = graphcache.load_saved_model(model, cache=cache)
    CacheDir(cache.cache_dir).purge([first.key])  # the graph goes, the alias stays: dangling
    assert cache.store.stat(first.alias_key) is not None and cache.store.stat(first.key) is None
    rebuilt = graphcache.load_saved_model(model, cache=cache)
    assert not rebuilt.hit
    assert_outputs_equal(rebuilt(x=x), want)
    assert graphcache.load_saved_model(model, cache=cache).hit

    # an alias whose payload is not an alias: removed, rebuilt
    key, parts = alias_key(cache, model, "serving_default")
    header = codec.EntryHeader(key=key, version=cache.version, identity=cache.identity, kind=ALIAS_KIND,
                               key_parts=parts)
    assert cache.write_entry(header, json.dumps({"format": 1, "target": "nonsense"}).encode())
    with pytest.warns(graphcache.GraphCacheWarning, match="corrupt"):
        again = graphcache.load_saved_model(model, cache=cache)
    assert not again.hit
    assert_outputs_equal(again(x=x), want)
    assert graphcache.load_saved_model(model, cache=cache).hit


def test_keras_saved_model(tmp_path, cache):
    import keras

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6,), name="features"), keras.layers.Dense(5, activation="relu"),
                              keras.layers.Dense(2, name="logits")])
    serve = tf.function(lambda features: {"logits": model(features, training=False)})
    path = tmp_path / "keras"
    tf.saved_model.save(model, str(path), signatures={
        "serving_default": serve.get_concrete_function(
            tf.TensorSpec([None, 6], tf.float32, name="features"))})
    x = np.random.RandomState(6).rand(2, 6).astype(np.float32)
    want = reference(path, "serving_default", features=x)
    assert_outputs_equal(graphcache.load_saved_model(path, cache=cache)(features=x), want)
    hit = graphcache.load_saved_model(path, cache=cache)
    assert hit.hit
    assert_outputs_equal(hit(features=x), want)



def test_poisoned_target_is_checked_against_saved_model_pb(saved_model, cache_dir):
    """The hit path never builds the source graph: the compiled graph is checked against the op types
    in saved_model.pb, so a graph entry rewritten to write files is refused and rebuilt."""
    from tensorflow.core.framework import graph_pb2

    from graphcache.core import failures
    from graphcache.share.saved_model import saved_model_ops

    from .test_trust import _add_write_file

    cache = GraphCache(cache_dir)
    x = np.ones((2, 4), np.float32)
    first = graphcache.load_saved_model(saved_model, cache=cache)
    want = first(x=x)
    target = first.key  # the compiled graph's entry, which the alias points at
    assert "WriteFile" not in saved_model_ops(saved_model)
    path = cache.store.path_for(target)
    header, payload = codec.decode(path.read_bytes(), target)
    graph_def = graph_pb2.GraphDef.FromString(payload)
    _add_write_file(graph_def)
    path.write_bytes(codec.encode(header, graph_def.SerializeToString()))
    failures.reset_warnings()
    with pytest.warns(graphcache.GraphCacheWarning, match="WriteFile"):
        again = graphcache.load_saved_model(saved_model, cache=cache)
    assert not again.hit
    assert_outputs_equal(again(x=x), want)
    assert cache.stats().uncacheable["untrusted_entry"] == 1
