"""Shape: TensorFlow's "Text generation with an RNN" tutorial (a subclassed GRU model, fit, a OneStep generator).

Pattern: recurrent layers (Embedding, GRU with return_state) in a subclassed model trained by fit, then a
``OneStep(tf.keras.Model)`` whose ``@tf.function generate_one_step`` reads the model and a mask from ``self``.

Written in the tutorial's shape, smaller: ``MyModel.call(inputs, states=None, return_state=False,
training=False)``, ``SparseCategoricalCrossentropy(from_logits=True)``, a ``OneStep`` that masks a token out
(a ``tf.SparseTensor`` made dense) and samples with ``tf.random.categorical`` under a fixed op seed. Data:
synthetic token ids, fixed seed; generation runs 4 steps from 2 start tokens.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
VOCAB, EMBED, UNITS, SEQ = 30, 8, 16, 12


class MyModel(tf.keras.Model):
    def __init__(self, vocab_size, embedding_dim, rnn_units):
        super().__init__()
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = tf.keras.layers.GRU(rnn_units, return_sequences=True, return_state=True)
        self.dense = tf.keras.layers.Dense(vocab_size)

    def call(self, inputs, states=None, return_state=False, training=False):
        x = inputs
        x = self.embedding(x, training=training)
        if states is None:
            states = self.gru.get_initial_state(tf.shape(x)[0])
        x, states = self.gru(x, initial_state=states, training=training)
        x = self.dense(x, training=training)
        if return_state:
            return x, states
        return x


class OneStep(tf.keras.Model):
    def __init__(self, model, temperature=1.0):
        super().__init__()
        self.temperature = temperature
        self.model = model
        skip_ids = tf.SparseTensor(values=[-float("inf")], indices=[[0]], dense_shape=[VOCAB])
        self.prediction_mask = tf.sparse.to_dense(skip_ids)  # token 0 is never generated

    @tf.function
    def generate_one_step(self, input_ids, states=None):
        predicted_logits, states = self.model(inputs=input_ids, states=states, return_state=True)
        predicted_logits = predicted_logits[:, -1, :]
        predicted_logits = predicted_logits / self.temperature
        predicted_logits = predicted_logits + self.prediction_mask
        predicted_ids = tf.random.categorical(predicted_logits, num_samples=1, seed=7)
        return tf.squeeze(predicted_ids, axis=-1), states


rng = np.random.default_rng(3)
text = rng.integers(1, VOCAB, 16 * (SEQ + 1) * 4)
sequences = tf.data.Dataset.from_tensor_slices(text).batch(SEQ + 1, drop_remainder=True)
dataset = sequences.map(lambda seq: (seq[:-1], seq[1:])).batch(16, drop_remainder=True)

model = MyModel(vocab_size=VOCAB, embedding_dim=EMBED, rnn_units=UNITS)
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(dataset, epochs=2, verbose=0)

one_step_model = OneStep(model)
states = None
next_ids = tf.constant([[1], [2]], dtype=tf.int64)
generated = []
for _ in range(4):
    next_ids, states = one_step_model.generate_one_step(next_ids, states=states)
    generated.append(next_ids.numpy().tolist())
    next_ids = next_ids[:, tf.newaxis]

print("RESULT " + json.dumps({"history": history.history, "state": np.asarray(states)[:, :3].tolist()}))
