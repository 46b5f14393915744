"""Shape: TensorFlow's "neural machine translation with attention" (GRU encoder, attention decoder, teacher forcing).

Pattern: custom loop, subclassed encoder/decoder/attention models, @tf.function train_step with a Python loop.

The older tutorial's shape: ``Encoder`` (Embedding + GRU), ``BahdanauAttention`` and ``Decoder`` subclassed
``tf.keras.Model``s without ``get_config``; ``train_step`` runs the encoder, then the decoder one target
position at a time (teacher forcing; the Python ``for`` unrolls at trace time), a masked loss, Adam;
``translate`` decodes greedily. Data: synthetic "sentence pairs" (the target reverses the source), fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
VOCAB, UNITS, EMBED, LEN, BATCH = 12, 16, 8, 5, 16
rng = np.random.default_rng(10)
src = rng.integers(3, VOCAB, (64, LEN)).astype(np.int32)
tgt = np.concatenate([np.ones((64, 1), np.int32), src[:, ::-1], np.full((64, 1), 2, np.int32)], axis=1)
dataset = tf.data.Dataset.from_tensor_slices((src, tgt)).batch(BATCH, drop_remainder=True)


class Encoder(tf.keras.Model):
    def __init__(self, vocab_size, embedding_dim, enc_units):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = tf.keras.layers.GRU(enc_units, return_sequences=True, return_state=True)

    def call(self, x):
        return self.gru(self.embedding(x))


class BahdanauAttention(tf.keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.W1 = tf.keras.layers.Dense(units)
        self.W2 = tf.keras.layers.Dense(units)
        self.V = tf.keras.layers.Dense(1)

    def call(self, query, values):
        query_with_time_axis = tf.expand_dims(query, 1)
        score = self.V(tf.nn.tanh(self.W1(query_with_time_axis) + self.W2(values)))
        attention_weights = tf.nn.softmax(score, axis=1)
        context_vector = tf.reduce_sum(attention_weights * values, axis=1)
        return context_vector, attention_weights


class Decoder(tf.keras.Model):
    def __init__(self, vocab_size, embedding_dim, dec_units):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = tf.keras.layers.GRU(dec_units, return_sequences=True, return_state=True)
        self.fc = tf.keras.layers.Dense(vocab_size)
        self.attention = BahdanauAttention(dec_units)

    def call(self, x, hidden, enc_output):
        context_vector, attention_weights = self.attention(hidden, enc_output)
        x = self.embedding(x)
        x = tf.concat([tf.expand_dims(context_vector, 1), x], axis=-1)
        output, state = self.gru(x)
        output = tf.reshape(output, (-1, output.shape[2]))
        return self.fc(output), state, attention_weights


encoder = Encoder(VOCAB, EMBED, UNITS)
decoder = Decoder(VOCAB, EMBED, UNITS)
optimizer = tf.keras.optimizers.Adam()
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def loss_function(real, pred):
    mask = tf.math.logical_not(tf.math.equal(real, 0))
    loss_ = loss_object(real, pred)
    return tf.reduce_mean(loss_ * tf.cast(mask, dtype=loss_.dtype))


@tf.function
def train_step(inp, targ):
    loss = 0.0
    with tf.GradientTape() as tape:
        enc_output, enc_hidden = encoder(inp)
        dec_hidden = enc_hidden
        dec_input = tf.expand_dims(targ[:, 0], 1)
        for t in range(1, targ.shape[1]):
            predictions, dec_hidden, _ = decoder(dec_input, dec_hidden, enc_output)
            loss += loss_function(targ[:, t], predictions)
            dec_input = tf.expand_dims(targ[:, t], 1)
    batch_loss = loss / int(targ.shape[1])
    variables = encoder.trainable_variables + decoder.trainable_variables
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(gradients, variables))
    return batch_loss


@tf.function
def translate(inp):
    enc_output, dec_hidden = encoder(inp)
    dec_input = tf.fill([tf.shape(inp)[0], 1], 1)
    tokens = []
    for _ in range(LEN + 1):
        predictions, dec_hidden, _ = decoder(dec_input, dec_hidden, enc_output)
        dec_input = tf.expand_dims(tf.argmax(predictions, -1, output_type=tf.int32), 1)
        tokens.append(dec_input)
    return tf.concat(tokens, axis=1)


losses = []
for epoch in range(2):
    for inp, targ in dataset:
        batch_loss = train_step(inp, targ)
    losses.append(float(batch_loss))
tokens = translate(tf.constant(src[:3]))

print("RESULT " + json.dumps({"losses": losses, "tokens": tokens.numpy().tolist()}))
