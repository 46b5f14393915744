"""Keys across process histories: the same model must get the same key whatever the process did before.

Every ``keras.applications`` model that builds here with ``weights=None`` is frozen (tf.function +
convert_variables_to_constants_v2, as benchmarks.models.freeze_keras does) in child processes with
different histories, and each model's key must be the same in all of them:

- ``fresh``: a new process that builds only that model;
- ``after_models``: two other Keras models (models.freeze_keras "mlp" and "cnn") built and frozen first;
- ``after_functions``: unrelated tf.functions with loops and conds traced first (helpers.NOISY_HISTORY);
- ``trace_order``: models built four at a time, then traced and frozen in the reverse order.

Each batch child builds several models in turn, so every model after the first also has the earlier
ones as history. The default run sweeps a few cheap models; ``GRAPHCACHE_SLOW_TESTS=1`` sweeps all.
Also here: a hit found under such a key serves the differently named requester correctly.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

import graphcache
from benchmarks import models

from .helpers import NOISY_HISTORY, record, run_python

APPLICATIONS = sorted(name for name in dir(keras.applications) if name[:1].isupper())
# Cheap, and together they carry each kind of history noise the sweep found: Keras's process-wide
# layer counters (both), tf.custom_gradient's _gradient_op_type counter (EfficientNet's swish) and
# library functions with counters in their names (ConvNeXt's LayerScale/GELU functions).
DEFAULT_MODELS = ("MobileNetV3Small", "EfficientNetB0", "ConvNeXtTiny")
HISTORIES = ("fresh", "after_models", "after_functions", "trace_order")
TRACE_ORDER_CHUNK = 4  # trace_order holds this many built models at once (memory)

CHILD = '''
import gc, json, xxhash
import keras, tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

import graphcache
from benchmarks import models

NAMES, HISTORY, CHUNK = {names!r}, {history!r}, {chunk!r}


def build(name):
    keras.utils.set_random_seed(1234)  # the same weights in every process
    return getattr(keras.applications, name)(weights=None)


def freeze_and_key(model):
    shape = (1, *model.input_shape[1:])
    fn = tf.function(lambda x: model(x, training=False))
    spec = tf.TensorSpec(shape, tf.float32, name="input")
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(spec))
    gd = frozen.graph.as_graph_def()
    key = graphcache.fingerprint(gd, [t.name for t in frozen.outputs], [t.name for t in frozen.inputs])
    # what a key over names would see: node and function names, and the custom-gradient counters
    names = [n.name + "|" + (n.attr["_gradient_op_type"].s.decode() if "_gradient_op_type" in n.attr else "")
             for n in gd.node] + [f.signature.name for f in gd.library.function]
    return {{"key": key, "names": xxhash.xxh3_64_hexdigest("\\n".join(sorted(names)).encode())}}


results = {{}}


def attempt(name, step, what):
    try:
        return step()
    except Exception as exc:  # reported per model: a model that does not build is skipped, with this reason
        results[name] = {{what: f"{{type(exc).__name__}}: {{exc}}"[:400]}}


def built(name):
    return attempt(name, lambda: build(name), "build_error")


def keyed(name, model):
    results[name] = attempt(name, lambda: freeze_and_key(model), "error") or results[name]


if HISTORY == "after_models":
    models.freeze_keras("mlp"), models.freeze_keras("cnn")
if HISTORY == "trace_order":
    for start in range(0, len(NAMES), CHUNK):
        chunk = [(name, built(name)) for name in NAMES[start:start + CHUNK]]
        for name, model in reversed(chunk):
            if model is not None:
                keyed(name, model)
        del chunk, model
        gc.collect()
else:
    for name in NAMES:
        model = built(name)
        if model is not None:
            keyed(name, model)
        del model
        gc.collect()
print(json.dumps(results))
'''


def _child(names: list[str], history: str) -> dict:
    code = CHILD.format(names=names, history=history, chunk=TRACE_ORDER_CHUNK)
    if history == "after_functions":
        code = NOISY_HISTORY + code
    try:
        return run_python(code, timeout=7200)
    except (AssertionError, subprocess.TimeoutExpired) as exc:  # one dead child fails its models, not all
        return {name: {"error": f"the child process failed: {str(exc)[-300:]}"} for name in names}


def _batches(names: list[str], size: int) -> list[list[str]]:
    return [names[i:i + size] for i in range(0, len(names), size)]


def sweep(names: list[str], *, workers: int, batch: int) -> dict[str, dict[str, dict]]:
    """model -> history -> {"key", "names"} or {"error"} / {"build_error"}.

    Batch histories run ``batch`` models per child (``batch - 1`` for the reversed order when the
    names span several batches, so the groups differ too): a process keeps part of each model's
    memory, and forty models in one process outgrow a 24 GiB machine.
    """
    reversed_batch = batch - 1 if 1 < batch < len(names) else batch
    jobs = [([name], "fresh") for name in names]
    jobs += [(group, "after_models") for group in _batches(list(names), batch)]
    jobs += [(group, "after_functions") for group in _batches(list(reversed(names)), reversed_batch)]
    jobs += [(group, "trace_order") for group in _batches(list(names), batch)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outputs = list(pool.map(lambda job: (job[1], _child(*job)), jobs))
    results: dict[str, dict[str, dict]] = {name: {} for name in names}
    for history, output in outputs:
        for name, result in output.items():
            results[name][history] = result
    return results


def check(results: dict[str, dict[str, dict]], name: str) -> dict[str, dict]:
    by_history = results[name]
    unbuilt = [r["build_error"] for r in by_history.values() if "build_error" in r]
    if unbuilt:
        pytest.skip(f"{name} does not build here: {unbuilt[0]}")
    failed = {h: r["error"] for h, r in by_history.items() if "error" in r}
    assert not failed, f"{name} built but did not freeze or fingerprint: {failed}"
    assert set(by_history) == set(HISTORIES)
    keys = {history: result["key"] for history, result in by_history.items()}
    assert len(set(keys.values())) == 1, f"{name}: keys differ across histories: {json.dumps(keys)}"
    return by_history


@pytest.fixture(scope="module")
def default_sweep():
    return sweep(list(DEFAULT_MODELS), workers=2, batch=len(DEFAULT_MODELS))  # small: 2 at a time


@pytest.mark.parametrize("name", DEFAULT_MODELS)
def test_keras_application_key_is_the_same_in_every_history(default_sweep, name):
    by_history = check(default_sweep, name)
    # the premise: these histories really changed the graph's names (else the test proves nothing)
    assert len({result["names"] for result in by_history.values()}) > 1


@pytest.fixture(scope="module")
def full_sweep():
    start = time.perf_counter()
    # one child at a time: the largest models (ConvNeXtXLarge: a 1.4 GB graph) take ~10 GB to freeze
    results = sweep(APPLICATIONS, workers=1, batch=5)
    built = [n for n in APPLICATIONS if not any("build_error" in r for r in results[n].values())]
    renamed = [n for n in built if len({r.get("names") for r in results[n].values()}) > 1]
    record("key-stability sweep", f"{len(built)} of {len(APPLICATIONS)} keras.applications models built, "
                                  f"{len(renamed)} of them renamed by history, {len(HISTORIES)} histories, "
                                  f"{time.perf_counter() - start:.0f} s")
    return results


@pytest.mark.slow
@pytest.mark.timeout(6 * 3600)  # the first test runs the whole sweep (its fixture)
@pytest.mark.parametrize("name", APPLICATIONS)
def test_every_keras_application_key_is_the_same_in_every_history(full_sweep, name):
    check(full_sweep, name)


# -- a hit on a differently named twin serves the requester ----------------------------------------------------
def _auto_named_model() -> models.FrozenModel:
    """A Keras model whose layers Keras names (dense_N): each build counts up process-wide."""
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="gelu"),
                              keras.layers.Dense(3)])
    fn = tf.function(lambda x: model(x, training=False))
    spec = tf.TensorSpec((2, 6), tf.float32, name="input")
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(spec))
    return models.FrozenModel("auto", frozen.graph.as_graph_def(), [t.name for t in frozen.inputs],
                              [t.name for t in frozen.outputs], (2, 6))


def test_frozen_model_twin_built_later_hits_and_runs(cache):
    original = _auto_named_model()
    twin = _auto_named_model()  # Keras's counters moved on: sequential_2/dense_3/...
    assert {n.name for n in twin.graph_def.node} != {n.name for n in original.graph_def.node}
    first = cache.compile(original.graph_def, original.fetches, original.feeds)
    second = cache.compile(twin.graph_def, twin.fetches, twin.feeds)
    assert not first.hit and second.hit and second.key == first.key
    x = twin.example_input(3)
    with second.session() as sess:
        got = sess.run(twin.fetches[0], {twin.feeds[0]: x})
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(twin.graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as plain:
        expected = plain.run(twin.fetches[0], {twin.feeds[0]: x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _regression(graph, names):
    v1 = tf.compat.v1
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name=names[0])
        y = v1.placeholder(tf.float32, [None, 1], name=names[1])
        w = v1.get_variable(names[2], initializer=np.full((4, 1), 0.1, np.float32))
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(x), w) - y), name=names[3])
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, name=names[4])
        init = v1.global_variables_initializer()
    return x, y, w, loss, train, init


def _train(session_factory, graph, ops):
    x, y, w, loss, train, init = ops
    rng = np.random.RandomState(0)
    batch = {x: rng.rand(8, 4).astype(np.float32), y: rng.rand(8, 1).astype(np.float32)}
    with session_factory(graph) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(train, batch)
        result = sess.run([loss, w], batch)
        hits = [s.hit for s in getattr(sess, "compiled_signatures", {}).values()]
    return result, hits


def test_tf1_session_on_a_graph_built_after_another_model_hits_and_trains(cache):
    names = ("x", "y", "w", "loss", "train")
    fresh_graph = tf.Graph()
    fresh = _regression(fresh_graph, names)
    _, cold_hits = _train(lambda g: graphcache.Session(graph=g, cache=cache), fresh_graph, fresh)
    later_graph = tf.Graph()
    _regression(later_graph, ("p", "q", "other_w", "other_loss", "other_train"))
    later = _regression(later_graph, names)  # gradients_1/..., GradientDescent_1/..., init_1
    assert later[4].name == "train" and later[5].name != fresh[5].name
    (loss, weight), warm_hits = _train(lambda g: graphcache.Session(graph=g, cache=cache), later_graph, later)
    (plain_loss, plain_weight), _ = _train(lambda g: tf.compat.v1.Session(graph=g), later_graph, later)
    assert cold_hits and not any(cold_hits)
    # init_1 also initializes the other model's variables: another signature, compiled; train and
    # loss are the twin's and hit
    assert warm_hits.count(True) >= 2
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weight, plain_weight, rtol=1e-5, atol=1e-6)
