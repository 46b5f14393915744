"""Shape: TensorFlow's "using the SavedModel format" (tf.Module with signatures: save, load, serve).

Pattern: tf.Module with input_signature'd @tf.functions, tf.saved_model.save, load, call the serving signature.

A small classifier ``tf.Module`` (variables made in ``__init__``), a ``@tf.function(input_signature=...)``
``__call__`` and a ``serve`` function returning a dict; trained a few steps by a ``@tf.function`` step, saved
to a temporary directory with its serving signature, loaded back and served (the loaded object's function
and the signature). Data: synthetic features, fixed seed.
"""

import json
import tempfile

import numpy as np
import tensorflow as tf

tf.random.set_seed(0)
rng = np.random.default_rng(15)
x_train = rng.random((64, 5), dtype=np.float32)
y_train = (x_train.sum(axis=1) > 2.5).astype(np.int64)


class Classifier(tf.Module):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.w = tf.Variable(tf.random.normal([5, 2], seed=1), name="w")
        self.b = tf.Variable(tf.zeros([2]), name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    def serve(self, x):
        logits = self(x)
        return {"class_ids": tf.argmax(logits, axis=-1), "probabilities": tf.nn.softmax(logits)}


model = Classifier()
optimizer = tf.keras.optimizers.SGD(0.5)
optimizer.build([model.w, model.b])


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=model(x)))
    grads = tape.gradient(loss, [model.w, model.b])
    optimizer.apply_gradients(zip(grads, [model.w, model.b]))
    return loss


losses = [float(train_step(x_train, y_train)) for _ in range(5)]
with tempfile.TemporaryDirectory() as export_dir:
    tf.saved_model.save(model, export_dir, signatures={"serving_default": model.serve})
    loaded = tf.saved_model.load(export_dir)
    served = loaded.signatures["serving_default"](x=tf.constant(x_train[:3]))
    called = loaded(tf.constant(x_train[:3]))

print("RESULT " + json.dumps({"losses": losses, "class_ids": served["class_ids"].numpy().tolist(),
                              "probabilities": served["probabilities"].numpy().tolist(),
                              "logits": called.numpy().tolist()}))
