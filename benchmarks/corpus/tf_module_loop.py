"""Shape: TensorFlow's "training loops from scratch" / "introduction to modules" (tf.Module, tf.Variable).

Pattern: tf.Module model with tf.Variables, a @tf.function train loop and a @tf.function method.

A ``tf.Module`` linear model whose ``__call__`` is a ``@tf.function`` method; ``train`` is a module-level
``@tf.function`` running the steps over a ``tf.data`` dataset with a Python learning rate from globals, the
loss from a plain function. Data: a noisy line, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

TRUE_W, TRUE_B, NUM_EXAMPLES = 3.0, 2.0, 256
rng = np.random.default_rng(9)
x = rng.normal(size=NUM_EXAMPLES).astype(np.float32)
y = (x * TRUE_W + TRUE_B + rng.normal(size=NUM_EXAMPLES)).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


class MyModel(tf.Module):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.w = tf.Variable(5.0)
        self.b = tf.Variable(0.0)

    @tf.function
    def __call__(self, x):
        return self.w * x + self.b


def loss(target_y, predicted_y):
    return tf.reduce_mean(tf.square(target_y - predicted_y))


model = MyModel()
learning_rate = 0.1


@tf.function
def train(model, dataset):
    total = tf.constant(0.0)
    for xs, ys in dataset:
        with tf.GradientTape() as t:
            current_loss = loss(ys, model(xs))
        dw, db = t.gradient(current_loss, [model.w, model.b])
        model.w.assign_sub(learning_rate * dw)
        model.b.assign_sub(learning_rate * db)
        total += current_loss
    return total


epochs = []
for epoch in range(3):
    total = train(model, dataset)
    epochs.append([float(total), float(model.w), float(model.b)])
prediction = model(tf.constant([1.0, 2.0]))

print("RESULT " + json.dumps({"epochs": epochs, "prediction": prediction.numpy().tolist()}))
