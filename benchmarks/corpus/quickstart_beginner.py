"""Shape: TensorFlow's "quickstart for beginners" (Sequential model, compile, fit, evaluate, predict).

Pattern: Sequential fit + evaluate + predict.

Keras' own step functions (train, test, predict), keyed by the model and its compile state; the predict is
a second Sequential wrapping the first with a Softmax. Data: synthetic 28x28 "digits", fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x_train = rng.random((256, 28, 28), dtype=np.float32)
y_train = rng.integers(0, 10, 256)
x_test = rng.random((64, 28, 28), dtype=np.float32)
y_test = rng.integers(0, 10, 64)

model = tf.keras.models.Sequential([
    tf.keras.layers.Input((28, 28)),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(32, activation="relu"),
    tf.keras.layers.Dropout(0.2),
    tf.keras.layers.Dense(10),
])
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
model.compile(optimizer="adam", loss=loss_fn, metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0)
test_loss, test_acc = model.evaluate(x_test, y_test, verbose=0)

probability_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])
probs = probability_model.predict(x_test[:5], verbose=0)

print("RESULT " + json.dumps({"loss": history.history["loss"], "test": [test_loss, test_acc],
                              "probs": probs.tolist()}))
