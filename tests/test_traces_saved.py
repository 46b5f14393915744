"""Traces made inside ``tf.saved_model.save`` (graphcache/traces/savecontext.py, kerasserve.py): cached, never stale.

Fresh processes (tests.helpers.run_python) save a tf.Module (an ``input_signature``'d ``serve`` signature calling
an ``input_signature``'d ``__call__``) and a functional Keras model (Keras' ``serving_default``) with
``tf.saved_model.save``, load both back and call them. A cold process stores the traces the saves make, a warm one
(with ``GRAPHCACHE_TRACE_VERIFY=1``: each hit traced anyway and compared) hits them, and the SavedModels it writes
load and give plain TensorFlow's results bitwise, function aliases included. ``__call__``, traced inside ``serve``'s
trace in the cold process, is stored as its top-level call would be (nested.py), and hit too. A save with another variable policy
(the one option tracing reads: savecontext.py) misses each, with plain's results; a save with other
``function_aliases`` (read after tracing only) hits.
"""

from __future__ import annotations

import pytest

from .helpers import run_python, trace_child_preamble

BASE = {"policy": None, "alias": "serve_alias"}

CHILD = '''
import json, logging, tempfile, warnings
import numpy as np
import tensorflow as tf
import keras

V = {variant!r}
{capture}

class Module(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 7.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w)) - 0.25

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def serve(self, x):
        return {{"y": self(x), "total": tf.reduce_sum(x, axis=1)}}


keras.utils.set_random_seed(0)
inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(2, activation="tanh")(keras.layers.Dense(5)(inputs)))
module = Module()
options = tf.saved_model.SaveOptions(experimental_variable_policy=V["policy"],
                                     function_aliases={{V["alias"]: module.serve}})
x = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
out = {{}}
with tempfile.TemporaryDirectory() as where:
    tf.saved_model.save(module, where + "/module", signatures={{"serving_default": module.serve}}, options=options)
    tf.saved_model.save(model, where + "/keras", options=options)
    loaded = tf.saved_model.load(where + "/module", options=tf.saved_model.LoadOptions(
        experimental_load_function_aliases=True))
    served = loaded.signatures["serving_default"](x=x)
    out["module"] = {{k: np.asarray(v, np.float64).tolist() for k, v in sorted(served.items())}}
    out["module_call"] = np.asarray(loaded(x), np.float64).tolist()
    out["aliases"] = sorted(loaded.function_aliases)
    served = tf.saved_model.load(where + "/keras").signatures["serving_default"](x)
    out["keras"] = {{k: np.asarray(v, np.float64).tolist() for k, v in sorted(served.items())}}
if {use_cache}:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(traces=stats.traces, reasons=stats.trace_reasons)
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
print(json.dumps(out))
'''
RESULTS = ("module", "module_call", "aliases", "keras")
# serve (Module); __call__ (Module), traced inside serve's trace and stored as its top-level call would be
# (nested.py); serving_default of the functional model.
STORED_COLD = {"serve (Module)", "__call__ (Module)", "serving_default (functional)"}
# A verified hit traces serve anyway, and __call__ inside it: the save finds it traced (TensorFlow's own cache).
VERIFIED_HITS = STORED_COLD - {"__call__ (Module)"}
VERIFIED = "verified against a fresh trace"


def child(cache_dir, variant: dict, verify: bool = True) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None)
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1" if verify else "0"}, timeout=600)


def results(out: dict) -> dict:
    return {name: out[name] for name in RESULTS}


def named(log: list[str], what: str) -> set[str]:
    """The functions the log says were ``what`` (``stored``, ``hit``): ``graphcache trace hit NAME key=...``."""
    prefix = f"graphcache trace {what} "
    return {m[len(prefix):].split(" key=")[0] for m in log if m.startswith(prefix)}


def test_traces_of_a_save_hit_in_a_later_save_with_plain_results(cache_dir):
    plain = child(None, BASE)
    assert plain["aliases"] == [BASE["alias"]]
    cold = child(cache_dir, BASE)
    assert results(cold) == results(plain) and not cold["errors"], cold["log"]
    assert named(cold["log"], "stored") == STORED_COLD, cold["log"]
    assert "context" not in cold["reasons"], cold["reasons"]

    warm = child(cache_dir, BASE)  # verified: every hit traced anyway and compared
    assert not warm["errors"], warm["log"]
    assert results(warm) == results(plain), "the SavedModel a hit wrote gives plain's results, bitwise"
    assert named(warm["log"], "hit") == VERIFIED_HITS, warm["log"]
    assert sum(VERIFIED in m for m in warm["log"]) == len(VERIFIED_HITS), warm["log"]

    aliased = child(cache_dir, {**BASE, "alias": "another_alias"}, verify=False)  # not read while tracing: a hit
    assert results(aliased) == {**results(plain), "aliases": ["another_alias"]}, aliased["log"]
    assert named(aliased["log"], "hit") == STORED_COLD and not named(aliased["log"], "stored"), aliased["log"]


@pytest.mark.slow
def test_another_variable_policy_misses_with_plain_results(cache_dir):
    child(cache_dir, BASE)
    variant = {**BASE, "policy": "save_variable_devices"}
    plain = child(None, variant)
    changed = child(cache_dir, variant)
    assert results(changed) == results(plain) and not changed["errors"], changed["log"]
    assert not named(changed["log"], "hit"), changed["log"]
    assert named(changed["log"], "stored") >= STORED_COLD, changed["log"]


def test_the_save_context_is_in_the_key_with_its_variable_policy():
    import tensorflow as tf
    from tensorflow.python.saved_model import save_context

    from graphcache.traces import savecontext

    assert savecontext.described() is None
    described = []
    for policy in (None, "save_variable_devices", "expand_distributed_variables"):
        with save_context.save_context(tf.saved_model.SaveOptions(experimental_variable_policy=policy)):
            described.append(savecontext.described())
    assert described[0] == {"saving": True, "variable_policy": None}
    assert len({repr(d) for d in described}) == 3
