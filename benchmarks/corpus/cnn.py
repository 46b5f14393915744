"""Shape: TensorFlow's "convolutional neural network" (CIFAR-10: Conv2D/MaxPooling2D stack, Dense head).

Pattern: Sequential CNN fit with validation_data, evaluate.

Data: synthetic 16x16 RGB images in 10 classes, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers, models

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(6)
train_images = rng.random((128, 16, 16, 3), dtype=np.float32)
train_labels = rng.integers(0, 10, (128, 1))
test_images = rng.random((32, 16, 16, 3), dtype=np.float32)
test_labels = rng.integers(0, 10, (32, 1))

model = models.Sequential()
model.add(layers.Input((16, 16, 3)))
model.add(layers.Conv2D(8, (3, 3), activation="relu"))
model.add(layers.MaxPooling2D((2, 2)))
model.add(layers.Conv2D(16, (3, 3), activation="relu"))
model.add(layers.MaxPooling2D((2, 2)))
model.add(layers.Flatten())
model.add(layers.Dense(16, activation="relu"))
model.add(layers.Dense(10))

model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(train_images, train_labels, epochs=2, validation_data=(test_images, test_labels), verbose=0)
test_loss, test_acc = model.evaluate(test_images, test_labels, verbose=0)

print("RESULT " + json.dumps({"history": history.history, "test": [test_loss, test_acc]}))
