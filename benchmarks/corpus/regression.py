"""Shape: TensorFlow's "basic regression" (fuel efficiency: a Normalization layer adapted to the data, Dense).

Pattern: Normalization.adapt + Sequential regression fit, evaluate, predict.

The Normalization layer is a preprocessing layer adapted on NumPy features (its mean and variance are
non-trainable state set before the first trace); fit with ``validation_split``, mean-absolute-error loss.
Data: synthetic tabular features with a linear target plus noise, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(3)
features = rng.normal(5.0, 2.0, (160, 6)).astype(np.float32)
labels = (features @ rng.normal(0, 1, 6) + rng.normal(0, 0.1, 160)).astype(np.float32)

normalizer = tf.keras.layers.Normalization(axis=-1)
normalizer.adapt(features)


def build_and_compile_model(norm):
    model = tf.keras.Sequential([
        norm,
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1),
    ])
    model.compile(loss="mean_absolute_error", optimizer=tf.keras.optimizers.Adam(0.01))
    return model


dnn_model = build_and_compile_model(normalizer)
history = dnn_model.fit(features[:128], labels[:128], validation_split=0.2, epochs=3, verbose=0)
test_loss = dnn_model.evaluate(features[128:], labels[128:], verbose=0)
test_predictions = dnn_model.predict(features[128:], verbose=0).flatten()

print("RESULT " + json.dumps({"history": history.history, "test_loss": test_loss,
                              "predictions": test_predictions.tolist()}))
