"""Keras models the trace key used to refuse (issue #42 [breadth]): now keyed, never stale.

Fresh processes (tests.helpers.run_python) with ``GRAPHCACHE_TRACE_VERIFY=1`` (each hit traced anyway and compared):

- TensorFlow's Transformer tutorial's shape: subclassed layers and a subclassed model whose ``get_config()`` fails,
  an optimizer on a ``LearningRateSchedule`` subclass without one (traces/modelstate.py: keyed by their state);
- a model whose first layer is ``TextVectorization``, one starting with an adapted ``IntegerLookup`` (their
  vocabulary, a lookup table, keyed by content and bound by path: traces/preprocessing.py), one with an adapted
  ``Normalization`` (its mean and variance);
- keras.io's VAE (a custom ``train_step``, no ``call()``): Keras' symbolic build cannot call it, so nothing is built
  before its trace (plain Keras builds nothing either): its one trace builds the optimizer (``creates_variables``:
  not stored), and what it built is (building.py); a second process builds the optimizer first, as the trace did,
  and stores the trace; a third hits it;
- a custom ``train_step`` that trains a subset of the variables and updates a metric held in a module global
  (keras.io's "lower-level" shape): its optimizer is not built before the trace either (Keras' build would give it
  slots for every variable), and is learned as the VAE's; the optimizer's variables are plain's.

A cold process stores fit, evaluate and predict of each, a warm one hits every one of them, and both give plain
TensorFlow's results bitwise (losses, metrics, predictions and weights as float64 of their float32 values). A
variant changing what each model reads that the old key had no way to see (the vocabulary's content, the order of
the same words, the schedule's constant, a sub-layer count, the normalization data) misses each and gives plain's
results for that variant. Key checks run in this process.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from .helpers import run_python, trace_child_preamble

BASE = {"texts": 8, "order": "a a b", "warmup": 4000, "layers": 2, "scale": 1.0, "ints": 6, "vae": True}
CHANGED = {"texts": 5, "order": "a b b", "warmup": 50, "layers": 1, "scale": 3.0, "ints": 4, "vae": True}

CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf
import keras

V = {variant!r}
{capture}keras.utils.set_random_seed(0)
out = {{}}


def floats(values):
    return [np.asarray(v, dtype=np.float64).ravel().tolist() for v in values]


def run(name, model, train, evaluate_data, predict_data, **fit):
    history = model.fit(train, verbose=0, **fit)
    out[name] = {{"history": {{k: floats(v) for k, v in sorted(history.history.items())}},
                 "evaluate": floats([model.evaluate(evaluate_data, verbose=0)]),
                 "predict": floats([model.predict(predict_data, verbose=0)]),
                 "weights": floats([v.numpy() for v in model.weights]),
                 "optimizer": floats([v.numpy() for v in model.optimizer.variables])}}


class PositionalEmbedding(keras.layers.Layer):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = keras.layers.Embedding(vocab_size, d_model)
        self.pos_encoding = tf.cast(np.sin(np.arange(8 * d_model).reshape(8, d_model) / 7.0), tf.float32)

    def call(self, x):
        x = self.embedding(x) * tf.math.sqrt(tf.cast(self.d_model, tf.float32))
        return x + self.pos_encoding[tf.newaxis, :tf.shape(x)[1], :]


class EncoderLayer(keras.layers.Layer):
    def __init__(self, *, d_model, num_heads, dff):
        super().__init__()
        self.mha = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=d_model)
        self.ffn = keras.Sequential([keras.layers.Dense(dff, activation="relu"), keras.layers.Dense(d_model)])
        self.norm1 = keras.layers.LayerNormalization()
        self.norm2 = keras.layers.LayerNormalization()

    def call(self, x):
        x = self.norm1(x + self.mha(query=x, value=x, key=x))
        return self.norm2(x + self.ffn(x))


class Transformer(keras.Model):
    def __init__(self, *, num_layers, d_model, num_heads, dff, vocab_size):
        super().__init__()
        self.pos_embedding = PositionalEmbedding(vocab_size, d_model)
        self.enc_layers = [EncoderLayer(d_model=d_model, num_heads=num_heads, dff=dff) for _ in range(num_layers)]
        self.final_layer = keras.layers.Dense(vocab_size)

    def call(self, x):
        x = self.pos_embedding(x)
        for layer in self.enc_layers:
            x = layer(x)
        return self.final_layer(x)


class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, d_model, warmup_steps=4000):
        super().__init__()
        self.d_model = tf.cast(d_model, tf.float32)
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.cast(step, dtype=tf.float32)
        return tf.math.rsqrt(self.d_model) * tf.math.minimum(tf.math.rsqrt(step), step * (self.warmup_steps ** -1.5))


def masked_loss(label, pred):
    mask = tf.cast(label != 0, tf.float32)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")(label, pred) * mask
    return tf.reduce_sum(loss) / tf.reduce_sum(mask)


tokens = np.random.default_rng(0).integers(1, 12, (16, 6))
transformer = Transformer(num_layers=V["layers"], d_model=8, num_heads=2, dff=16, vocab_size=12)
transformer(tokens[:2])
transformer.compile(loss=masked_loss, optimizer=keras.optimizers.Adam(CustomSchedule(8, V["warmup"]), beta_2=0.98))
pairs = tf.data.Dataset.from_tensor_slices((tokens, np.roll(tokens, 1, axis=1))).batch(8)
run("transformer", transformer, pairs, pairs, tokens, epochs=2)

texts = tf.constant(["the cat sat", "a dog ran far", "the bird flew", "cats and dogs", "a big red dog", "the end",
                     "birds sing", "dogs bark loud"] * 2)
labels = tf.constant([0, 1, 0, 1, 1, 0, 0, 1] * 2)
vectorize = keras.layers.TextVectorization(max_tokens=24, output_sequence_length=5)
vectorize.adapt(tf.concat([texts[:V["texts"]], tf.constant([V["order"]])], 0))
text_model = keras.Sequential([keras.Input((1,), dtype="string"), vectorize, keras.layers.Embedding(25, 4),
                               keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
text_model.compile(optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                   metrics=["accuracy"])
text_data = tf.data.Dataset.from_tensor_slices((texts[:, None], labels)).batch(8)
run("text", text_model, text_data, text_data, texts[:, None])

numbers = np.array([[3], [5], [7], [3], [9], [5], [11], [3]] * 2)
lookup = keras.layers.IntegerLookup()
lookup.adapt(numbers[:V["ints"]])
int_model = keras.Sequential([keras.Input((1,), dtype="int64"), lookup, keras.layers.Embedding(8, 3),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
int_model.compile(optimizer="adam", loss="mse")
int_data = tf.data.Dataset.from_tensor_slices((numbers, np.arange(16, dtype="float32"))).batch(8)
run("integer_lookup", int_model, int_data, int_data, numbers)

values = np.linspace(-2, 5, 64, dtype=np.float32).reshape(16, 4)
norm = keras.layers.Normalization()
norm.adapt(values * V["scale"])
norm_model = keras.Sequential([keras.Input((4,)), norm, keras.layers.Dense(3)])
norm_model.compile(optimizer="sgd", loss="mse")
norm_data = tf.data.Dataset.from_tensor_slices((values, np.ones((16, 3), np.float32))).batch(8)
run("normalization", norm_model, norm_data, norm_data, values)


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z = self.encoder(data)
            loss = tf.reduce_mean(tf.square(self.decoder(z) - data))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(loss)
        return {{"loss": self.total_loss_tracker.result()}}


if V["vae"]:
    vae = VAE(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]),
              keras.Sequential([keras.Input((2,)), keras.layers.Dense(4)]))
    vae.compile(optimizer=keras.optimizers.Adam())
    out["vae"] = {{"loss": floats(vae.fit(values, epochs=2, batch_size=8, verbose=0).history["loss"]),
                  "weights": floats([v.numpy() for v in vae.weights]),
                  "optimizer": floats([v.numpy() for v in vae.optimizer.variables]),
                  "names": [(v.path, v.value.name) for v in vae.optimizer.variables],
                  "called": [layer._called for layer in vae._flatten_layers()]}}

loss_tracker = keras.metrics.Mean(name="tracked")  # keras.io's "lower-level" example holds its trackers in globals


class Partial(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        head = self.layers[-1].trainable_variables  # a subset: plain Keras' optimizer gets slots for these only
        self.optimizer.apply_gradients(zip(tape.gradient(loss, head), head))
        loss_tracker.update_state(loss)
        return {{"tracked": loss_tracker.result()}}


inputs = keras.Input((4,))
partial = Partial(inputs, keras.layers.Dense(1)(keras.layers.Dense(3)(inputs)))
partial.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
out["partial"] = {{"loss": floats(partial.fit(values, values[:, :1], epochs=2, batch_size=8, verbose=0).history["tracked"]),
                  "weights": floats([v.numpy() for v in partial.weights]),
                  "optimizer": [(v.path, v.value.name) for v in partial.optimizer.variables]}}

if {use_cache}:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(traces=stats.traces, reasons=stats.trace_reasons)
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
print(json.dumps(out))
'''
MODELS = ("transformer", "text", "integer_lookup", "normalization", "vae", "partial")
STEPS = 3 * 4  # fit, evaluate and predict of the four models now keyed
LEARNED = 2  # the VAE's and Partial's train steps: the optimizer built in their trace, learned (building.py)
VERIFIED = "verified against a fresh trace"


def child(cache_dir, variant: dict) -> dict:
    code = CHILD.format(variant=variant, capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None)
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1"}, timeout=600)


def results(out: dict) -> dict:
    return {name: out[name] for name in MODELS}


def test_refused_models_hit_in_a_later_process_with_plain_results(cache_dir):
    with ThreadPoolExecutor(2) as pool:  # a plain child never touches the cache
        running = [pool.submit(child, None, BASE), pool.submit(child, cache_dir, BASE)]
        plain, cold = (future.result() for future in running)
    assert results(cold) == results(plain) and not cold["errors"] and not cold["warnings"], cold["log"]
    assert cold["traces"]["trace_misses"] == STEPS, cold["log"]
    # The VAE and Partial: their only trace builds the optimizer (refused, counted); that build is stored.
    assert cold["reasons"].get("creates_variables") == LEARNED and "keras" not in cold["reasons"], cold["log"]
    assert cold["traces"]["trace_hits"] == 0 and not plain["vae"]["called"][0], "no call(): the VAE is never called"
    assert len(plain["partial"]["optimizer"]) == 2 + 2 * 2, "Adam's slots for the head's kernel and bias only"

    warm = child(cache_dir, BASE)  # verified: every hit traced anyway and compared
    assert not warm["errors"] and not warm["warnings"], warm["log"]
    assert results(warm) == results(plain), "a hit gives plain TensorFlow's results, bitwise"
    assert warm["traces"]["trace_hits"] == STEPS and sum(VERIFIED in m for m in warm["log"]) == STEPS, warm["log"]
    assert sum("before its first trace" in m for m in warm["log"]) == LEARNED, warm["log"]  # built, then stored
    assert warm["traces"]["trace_misses"] == STEPS + LEARNED and warm["reasons"].get("creates_variables") == LEARNED

    third = child(cache_dir, BASE)
    assert results(third) == results(plain) and not third["errors"], third["log"]
    assert third["traces"]["trace_hits"] == 2 * STEPS + LEARNED, third["log"]  # the cache's counters: all processes


@pytest.mark.slow
def test_what_the_old_key_could_not_see_changed_misses_with_plain_results(cache_dir):
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(child, None, CHANGED), pool.submit(child, cache_dir, BASE)]
        plain, _ = (future.result() for future in running)
    changed = child(cache_dir, CHANGED)
    assert results(changed) == results(plain) and not changed["errors"], changed["log"]
    # Each of the 12 misses. The VAE and Partial, unchanged, are named otherwise here (Keras numbers auto-named layers
    # process-wide, and one encoder layer fewer came first): other keys, their first trace again (refused).
    assert changed["traces"]["trace_hits"] == 0 and changed["traces"]["trace_misses"] == 2 * STEPS, changed["log"]


# -- keys, in this process -------------------------------------------------------------------------------------
STEP = '''
import tensorflow as tf

@tf.function
def step(x):
    return model(x)
'''


def _walk(model):
    from graphcache.traces import keying

    namespace = {"__name__": "refused_user", "model": model}  # a module of user code (exec's default is trusted)
    exec(STEP, namespace)  # noqa: S102 - the test's own program
    return keying.walk_root(namespace["step"].python_function)


def _text_model(adapted: list[str]):
    import keras
    import tensorflow as tf

    keras.backend.clear_session()  # Keras names objects process-wide (string_lookup_1): each model as the first one
    vectorize = keras.layers.TextVectorization(max_tokens=10, output_sequence_length=3, name="vec")
    vectorize.adapt(tf.constant(adapted))
    return keras.Sequential([keras.Input((1,), dtype="string", name="t"), vectorize,
                             keras.layers.Embedding(11, 2, name="e")], name="m")


def test_a_vocabulary_is_keyed_by_content_and_order_and_its_table_bound_by_path():
    base = _walk(_text_model(["a a b c"]))
    assert _walk(_text_model(["a a b c"])).digest() == base.digest(), "the same vocabulary: the same key"
    assert _walk(_text_model(["a a b d"])).digest() != base.digest(), "another word"
    assert _walk(_text_model(["a b b c"])).digest() != base.digest(), "the same words, other indices"
    tables = [path for path, bound in base.bindings.items() if getattr(bound, "dtype", None) is not None
              and bound.dtype.name == "resource"]
    assert any(path.endswith(".lookup_table") for path in tables), base.bindings.keys()


def test_a_lookup_table_s_content_hashes_alike_in_any_export_order():
    import numpy as np

    from graphcache.traces.preprocessing import content_digest

    keys, values = np.array([b"b", b"a", b"c"], dtype=object), np.array([2, 1, 3])
    same = content_digest(keys[[2, 0, 1]], values[[2, 0, 1]])
    assert content_digest(keys, values) == same
    assert content_digest(keys, np.array([1, 2, 3])) != same
    assert content_digest(np.array([5, 3]), np.array([1, 2])) == content_digest(np.array([3, 5]), np.array([2, 1]))


NO_CONFIG = '''
import keras
import numpy as np


class Scaled(keras.layers.Layer):
    """get_config() fails: the constructor takes an array (not serializable)."""

    def __init__(self, table, extra):
        super().__init__(name="scaled")
        self.table = table
        self.extra = extra
        self.inner = keras.layers.Dense(2, name="inner")

    def call(self, x):
        return self.inner(x) * self.table[0]


class Schedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, warmup):
        self.warmup = warmup

    def __call__(self, step):
        return 0.1 / (1.0 + step / self.warmup)
'''


def _no_config(table: float = 2.0, extra: object = 1.0):
    import keras
    import numpy as np

    keras.backend.clear_session()
    scope = {"__name__": "refused_user"}
    exec(NO_CONFIG, scope)  # noqa: S102 - the test's own program
    layer = scope["Scaled"](np.array([table], np.float32), extra)
    layer(np.zeros((1, 3), np.float32))
    return layer, scope


def test_a_user_layer_without_config_is_keyed_by_its_state():
    import pytest

    from graphcache.traces.walk import Uncacheable

    layer, _ = _no_config()
    with pytest.raises(NotImplementedError):
        layer.get_config()
    base = _walk(layer).digest()
    assert _walk(_no_config()[0]).digest() == base
    assert _walk(_no_config(table=3.0)[0]).digest() != base, "an array it holds"
    assert _walk(_no_config(extra=2.0)[0]).digest() != base, "an attribute no method of it reads"
    with pytest.raises(Uncacheable) as caught:  # an object of a kind the state walk does not know
        _walk(_no_config(extra=object())[0])
    assert caught.value.reason == "keras" and ".extra" in caught.value.detail
    dense = _no_config()[0].inner

    def fails():
        raise RuntimeError("no config")

    dense.get_config = fails  # a Keras class whose config fails: refused as before (its config is its definition)
    with pytest.raises(Uncacheable) as caught:
        _walk(dense)
    assert caught.value.reason == "keras" and "get_config() fails (RuntimeError: no config)" in caught.value.detail


def test_a_schedule_without_config_is_keyed_by_its_state_and_its_optimizer_untouched():
    import keras

    from graphcache.traces import kerasstep, modelstate
    from graphcache.traces.walk import Walk

    def key(warmup: float) -> str:
        _, scope = _no_config()
        optimizer = keras.optimizers.SGD(scope["Schedule"](warmup), momentum=0.5, name="sgd")
        walk = Walk()
        kerasstep.keras_object(walk, optimizer, "optimizer0", {})
        kerasstep.keras_object(walk, optimizer._learning_rate, "optimizer0/learning_rate", {})
        assert isinstance(optimizer._learning_rate, scope["Schedule"]), "the optimizer itself is not changed"
        return walk.digest()

    assert key(10.0) == key(10.0)
    assert key(10.0) != key(20.0), "the schedule's constant"
    _, scope = _no_config()
    config = modelstate.optimizer_config(keras.optimizers.SGD(scope["Schedule"](1.0), momentum=0.5), "o",
                                         NotImplementedError())
    assert config["momentum"] == 0.5 and "keyed by its state" in config["learning_rate"]
