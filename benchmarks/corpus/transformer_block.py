"""Shape: keras.io "Text classification with Transformer" (a subclassed TransformerBlock and embedding layer).

Pattern: subclassed Layers (MultiHeadAttention block, token+position embedding) in a functional model, fit.

``TransformerBlock(layers.Layer)`` and ``TokenAndPositionEmbedding(layers.Layer)`` are written as keras.io
writes them (sublayers made in ``__init__``, no ``get_config``), used in a functional model trained with
``fit`` on integer sequences, then ``predict``. Data: synthetic sequences, the label whether token 1 appears.
"""

import json

import keras
import numpy as np
from keras import layers, ops

keras.utils.set_random_seed(0)
VOCAB, MAXLEN, EMBED, HEADS, FF = 20, 10, 16, 2, 16


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = ops.shape(x)[-1]
        positions = ops.arange(start=0, stop=maxlen, step=1)
        return self.token_emb(x) + self.pos_emb(positions)


inputs = layers.Input(shape=(MAXLEN,))
x = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED)(inputs)
x = TransformerBlock(EMBED, HEADS, FF)(x)
x = layers.GlobalAveragePooling1D()(x)
x = layers.Dropout(0.1)(x)
x = layers.Dense(8, activation="relu")(x)
outputs = layers.Dense(2, activation="softmax")(x)
model = keras.Model(inputs=inputs, outputs=outputs)

rng = np.random.default_rng(13)
x_train = rng.integers(2, VOCAB, (128, MAXLEN))
x_train[::2, 3] = 1
y_train = (x_train == 1).any(axis=1).astype("int32")
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=2, validation_split=0.25, verbose=0)
predicted = model.predict(x_train[:4], verbose=0)

print("RESULT " + json.dumps({"history": history.history, "predicted": predicted.tolist()}))
