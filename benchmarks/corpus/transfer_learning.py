"""Shape: TensorFlow's "transfer learning" (a frozen keras.applications base, data augmentation, new head).

Pattern: functional model around a frozen MobileNetV2 (weights=None) base, fit, then fine-tune (recompile).

The tutorial's shape: augmentation layers, ``preprocess_input``, the base called with ``training=False``, a
pooling + dropout + Dense head; then the base unfrozen from a layer on and the model compiled again with a
lower learning rate (a second fit: new compile state, new step functions). Data: synthetic 32x32 images.
"""

import json

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
IMG_SHAPE = (32, 32, 3)
rng = np.random.default_rng(7)
images = rng.random((64, 32, 32), dtype=np.float32)[..., None].repeat(3, -1) * 255
labels = rng.integers(0, 2, 64).astype(np.float32)
train_dataset = tf.data.Dataset.from_tensor_slices((images[:48], labels[:48])).batch(16)
validation_dataset = tf.data.Dataset.from_tensor_slices((images[48:], labels[48:])).batch(16)

data_augmentation = tf.keras.Sequential([tf.keras.layers.RandomFlip("horizontal")])
preprocess_input = tf.keras.applications.mobilenet_v2.preprocess_input
base_model = tf.keras.applications.MobileNetV2(input_shape=IMG_SHAPE, include_top=False, weights=None,
                                               alpha=0.35)
base_model.trainable = False

inputs = tf.keras.Input(shape=IMG_SHAPE)
x = data_augmentation(inputs)
x = preprocess_input(x)
x = base_model(x, training=False)
x = tf.keras.layers.GlobalAveragePooling2D()(x)
x = tf.keras.layers.Dropout(0.2)(x)
outputs = tf.keras.layers.Dense(1)(x)
model = tf.keras.Model(inputs, outputs)

model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
              loss=tf.keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"])
history = model.fit(train_dataset, epochs=1, validation_data=validation_dataset, verbose=0)

base_model.trainable = True
for layer in base_model.layers[:100]:
    layer.trainable = False
model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
              optimizer=tf.keras.optimizers.RMSprop(learning_rate=0.0001), metrics=["accuracy"])
history_fine = model.fit(train_dataset, epochs=2, initial_epoch=1, validation_data=validation_dataset, verbose=0)
predictions = model.predict_on_batch(images[:4])

print("RESULT " + json.dumps({"history": history.history, "fine": history_fine.history,
                              "predictions": predictions.tolist()}))
