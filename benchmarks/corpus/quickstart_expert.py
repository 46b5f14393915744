"""Shape: TensorFlow's "quickstart for experts" (subclassed model, GradientTape, @tf.function train/test steps).

Pattern: custom loop, module-level @tf.function steps reading a subclassed Model from globals.

``train_step``/``test_step`` are module-level ``@tf.function``s reading a
subclassed ``tf.keras.Model`` (``__init__`` + ``call``, no ``get_config``), a loss object, an optimizer and
metrics from globals, fed by ``tf.data`` batches.
"""

import json

import numpy as np
import tensorflow as tf
from tensorflow.keras import Model
from tensorflow.keras.layers import Conv2D, Dense, Flatten

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(1)
x_train = rng.random((128, 12, 12, 1), dtype=np.float32)
y_train = rng.integers(0, 10, 128)
x_test = rng.random((32, 12, 12, 1), dtype=np.float32)
y_test = rng.integers(0, 10, 32)

train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)
test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(32)


class MyModel(Model):
    def __init__(self):
        super().__init__()
        self.conv1 = Conv2D(8, 3, activation="relu")
        self.flatten = Flatten()
        self.d1 = Dense(32, activation="relu")
        self.d2 = Dense(10)

    def call(self, x):
        x = self.conv1(x)
        x = self.flatten(x)
        x = self.d1(x)
        return self.d2(x)


model = MyModel()
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()
train_loss = tf.keras.metrics.Mean(name="train_loss")
train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
test_loss = tf.keras.metrics.Mean(name="test_loss")
test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    train_accuracy(labels, predictions)


@tf.function
def test_step(images, labels):
    predictions = model(images, training=False)
    t_loss = loss_object(labels, predictions)
    test_loss(t_loss)
    test_accuracy(labels, predictions)


history = []
for epoch in range(2):
    for metric in (train_loss, train_accuracy, test_loss, test_accuracy):
        metric.reset_state()
    for images, labels in train_ds:
        train_step(images, labels)
    for images, labels in test_ds:
        test_step(images, labels)
    history.append([float(train_loss.result()), float(train_accuracy.result()),
                    float(test_loss.result()), float(test_accuracy.result())])

print("RESULT " + json.dumps({"history": history}))
