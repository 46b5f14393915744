"""Shape: TensorFlow's "tf.data: build TensorFlow input pipelines" / "load images" (map, cache, shuffle, batch, prefetch into fit).

Pattern: tf.data pipeline with a user map function (normalize, augment) feeding fit and evaluate.

``from_tensor_slices`` -> ``map(preprocess, num_parallel_calls=AUTOTUNE)`` -> ``cache`` -> ``shuffle(seed)``
-> ``batch`` -> ``prefetch``, the user's ``preprocess`` casting, scaling and flipping with stateless ops;
a Sequential model with a Rescaling layer trained on it. Data: synthetic uint8 images, fixed seed.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
AUTOTUNE = tf.data.AUTOTUNE
rng = np.random.default_rng(14)
images = rng.integers(0, 256, (160, 12, 12, 3), dtype=np.uint8)
labels = rng.integers(0, 3, 160)


def preprocess(image, label):
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = tf.image.flip_left_right(image)
    return image, label


def configure_for_performance(ds, shuffle):
    ds = ds.map(preprocess, num_parallel_calls=AUTOTUNE).cache()
    if shuffle:
        ds = ds.shuffle(buffer_size=64, seed=42)
    return ds.batch(32).prefetch(buffer_size=AUTOTUNE)


train_ds = configure_for_performance(tf.data.Dataset.from_tensor_slices((images[:128], labels[:128])), True)
val_ds = configure_for_performance(tf.data.Dataset.from_tensor_slices((images[128:], labels[128:])), False)

model = tf.keras.Sequential([
    tf.keras.layers.Input((12, 12, 3)),
    tf.keras.layers.Rescaling(2.0, offset=-1.0),
    tf.keras.layers.Conv2D(8, 3, activation="relu"),
    tf.keras.layers.GlobalAveragePooling2D(),
    tf.keras.layers.Dense(3),
])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(train_ds, validation_data=val_ds, epochs=3, verbose=0)
loss, accuracy = model.evaluate(val_ds, verbose=0)

print("RESULT " + json.dumps({"history": history.history, "evaluate": [loss, accuracy]}))
