"""Shape: TensorFlow's "distributed training with Keras" / "custom training with tf.distribute.Strategy".

Pattern: MirroredStrategy over 2 logical CPUs: model and optimizer in scope, strategy.run in a @tf.function step.

Two logical CPU devices are configured first; under ``strategy.scope()`` a Sequential model and an optimizer
are made; a distributed dataset feeds ``distributed_train_step``, a ``@tf.function`` calling
``strategy.run(train_step)`` and reducing the per-replica losses (``compute_average_loss`` over the global
batch). Data: synthetic features, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
tf.keras.utils.set_random_seed(0)

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL_BATCH_SIZE = 32
rng = np.random.default_rng(16)
x = rng.random((128, 10), dtype=np.float32)
y = rng.integers(0, 3, 128)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH_SIZE)
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((10,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    optimizer = tf.keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)


def compute_loss(labels, predictions):
    per_example_loss = loss_object(labels, predictions)
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)


def train_step(inputs):
    features, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(features, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


losses = []
for epoch in range(2):
    total_loss, num_batches = 0.0, 0
    for batch in dist_dataset:
        total_loss += float(distributed_train_step(batch))
        num_batches += 1
    losses.append(total_loss / num_batches)
logits = model(x[:3])

print("RESULT " + json.dumps({"losses": losses, "logits": logits.numpy().tolist()}))
