"""Shape: keras.io "Variational AutoEncoder" (functional encoder/decoder, a Model subclass overriding train_step).

Pattern: keras.Model subclass with a custom train_step (no call()), trackers, fit.

Equal: within 1e-6 (plain TensorFlow itself is not bitwise reproducible here: six plain runs at once on two
busy cores gave three different last bits of the second epoch's total loss; op determinism does not change it).

``VAE(keras.Model)`` holds an encoder and a decoder (functional models, a ``Sampling`` layer drawing with a
``SeedGenerator``), three ``keras.metrics.Mean`` trackers, and overrides ``train_step`` (a GradientTape, the
reconstruction + KL loss, ``self.optimizer.apply_gradients``), as keras.io does for the TensorFlow backend.
Data: synthetic 8x8 images in [0, 1], fixed seed.
"""

import json

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

keras.utils.set_random_seed(0)
LATENT = 2


class Sampling(layers.Layer):
    """Uses (z_mean, z_log_var) to sample z."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch, dim = ops.shape(z_mean)[0], ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


encoder_inputs = keras.Input(shape=(8, 8, 1))
x = layers.Conv2D(8, 3, activation="relu", strides=2, padding="same")(encoder_inputs)
x = layers.Flatten()(x)
x = layers.Dense(16, activation="relu")(x)
z_mean = layers.Dense(LATENT, name="z_mean")(x)
z_log_var = layers.Dense(LATENT, name="z_log_var")(x)
z = Sampling()([z_mean, z_log_var])
encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")

latent_inputs = keras.Input(shape=(LATENT,))
x = layers.Dense(4 * 4 * 8, activation="relu")(latent_inputs)
x = layers.Reshape((4, 4, 8))(x)
x = layers.Conv2DTranspose(8, 3, activation="relu", strides=2, padding="same")(x)
decoder_outputs = layers.Conv2DTranspose(1, 3, activation="sigmoid", padding="same")(x)
decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = ops.mean(ops.sum(
                keras.losses.binary_crossentropy(data, reconstruction), axis=(1, 2)))
            kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl_loss = ops.mean(ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {"loss": self.total_loss_tracker.result(),
                "reconstruction_loss": self.reconstruction_loss_tracker.result(),
                "kl_loss": self.kl_loss_tracker.result()}


images = np.random.default_rng(11).random((128, 8, 8, 1), dtype=np.float32)
vae = VAE(encoder, decoder)
vae.compile(optimizer=keras.optimizers.Adam())
history = vae.fit(images, epochs=2, batch_size=32, verbose=0)
decoded = decoder.predict(np.array([[0.0, 0.0], [1.0, -1.0]], np.float32), verbose=0)

print("RESULT " + json.dumps({"history": history.history, "decoded": decoded[:, :2, :2, 0].tolist()}))
