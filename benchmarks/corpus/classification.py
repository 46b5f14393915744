"""Shape: TensorFlow's "basic classification" (Fashion-MNIST: Flatten + Dense, fit, probability model).

Pattern: Sequential fit with a validation split, evaluate, predict on a single image batch.

Keras' step functions keyed by the model; ``validation_split`` adds evaluation inside fit. Data: synthetic
16x16 "clothes" in 10 classes, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(2)
train_images = rng.random((200, 16, 16), dtype=np.float32)
train_labels = rng.integers(0, 10, 200)
test_images = rng.random((40, 16, 16), dtype=np.float32)
test_labels = rng.integers(0, 10, 40)

model = tf.keras.Sequential([
    tf.keras.layers.Flatten(input_shape=(16, 16)),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(10),
])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(train_images, train_labels, epochs=3, validation_split=0.2, verbose=0)
test_loss, test_acc = model.evaluate(test_images, test_labels, verbose=0)

probability_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])
predictions = probability_model.predict(test_images, verbose=0)
single = probability_model.predict(np.expand_dims(test_images[1], 0), verbose=0)

print("RESULT " + json.dumps({"history": history.history, "test": [test_loss, test_acc],
                              "argmax": predictions.argmax(axis=1).tolist(), "single": single.tolist()}))
