"""Shape: keras.io "structured data classification" / the functional API guide's multi-input model.

Pattern: functional model with named dict inputs and two outputs, fit on dicts of arrays, evaluate, predict.

Three named inputs (a title's token ids, a body's token ids, numeric tags), embeddings and an LSTM, two named
outputs (priority regression, department classification) with a loss and a loss weight each, all fed as
dicts keyed by the layers' names. Data: synthetic tickets, fixed seed.
"""

import json

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(0)
NUM_TAGS, NUM_WORDS, NUM_DEPARTMENTS, N = 6, 50, 3, 96

title_input = keras.Input(shape=(None,), name="title")
body_input = keras.Input(shape=(None,), name="body")
tags_input = keras.Input(shape=(NUM_TAGS,), name="tags")
title_features = layers.LSTM(8)(layers.Embedding(NUM_WORDS, 8)(title_input))
body_features = layers.GlobalAveragePooling1D()(layers.Embedding(NUM_WORDS, 8)(body_input))
x = layers.concatenate([title_features, body_features, tags_input])
priority_pred = layers.Dense(1, name="priority")(x)
department_pred = layers.Dense(NUM_DEPARTMENTS, name="department")(x)
model = keras.Model(inputs={"title": title_input, "body": body_input, "tags": tags_input},
                    outputs={"priority": priority_pred, "department": department_pred})

model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
              loss={"priority": keras.losses.MeanSquaredError(),
                    "department": keras.losses.CategoricalCrossentropy(from_logits=True)},
              loss_weights={"priority": 1.0, "department": 0.2})

rng = np.random.default_rng(12)
features = {"title": rng.integers(0, NUM_WORDS, (N, 6)), "body": rng.integers(0, NUM_WORDS, (N, 10)),
            "tags": rng.integers(0, 2, (N, NUM_TAGS)).astype("float32")}
targets = {"priority": rng.random((N, 1), dtype=np.float32),
           "department": np.eye(NUM_DEPARTMENTS, dtype="float32")[rng.integers(0, NUM_DEPARTMENTS, N)]}
history = model.fit(features, targets, epochs=2, batch_size=32, verbose=0)
evaluation = model.evaluate(features, targets, verbose=0, return_dict=True)
predicted = model.predict({name: value[:3] for name, value in features.items()}, verbose=0)

print("RESULT " + json.dumps({"history": history.history, "evaluation": evaluation,
                              "predicted": {k: v.tolist() for k, v in sorted(predicted.items())}}))
