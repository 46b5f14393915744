"""Shape: TensorFlow's "DCGAN" (generator and discriminator Sequentials, two tapes, two Adam optimizers).

Pattern: custom loop, @tf.function train_step with two GradientTapes and two optimizers (globals).

Both models are built before training (called on a noise / image batch); ``train_step`` trains both from one
batch of a ``tf.data`` pipeline; ``generate`` samples images with a fixed seed. Data: synthetic 8x8 images.
"""

import json

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers

tf.keras.utils.set_random_seed(0)
BATCH_SIZE, NOISE_DIM = 16, 8
train_images = np.random.default_rng(5).random((64, 8, 8, 1), dtype=np.float32) * 2 - 1
train_dataset = tf.data.Dataset.from_tensor_slices(train_images).batch(BATCH_SIZE)


def make_generator_model():
    return tf.keras.Sequential([
        layers.Input((NOISE_DIM,)),
        layers.Dense(4 * 4 * 16, use_bias=False),
        layers.BatchNormalization(),
        layers.LeakyReLU(),
        layers.Reshape((4, 4, 16)),
        layers.Conv2DTranspose(8, (3, 3), strides=(2, 2), padding="same", use_bias=False),
        layers.BatchNormalization(),
        layers.LeakyReLU(),
        layers.Conv2DTranspose(1, (3, 3), strides=(1, 1), padding="same", use_bias=False, activation="tanh"),
    ])


def make_discriminator_model():
    return tf.keras.Sequential([
        layers.Input((8, 8, 1)),
        layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(),
        layers.Dropout(0.3),
        layers.Flatten(),
        layers.Dense(1),
    ])


generator = make_generator_model()
discriminator = make_discriminator_model()
cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)


def discriminator_loss(real_output, fake_output):
    real_loss = cross_entropy(tf.ones_like(real_output), real_output)
    fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    return real_loss + fake_loss


def generator_loss(fake_output):
    return cross_entropy(tf.ones_like(fake_output), fake_output)


generator_optimizer = tf.keras.optimizers.Adam(1e-4)
discriminator_optimizer = tf.keras.optimizers.Adam(1e-4)
seed = tf.random.normal([4, NOISE_DIM], seed=1)


@tf.function
def train_step(images):
    noise = tf.random.normal([BATCH_SIZE, NOISE_DIM])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated_images = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated_images, training=True)
        gen_loss = generator_loss(fake_output)
        disc_loss = discriminator_loss(real_output, fake_output)
    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
    return gen_loss, disc_loss


@tf.function
def generate(model, test_input):
    return model(test_input, training=False)


losses = []
for epoch in range(2):
    for image_batch in train_dataset:
        gen_loss, disc_loss = train_step(image_batch)
    losses.append([float(gen_loss), float(disc_loss)])
samples = generate(generator, seed)

print("RESULT " + json.dumps({"losses": losses, "samples": samples.numpy()[:, :2, :2, 0].tolist()}))
