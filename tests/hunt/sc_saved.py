"""Traces made inside ``tf.saved_model.save`` (graphcache/traces/savecontext.py, kerasserve.py): the export traces
every ``input_signature``'d ``tf.function`` of a tf.Module and Keras' ``serving_default`` of a model. Each program
saves, loads the SavedModel back and reports what its signature returns: a stale trace would be written into the
SavedModel. What changes: a global the module's method reads, an attribute of the module, a Keras layer's
activation. The save's variable policy, the one save option tracing reads, gives the same values under every
policy on CPU (the plain runs could not tell variants apart): tests/test_traces_saved.py checks that it misses."""

from __future__ import annotations

from .model import MUST_HIT, SAVED_MODEL, Scenario, Variant

MODULE = '''
import tempfile
import numpy as np
import tensorflow as tf

SCALE = @SCALE@


class Module(tf.Module):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset
        self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 7.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w)) * SCALE + self.offset

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def serve(self, x):
        return {"y": self(x), "total": tf.reduce_sum(x, axis=1)}


module = Module(@OFFSET@)
options = tf.saved_model.SaveOptions(@OPTIONS@)
with tempfile.TemporaryDirectory() as where:
    tf.saved_model.save(module, where, signatures={"serving_default": module.serve}, options=options)
    served = tf.saved_model.load(where).signatures["serving_default"](x=tf.reshape(tf.range(8.0), [2, 4]))
report(np.concatenate([served["y"].numpy().ravel(), served["total"].numpy()]))
'''
BASE = {"@SCALE@": "2.0", "@OFFSET@": "0.5", "@OPTIONS@": ""}

KERAS = '''
import tempfile
import numpy as np
import keras
import tensorflow as tf

keras.utils.set_random_seed(0)
inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(3, activation="@V@", kernel_initializer="ones")(inputs - 1.0))
with tempfile.TemporaryDirectory() as where:
    tf.saved_model.save(model, where)
    served = tf.saved_model.load(where).signatures["serving_default"](tf.reshape(tf.range(8.0), [2, 4]))
report(next(iter(served.values())))
'''


def _module(**changed: str) -> Variant:
    return Variant(tokens={**BASE, **changed})


SCENARIOS = [
    Scenario("saved_module_global", SAVED_MODEL, program=MODULE, a=_module(), b=_module(**{"@SCALE@": "3.0"}),
             why="a module global the exported __call__ reads (traced inside serve's trace, or at the save's top)"),
    Scenario("saved_module_attribute", SAVED_MODEL, program=MODULE, a=_module(), b=_module(**{"@OFFSET@": "-1.5"}),
             why="an attribute of the saved tf.Module (self.offset) its exported methods read"),
    Scenario("saved_keras_activation", SAVED_MODEL, program=KERAS, a=Variant("relu"), b=Variant("tanh"),
             why="a layer's activation in a Keras model exported by tf.saved_model.save (Keras' serving_default)"),
]

MUST_HIT_SAVED = [
    Scenario("hit_saved_module", MUST_HIT, program=MODULE, a=_module(), b=_module(),
             why="an unchanged tf.Module saved again: its exported traces hit"),
    Scenario("hit_saved_keras", MUST_HIT, program=KERAS, a=Variant("relu"), b=Variant("relu"),
             why="an unchanged Keras model saved again: its serving_default hits"),
    Scenario("hit_saved_with_aliases", MUST_HIT, program=MODULE,
             a=_module(**{"@OPTIONS@": 'function_aliases={"serve_alias": module.serve}'}),
             b=_module(**{"@OPTIONS@": 'function_aliases={"serve_alias": module.serve}'}),
             why="a save with function_aliases (read after tracing only): its exported traces hit"),
]
