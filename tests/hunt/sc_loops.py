"""Custom training loops in the tutorials' shape (traces/objects.py, traces/building.py): a ``@tf.function
train_step`` reading a Keras model, optimizer, loss and metric from globals, each scenario changing one of them
between the variants: Keras (an installed library) reads that state while the step is traced (library-state), or
the walk must follow the path to it (a user model class's code, an attribute of the model read by the step:
unwalked-path). The optimizer is built inside the first trace, as in the tutorials: a later process builds it
before the trace from what the first trace built (building.py), under the first trace's key.

The must-hit checks run the quickstart for experts (a subclassed model built in the first trace), DCGAN's shape
(two models, two optimizers) and a tf.Module trained by a tf.function, unchanged, twice."""

from __future__ import annotations

from .model import LIBRARY_STATE, MUST_HIT, UNWALKED, Scenario, Variant

LOOP = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)

model = <MODEL>
optimizer = <OPTIMIZER>
loss_object = <LOSS>
train_loss = <METRIC>
SCALE = <SCALE>


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_object(y, model(x, training=True)) * SCALE
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    return loss


x = tf.constant(np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4))
y = tf.constant(np.arange(8) % 3)
losses = [float(train_step(x, y)) for _ in range(3)]
report(losses + [float(train_loss.result())] + [float(tf.reduce_sum(v)) for v in model.trainable_variables])
'''
PARTS = {
    "<MODEL>": 'keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(5, activation="relu", name="d"), '
               'keras.layers.Dense(3, name="o")], name="m")',
    "<OPTIMIZER>": 'keras.optimizers.Adam(0.05, name="opt")',
    "<LOSS>": "keras.losses.SparseCategoricalCrossentropy(from_logits=True)",
    "<METRIC>": 'keras.metrics.Mean(name="train_loss")',
    "<SCALE>": "1.0",
}


def loop(**changed: str) -> str:
    """LOOP with its parts, ``changed`` ones (``MODEL=...``) replacing the defaults (each may hold ``@V@``)."""
    text = LOOP
    for token, default in PARTS.items():
        text = text.replace(token, changed.pop(token.strip("<>"), default))
    assert not changed, changed
    return text


SUBCLASS = '''
class Net(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.d = keras.layers.Dense(5, activation="relu", name="d")
        self.o = keras.layers.Dense(3, name="o")
        self.scale = <ATTRIBUTE>

    def call(self, x):
        return self.o(self.d(x)) * <CODE>


'''


def subclassed(attribute: str = "1.0", code: str = "1.0") -> str:
    """LOOP with a subclassed model built before the step (its class's code and an attribute it holds)."""
    text = loop(MODEL='Net(name="m")')
    return text.replace("model = Net", SUBCLASS.replace("<ATTRIBUTE>", attribute).replace("<CODE>", code)
                        + "model = Net", 1).replace("optimizer =", "model(tf.zeros((1, 4)))\noptimizer =", 1)


MODULE = '''
import numpy as np
import tensorflow as tf


class Linear(tf.Module):
    def __init__(self, rate):
        super().__init__()
        self.w = tf.Variable(tf.fill([3, 1], 0.5))
        self.b = tf.Variable(tf.zeros([1]))
        self.rate = rate

    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b


linear = Linear(@V@)


@tf.function
def train(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - linear(x)))
    dw, db = tape.gradient(loss, [linear.w, linear.b])
    linear.w.assign_sub(linear.rate * dw)
    linear.b.assign_sub(linear.rate * db)
    return loss


x = tf.constant(np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3))
y = tf.reduce_sum(x, axis=1, keepdims=True) * 2.0 + 1.0
report([float(train(x, y)) for _ in range(3)] + linear.w.numpy().ravel().tolist())
'''

QUICKSTART = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)


class MyModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv1 = keras.layers.Conv2D(3, 3, activation="relu")
        self.flatten = keras.layers.Flatten()
        self.d1 = keras.layers.Dense(8, activation="relu")
        self.d2 = keras.layers.Dense(4)

    def call(self, x):
        return self.d2(self.d1(self.flatten(self.conv1(x))))


model = MyModel()
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam()
train_loss = keras.metrics.Mean(name="train_loss")
train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
test_loss = keras.metrics.Mean(name="test_loss")


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
    test_loss(loss_object(labels, model(images, training=False)))


rng = np.random.default_rng(0)
images = rng.random((16, 6, 6, 1), dtype=np.float32) * @V@
labels = rng.integers(0, 4, 16)
for start in (0, 8):
    train_step(images[start:start + 8], labels[start:start + 8])
test_step(images[:8], labels[:8])
report([float(train_loss.result()), float(train_accuracy.result()), float(test_loss.result())])
'''

GAN = '''
import numpy as np
import tensorflow as tf
import keras
keras.utils.set_random_seed(0)

generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, use_bias=False),
                              keras.layers.BatchNormalization(), keras.layers.LeakyReLU(), keras.layers.Dense(6)])
discriminator = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.LeakyReLU(),
                                  keras.layers.Dropout(0.3), keras.layers.Dense(1)])
cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)
generator_optimizer = keras.optimizers.Adam(1e-3)
discriminator_optimizer = keras.optimizers.Adam(1e-3)


@tf.function
def train_step(images, noise):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake_output = discriminator(generator(noise, training=True), training=True)
        real_output = discriminator(images, training=True)
        gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
        disc_loss = cross_entropy(tf.ones_like(real_output), real_output) + \\
            cross_entropy(tf.zeros_like(fake_output), fake_output)
    generator_optimizer.apply_gradients(zip(gen_tape.gradient(gen_loss, generator.trainable_variables),
                                            generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(disc_tape.gradient(disc_loss, discriminator.trainable_variables),
                                                discriminator.trainable_variables))
    return gen_loss, disc_loss


rng = np.random.default_rng(1)
out = [train_step(rng.standard_normal((8, 6)).astype(np.float32) * @V@, rng.standard_normal((8, 4)).astype(np.float32))
       for _ in range(3)]
report([float(value) for pair in out for value in pair])
'''

SAME = Variant("1.0")

SCENARIOS = [
    Scenario("loop_layer_units", LIBRARY_STATE, program=loop(MODEL=PARTS["<MODEL>"].replace("Dense(5", "Dense(@V@")),
             a=Variant("5"), b=Variant("6"), why="a layer's units (the model's architecture) in a custom train step"),
    Scenario("loop_layer_activation", LIBRARY_STATE,
             program=loop(MODEL=PARTS["<MODEL>"].replace('"relu"', '"@V@"')), a=Variant("relu"), b=Variant("tanh"),
             why="a layer's config (its activation) in a custom train step"),
    Scenario("loop_optimizer_learning_rate", LIBRARY_STATE, program=loop(OPTIMIZER='keras.optimizers.Adam(@V@, name="opt")'),
             a=Variant("0.05"), b=Variant("0.02"), why="the optimizer's learning rate (built in the first trace)"),
    Scenario("loop_optimizer_beta_1", LIBRARY_STATE,
             program=loop(OPTIMIZER='keras.optimizers.Adam(0.05, beta_1=@V@, name="opt")'),
             a=Variant("0.9"), b=Variant("0.5"), why="an optimizer hyperparameter (Adam's beta_1)"),
    Scenario("loop_optimizer_class", LIBRARY_STATE, program=loop(OPTIMIZER='keras.optimizers.@V@(0.05, name="opt")'),
             a=Variant("Adam"), b=Variant("RMSprop"), why="the optimizer's class (its variables' paths alike)"),
    Scenario("loop_learning_rate_schedule", LIBRARY_STATE,
             program=loop(OPTIMIZER='keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.5, 1, @V@), '
                                    'name="opt")'),
             a=Variant("0.9"), b=Variant("0.5"), why="a learning-rate schedule's decay rate"),
    Scenario("loop_loss_from_logits", LIBRARY_STATE,
             program=loop(LOSS="keras.losses.SparseCategoricalCrossentropy(from_logits=@V@)"),
             a=Variant("True"), b=Variant("False"), why="the loss object's config (from_logits)"),
    Scenario("loop_metric_class", LIBRARY_STATE, program=loop(METRIC='keras.metrics.@V@(name="train_loss")'),
             a=Variant("Mean"), b=Variant("Sum"), why="the metric's class (its variables alike)"),
    Scenario("loop_global_scalar", UNWALKED, program=loop(SCALE="@V@"), a=Variant("1.0"), b=Variant("0.5"),
             why="a global scalar the train step reads beside the Keras objects"),
    Scenario("loop_subclass_code", UNWALKED, program=subclassed(code="@V@"), a=Variant("1.0"), b=Variant("0.5"),
             why="a constant in a user model class's call(), reached through the model the step calls"),
    Scenario("loop_model_attribute", UNWALKED,
             program=subclassed(attribute="@V@").replace("* SCALE\n", "* model.scale\n", 1),
             a=Variant("1.0"), b=Variant("0.5"), why="an attribute of a user model read by the step, not by the model"),
    Scenario("loop_module_attribute", UNWALKED, program=MODULE, a=Variant("0.1"), b=Variant("0.05"),
             why="a tf.Module's attribute (its learning rate) read by a tf.function training it"),
]

MUST_HIT_LOOPS = [
    Scenario("hit_loop_quickstart", MUST_HIT, program=QUICKSTART, a=SAME, b=SAME,
             why="TF's quickstart for experts: its retrace and its test step hit (the first trace builds the model)"),
    Scenario("hit_loop_gan", MUST_HIT, program=GAN, a=SAME, b=SAME,
             why="DCGAN's shape: its optimizers built before the first trace, which hits"),
    Scenario("hit_loop_module", MUST_HIT, program=MODULE.replace("@V@", "0.1"), a=SAME, b=SAME,
             why="a tf.Module trained by a tf.function"),
]
