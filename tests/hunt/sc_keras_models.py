"""Keras models the trace key used to refuse (issue #42 [breadth]): TensorFlow's Transformer tutorial's shape
(subclassed layers and model without a working ``get_config()``, a ``LearningRateSchedule`` subclass without one:
traces/modelstate.py keys their state) and preprocessing layers whose state ``adapt`` made (``TextVectorization``'s
and ``IntegerLookup``'s vocabulary, a lookup table keyed by content: traces/preprocessing.py; ``Normalization``'s
mean and variance), and custom ``train_step`` methods in keras.io's shapes (reading ``self.optimizer``,
``self.compiled_loss``, compiled metrics, a metric held in a module global; the VAE without ``call()``): their
optimizer is built in their one trace, as plain Keras does; building.py learns that build, a second process
builds it first and stores the trace, a third hits (so runs 3 and 4 of a scenario store, and hit nothing). Each scenario changes one thing between the variants; where a model is also predicted, both
steps' keys are checked. The must-hit checks run the Transformer and the text model unchanged (a custom train_step
hits from its third process on: its optimizer's build is learned first; tests/test_traces_refused.py checks it)."""

from __future__ import annotations

from .model import LIBRARY_STATE, MUST_HIT, UNWALKED, Scenario, Variant

TRANSFORMER = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)
WARMUP, LAYERS, PERIOD = <WARMUP>, <LAYERS>, <PERIOD>


class PositionalEmbedding(keras.layers.Layer):
    def __init__(self, vocab_size, d_model, period):
        super().__init__()
        self.d_model = d_model
        self.embedding = keras.layers.Embedding(vocab_size, d_model)
        self.pos_encoding = tf.cast(np.sin(np.arange(8 * d_model).reshape(8, d_model) / period), tf.float32)

    def call(self, x):
        x = self.embedding(x) * tf.math.sqrt(tf.cast(self.d_model, tf.float32))
        return x + self.pos_encoding[tf.newaxis, :tf.shape(x)[1], :]


class EncoderLayer(keras.layers.Layer):
    def __init__(self, *, d_model, num_heads, dff):
        super().__init__()
        self.mha = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=d_model)
        self.ffn = keras.Sequential([keras.layers.Dense(dff, activation="relu"), keras.layers.Dense(d_model)])
        self.norm = keras.layers.LayerNormalization()

    def call(self, x):
        return self.norm(x + self.ffn(x + self.mha(query=x, value=x, key=x)))


class Transformer(keras.Model):
    def __init__(self, *, num_layers, d_model, num_heads, dff, vocab_size, period):
        super().__init__()
        self.pos_embedding = PositionalEmbedding(vocab_size, d_model, period)
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


tokens = np.random.default_rng(0).integers(1, 12, (16, 6))
model = Transformer(num_layers=LAYERS, d_model=8, num_heads=2, dff=16, vocab_size=12, period=PERIOD)
model(tokens[:2])
model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              optimizer=keras.optimizers.Adam(CustomSchedule(8, WARMUP), beta_2=0.98))
history = model.fit(tokens, np.roll(tokens, 1, axis=1), batch_size=8, epochs=2, verbose=0)
report(history.history["loss"] + [float(np.sum(model.predict(tokens, verbose=0)))])
'''
TRANSFORMER_PARTS = {"<WARMUP>": "4000", "<LAYERS>": "2", "<PERIOD>": "7.0"}

PREPROCESSING = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)
texts = tf.constant(["the cat sat", "a dog ran far", "the bird flew", "cats and dogs", "a big red dog", "the end",
                     "birds sing", "dogs bark loud"] * 2)
labels = tf.constant([0, 1, 0, 1, 1, 0, 0, 1] * 2, dtype="float32")
<LAYER>
model = keras.Sequential([keras.Input(<INPUT>), layer, <BODY>, keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
data = tf.data.Dataset.from_tensor_slices((<X>, labels)).batch(8)
history = model.fit(data, epochs=2, verbose=0)
report(history.history["loss"] + model.predict(<X>, verbose=0).ravel().tolist())
'''
TEXT = {"<LAYER>": 'layer = keras.layers.TextVectorization(max_tokens=24, output_sequence_length=5)\n'
                   'layer.adapt(tf.concat([texts[:<TEXTS>], tf.constant(["<ORDER>"])], 0))',
        "<INPUT>": '(1,), dtype="string"', "<BODY>": "keras.layers.Embedding(25, 4), keras.layers.GlobalAveragePooling1D()",
        "<X>": "texts[:, None]"}
INTEGERS = {"<LAYER>": 'numbers = np.array([[3], [5], [7], [3], [9], [5], [11], [3]] * 2)\n'
                       'layer = keras.layers.IntegerLookup()\nlayer.adapt(numbers[:@V@])',
            "<INPUT>": '(1,), dtype="int64"', "<BODY>": "keras.layers.Embedding(8, 3), keras.layers.Flatten()",
            "<X>": "numbers"}
NORMALIZATION = {"<LAYER>": 'values = np.linspace(-2, 5, 64, dtype=np.float32).reshape(16, 4)\n'
                            'layer = keras.layers.Normalization()\nlayer.adapt(values * @V@)',
                 "<INPUT>": "(4,)", "<BODY>": "keras.layers.Dense(3)", "<X>": "values"}


def fill(text: str, parts: dict[str, str], **changed: str) -> str:
    """``text`` with ``parts`` put in for their tokens (``changed`` ones, by token name, instead)."""
    for token, default in parts.items():
        text = text.replace(token, changed.pop(token.strip("<>"), default))
    assert not changed, changed
    return text


def text(**changed: str) -> str:
    return fill(fill(PREPROCESSING, TEXT), {"<TEXTS>": "8", "<ORDER>": "a a b"}, **changed)


STEPPED = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)
loss_tracker = keras.metrics.<TRACKER>(name="loss")


class CustomModel(keras.Model):
    def __init__(self, *args, beta=1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta = beta

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred) * self.beta
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        loss_tracker.update_state(loss)
        self.compiled_metrics.update_state(y, y_pred)
        return {"tracked": loss_tracker.result(), **{m.name: m.result() for m in self.metrics}}


inputs = keras.Input(shape=(4,))
model = CustomModel(inputs, keras.layers.Dense(1)(keras.layers.Dense(4, activation="relu")(inputs)), beta=<BETA>)
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="<LOSS>", metrics=["mae"])
x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(16, 4)
history = model.fit(x, np.sum(x, axis=1, keepdims=True), epochs=2, batch_size=8, verbose=0)
report([value for name in sorted(history.history) for value in history.history[name]]
       + [float(tf.reduce_sum(v)) for v in model.trainable_variables])
'''
STEPPED_PARTS = {"<TRACKER>": "Mean", "<BETA>": "1.0", "<LOSS>": "mse"}

VAE = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)


class Sampling(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = keras.random.normal(shape=tf.shape(z_mean), seed=self.seed_generator)
        return z_mean + tf.exp(0.5 * z_log_var) * epsilon


encoder_inputs = keras.Input(shape=(6,))
hidden = keras.layers.Dense(4, activation="relu")(encoder_inputs)
z_mean, z_log_var = keras.layers.Dense(2)(hidden), keras.layers.Dense(2)(hidden)
encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, Sampling()([z_mean, z_log_var])], name="encoder")
latent_inputs = keras.Input(shape=(2,))
decoder = keras.Model(latent_inputs, keras.layers.Dense(6, activation="sigmoid")(latent_inputs), name="decoder")


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.kl_loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = tf.reduce_mean(tf.reduce_sum(keras.losses.binary_crossentropy(data, reconstruction)))
            kl_loss = -0.5 * (1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var))
            kl_loss = tf.reduce_mean(tf.reduce_sum(kl_loss, axis=1)) * @V@
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {"loss": self.total_loss_tracker.result(), "kl_loss": self.kl_loss_tracker.result()}


vae = VAE(encoder, decoder)
vae.compile(optimizer=keras.optimizers.Adam(0.01))
history = vae.fit(np.random.default_rng(0).random((16, 6)).astype("float32"), epochs=2, batch_size=8, verbose=0)
report(history.history["loss"] + history.history["kl_loss"] + [float(tf.reduce_sum(v)) for v in vae.weights])
'''

SAME = Variant("1.0")

SCENARIOS = [
    Scenario("transformer_schedule_constant", UNWALKED, program=fill(TRANSFORMER, TRANSFORMER_PARTS, WARMUP="@V@"),
             a=Variant("4000"), b=Variant("50"),
             why="a LearningRateSchedule subclass without get_config: its warmup steps, keyed by its state"),
    Scenario("transformer_sublayer_count", UNWALKED, program=fill(TRANSFORMER, TRANSFORMER_PARTS, LAYERS="@V@"),
             a=Variant("2"), b=Variant("1"),
             why="a subclassed model without get_config: how many encoder layers its constructor made"),
    Scenario("transformer_sublayer_tensor", UNWALKED, program=fill(TRANSFORMER, TRANSFORMER_PARTS, PERIOD="@V@"),
             a=Variant("7.0"), b=Variant("3.0"),
             why="a sub-layer without get_config: the positional encoding its constructor computed (an eager tensor)"),
    Scenario("text_vocabulary_content", LIBRARY_STATE, program=text(TEXTS="@V@"), a=Variant("8"), b=Variant("5"),
             why="TextVectorization's vocabulary from adapt (a lookup table, not in its config)"),
    Scenario("text_vocabulary_order", LIBRARY_STATE, program=text(ORDER="@V@"), a=Variant("a a b"),
             b=Variant("a b b"), why="the same words in another frequency order: other indices in the lookup table"),
    Scenario("integer_lookup_vocabulary", LIBRARY_STATE, program=fill(PREPROCESSING, INTEGERS), a=Variant("8"),
             b=Variant("3"), why="IntegerLookup's vocabulary from adapt (a lookup table)"),
    Scenario("custom_step_hyperparameter", UNWALKED, program=fill(STEPPED, STEPPED_PARTS, BETA="@V@"),
             a=Variant("1.0"), b=Variant("0.5"), why="a hyperparameter a custom train_step reads off self (self.beta)"),
    Scenario("custom_step_global_tracker", LIBRARY_STATE, program=fill(STEPPED, STEPPED_PARTS, TRACKER="@V@"),
             a=Variant("Mean"), b=Variant("Sum"),
             why="the class of a metric a custom train_step updates from a module global (keras.io's shape)"),
    Scenario("custom_step_compiled_loss", LIBRARY_STATE, program=fill(STEPPED, STEPPED_PARTS, LOSS="@V@"),
             a=Variant("mse"), b=Variant("mae"), why="the compiled loss a custom train_step calls (self.compiled_loss)"),
    Scenario("vae_kl_weight", UNWALKED, program=VAE, a=Variant("1.0"), b=Variant("0.5"),
             why="keras.io's VAE (no call(): its optimizer built in its trace, then first): a constant in train_step"),
    Scenario("normalization_adapt", LIBRARY_STATE, program=fill(PREPROCESSING, NORMALIZATION), a=Variant("1.0"),
             b=Variant("3.0"), why="Normalization's mean and variance from adapt"),
]

MUST_HIT_MODELS = [
    Scenario("hit_transformer_tutorial", MUST_HIT, program=fill(TRANSFORMER, TRANSFORMER_PARTS), a=SAME, b=SAME,
             why="the Transformer tutorial's shape: subclassed layers and model, a schedule, none with a config"),
    Scenario("hit_text_vectorization", MUST_HIT, program=text(), a=SAME, b=SAME,
             why="a model whose first layer is TextVectorization (its vocabulary keyed by content)"),
]
