"""The functions cache under a distribution strategy: ``MirroredStrategy`` over two logical CPU devices.

A replicated step is a multi-device function. Its optimized graph may lack the ``_Arg`` of an input it does not
read any more (the step's iterator, whose replicas' batches arrive as other arguments), as TensorFlow's own does;
such a graph is stored and served. What the trace cache cannot cover (a Keras step under a strategy) is refused
with a counted reason, never silently.
"""

from __future__ import annotations

from .helpers import run_python

MIRRORED_FIT = '''
import json, logging, sys
import numpy as np
import tensorflow as tf
import keras
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import graphcache
keras.utils.set_random_seed(0)
cache_dir = {cache_dir!r}
cache = graphcache.install(cache_dir=cache_dir, traces=True) if cache_dir else None
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x = np.random.RandomState(0).rand(32, 4).astype("float32")
history = model.fit(x, x.sum(1, keepdims=True), epochs=2, batch_size=8, verbose=0, shuffle=False)
out = {{"loss": history.history["loss"], "pred": model.predict(x[:4], verbose=0).ravel().tolist()}}
if cache is not None:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(functions=stats.functions, function_reasons=stats.function_reasons, trace_reasons=stats.trace_reasons)
print(json.dumps(out))
'''


def test_mirrored_strategy_fit_hits_the_functions_cache_in_a_later_process(cache_dir):
    plain = run_python(MIRRORED_FIT.format(cache_dir=""))
    cold = run_python(MIRRORED_FIT.format(cache_dir=str(cache_dir)))
    warm = run_python(MIRRORED_FIT.format(cache_dir=str(cache_dir)))
    for run in (cold, warm):
        assert (run["loss"], run["pred"]) == (plain["loss"], plain["pred"])
    assert cold["functions"]["function_compiles"] >= 2 and "signature" not in cold["function_reasons"]
    assert warm["functions"]["function_hits"] - cold["functions"]["function_hits"] >= 2  # the replicated steps
    assert warm["trace_reasons"].get("keras", 0) >= 2  # Keras' steps under a strategy: refused, and counted
