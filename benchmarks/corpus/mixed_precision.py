"""Shape: TensorFlow's "mixed precision" guide (mixed_float16 policy, float32 outputs, LossScaleOptimizer).

Pattern: custom loop under a mixed_float16 policy with LossScaleOptimizer (scale_loss, apply) in @tf.function.

The guide's custom-loop part: the global policy set first, a functional model whose last activation is
float32, ``tf.keras.mixed_precision.LossScaleOptimizer`` wrapping SGD; ``train_step`` scales the loss and
applies the gradients (the optimizer unscales them and skips steps with non-finite ones); ``test_step``
evaluates. Data: synthetic features, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers, mixed_precision

tf.keras.utils.set_random_seed(0)
mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(8)
x_train = rng.random((128, 20), dtype=np.float32)
y_train = rng.integers(0, 4, 128)
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)

inputs = tf.keras.Input(shape=(20,), name="features")
x = layers.Dense(32, activation="relu", name="dense_1")(inputs)
x = layers.Dense(32, activation="relu", name="dense_2")(x)
x = layers.Dense(4, name="dense_logits")(x)
outputs = layers.Activation("softmax", dtype="float32", name="predictions")(x)
model = tf.keras.Model(inputs=inputs, outputs=outputs)

optimizer = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
loss_object = tf.keras.losses.SparseCategoricalCrossentropy()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predictions = model(x)
        loss = loss_object(y, predictions)
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)
    return loss


@tf.function
def test_step(x):
    return model(x, training=False)


losses = []
for epoch in range(2):
    for x, y in train_dataset:
        loss = train_step(x, y)
    losses.append(float(loss))
probs = test_step(x_train[:4])

print("RESULT " + json.dumps({"losses": losses, "dtype": probs.dtype.name, "probs": probs.numpy().tolist(),
                              "scale": float(optimizer.dynamic_scale)}))
