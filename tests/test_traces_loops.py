"""Custom training loops in the shape of TensorFlow's tutorials, served from the trace cache (traces/objects.py).

A ``@tf.function train_step(x, y)`` reading a Keras model, optimizer, loss object and metrics from module globals
(the quickstart for experts, DCGAN's two models and two optimizers), and a ``tf.Module`` trained by a
``@tf.function train(x, y)``: fresh processes (tests.helpers.run_python) with ``GRAPHCACHE_TRACE_VERIFY=1`` (each
hit traced anyway and compared: a stale hit would be an ERROR). A cold process stores the traces, a warm one hits
them, and both train exactly as plain TensorFlow does (losses, metrics, weights, optimizer variables, bitwise).
Key and refusal checks run in this process: each thing a train step reads (the model's architecture, a layer's
config, the optimizer's class and hyperparameters, the loss's config, the metric's class, a user subclass's code,
a global scalar) changed gives another key; the same program rebuilt gives the same key.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from .helpers import run_python, trace_child_preamble

CHILD = '''
import json, logging, warnings
import numpy as np
import tensorflow as tf
import keras

{capture}keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
out = {{}}


class MyModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv1 = keras.layers.Conv2D(3, 3, activation="relu")
        self.flatten = keras.layers.Flatten()
        self.d1 = keras.layers.Dense(8, activation="relu")
        self.d2 = keras.layers.Dense(4)

    def call(self, x):
        return self.d2(self.d1(self.flatten(self.conv1(x))))


# (a) the quickstart for experts: a subclassed model built inside the first trace, metrics, a test step
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


images = rng.random((24, 6, 6, 1), dtype=np.float32)
labels = rng.integers(0, 4, 24)
history = []
for epoch in range(2):
    for metric in (train_loss, train_accuracy, test_loss):
        metric.reset_state()
    for start in range(0, 24, 8):
        train_step(images[start:start + 8], labels[start:start + 8])
    test_step(images[:8], labels[:8])
    history.append([float(train_loss.result()), float(train_accuracy.result()), float(test_loss.result())])
out["quickstart"] = {{"history": history, "weights": [w.numpy().tolist() for w in model.variables],
                     "optimizer": [np.asarray(v).tolist() for v in optimizer.variables], "called": model._called}}

# (b) the same with a functional model and an optimizer built before the first trace: one trace, keyed
inputs = keras.Input((5,))
built = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(6, activation="tanh")(inputs)))
built_optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
built_optimizer.build(built.trainable_variables)
SCALE = 0.5


@tf.function
def built_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(built(x, training=True) - y)) * SCALE
    built_optimizer.apply_gradients(zip(tape.gradient(loss, built.trainable_variables), built.trainable_variables))
    return loss


x5 = tf.constant(rng.standard_normal((8, 5)).astype(np.float32))
y3 = tf.constant(rng.standard_normal((8, 3)).astype(np.float32))
out["built"] = {{"losses": [float(built_step(x5, y3)) for _ in range(3)], "called": built._called,
                "weights": [w.numpy().tolist() for w in built.variables]}}


# (c) a tf.Module trained by a tf.function with a manual SGD update
class Linear(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.fill([3, 1], 0.5))
        self.b = tf.Variable(tf.zeros([1]))
        self.rate = 0.1

    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b


linear = Linear()


@tf.function
def train(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - linear(x)))
    dw, db = tape.gradient(loss, [linear.w, linear.b])
    linear.w.assign_sub(linear.rate * dw)
    linear.b.assign_sub(linear.rate * db)
    return loss


x3 = tf.constant(np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3))
y1 = tf.reduce_sum(x3, axis=1, keepdims=True) * 2.0 + 1.0
out["module"] = {{"losses": [float(train(x3, y1)) for _ in range(4)], "w": linear.w.numpy().tolist()}}

# (d) DCGAN's shape: two Sequential models, two optimizers, one train step
generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, use_bias=False),
                              keras.layers.BatchNormalization(), keras.layers.LeakyReLU(), keras.layers.Dense(6)])
discriminator = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.LeakyReLU(),
                                  keras.layers.Dropout(0.3), keras.layers.Dense(1)])
cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)
generator_optimizer = keras.optimizers.Adam(1e-3)
discriminator_optimizer = keras.optimizers.Adam(1e-3)


@tf.function
def gan_step(real, noise):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake_output = discriminator(generator(noise, training=True), training=True)
        real_output = discriminator(real, training=True)
        gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
        disc_loss = cross_entropy(tf.ones_like(real_output), real_output) + \\
            cross_entropy(tf.zeros_like(fake_output), fake_output)
    generator_optimizer.apply_gradients(zip(gen_tape.gradient(gen_loss, generator.trainable_variables),
                                            generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(disc_tape.gradient(disc_loss, discriminator.trainable_variables),
                                                discriminator.trainable_variables))
    return gen_loss, disc_loss


real = rng.standard_normal((3, 8, 6)).astype(np.float32)
noise = rng.standard_normal((3, 8, 4)).astype(np.float32)
gan_optimizers = generator_optimizer.variables + discriminator_optimizer.variables
out["gan"] = {{"losses": [[float(v) for v in gan_step(real[i], noise[i])] for i in range(3)],
              "optimizers": [np.asarray(v).tolist() for v in gan_optimizers],
              "names": [[v.path, v.name, v._value.name] for v in gan_optimizers],
              "called": [generator._called, discriminator._called]}}

# (e) mixed precision's shape: a LossScaleOptimizer around SGD, the loss scaled and the gradients unscaled by it
scaled_model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(3)])
scaled_optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.5), initial_scale=64.0)


@tf.function
def scaled_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(scaled_model(x, training=True) - y))
        scaled = scaled_optimizer.scale_loss(loss)
    gradients = tape.gradient(scaled, scaled_model.trainable_variables)
    scaled_optimizer.apply_gradients(zip(gradients, scaled_model.trainable_variables))
    return loss


out["scaled"] = {{"losses": [float(scaled_step(x5, y3)) for _ in range(3)],
                 "optimizer": [[v.path, v._value.name, np.asarray(v).tolist()] for v in scaled_optimizer.variables]}}

# (f) plain SGD, never built: its first trace builds it without making variables (a hit builds it the same way)
plain_sgd = keras.optimizers.SGD(0.1)
sgd_model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])


@tf.function
def sgd_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(sgd_model(x) - y))
    plain_sgd.apply_gradients(zip(tape.gradient(loss, sgd_model.trainable_variables), sgd_model.trainable_variables))
    return loss


out["sgd"] = {{"losses": [float(sgd_step(x5, y3)) for _ in range(3)], "built": plain_sgd.built,
              "trains": [v.path for v in plain_sgd._trainable_variables]}}
RESULTS = list(out)
if {use_cache}:
    cache.wait_for_writes()
    stats = cache.stats()
    out.update(traces=stats.traces, reasons=stats.trace_reasons, by_kind=stats.by_kind.get("tf_trace"))
out["errors"] = [m for level, m in messages if level == "ERROR"]
out["log"] = [m for level, m in messages]
out["warnings"] = [str(w.message) for w in seen_warnings if "graphcache" in str(w.message)]
out["results"] = RESULTS
print(json.dumps(out))
'''
VERIFIED = "verified against a fresh trace"


def child(cache_dir, *, verify: bool = True) -> dict:
    code = CHILD.format(capture=trace_child_preamble(cache_dir), use_cache=cache_dir is not None)
    return run_python(code, env={"GRAPHCACHE_TRACE_VERIFY": "1" if verify else "0"}, timeout=600)


def results(out: dict) -> dict:
    return {name: out[name] for name in out["results"]}


def test_tutorial_loops_hit_in_a_later_process_with_plain_results(cache_dir):
    with ThreadPoolExecutor(2) as pool:  # a plain child never touches the cache
        running = [pool.submit(child, None), pool.submit(child, cache_dir)]
        plain, cold = (future.result() for future in running)
    assert results(cold) == results(plain) and not cold["errors"] and not cold["warnings"], cold["log"]
    # Stored: the quickstart's train step (its retrace: the first trace builds the model) and test step, the
    # built step, the module's train, the GAN and loss-scaled steps (their retraces: the first ones create the
    # optimizers' variables; what they built is stored too, under the first trace's key), the SGD step.
    assert cold["traces"]["trace_misses"] == 7, cold["log"]
    assert cold["reasons"] == {"creates_variables": 3}, cold["log"]
    assert cold["by_kind"]["entries"] == 7 + 2, cold["log"]

    warm = child(cache_dir)  # verified: every hit traced anyway and compared
    assert not warm["errors"] and not warm["warnings"], warm["log"]
    assert results(warm) == results(plain), "a hit trains exactly as plain TensorFlow does"
    # The GAN and loss-scaled steps: their optimizers built before the first trace, which hits (one trace, not
    # two); the quickstart's first trace still builds its model (refused), its retrace hits.
    assert sum("before its first trace" in m for m in warm["log"]) == 2, warm["log"]
    assert warm["traces"]["trace_hits"] == 7 and sum(VERIFIED in m for m in warm["log"]) == 7, warm["log"]
    assert warm["reasons"] == {"creates_variables": 3 + 1}, warm["log"]  # the cache's counters: both processes

    fast = child(cache_dir, verify=False)  # no fresh trace: what the hits redo (builds, _called) is theirs alone
    assert results(fast) == results(plain) and not fast["errors"] and not fast["warnings"], fast["log"]
    assert fast["traces"]["trace_hits"] == 2 * 7 and fast["reasons"] == {"creates_variables": 3 + 2}, fast["log"]
    assert fast["quickstart"]["called"] and fast["built"]["called"] and all(fast["gan"]["called"])
    assert fast["sgd"]["built"] and fast["sgd"]["trains"]


# -- keys, in this process -------------------------------------------------------------------------------------
STEP = '''
import tensorflow as tf

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predictions = model(x, training=True)
        loss = loss_object(y, predictions) * SCALE
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    return loss
'''

SUBCLASS = '''
import keras

class Net(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, name="hidden")

    def call(self, x):
        return self.hidden(x) * FACTOR
'''


def _namespace(**changes):
    """The globals of STEP: a small named model, optimizer, loss and metric (names fixed: Keras numbers auto-named
    objects process-wide, and variable paths carry the names), each replaceable."""
    import keras

    def model(units=3, activation="relu"):
        return keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(units, activation=activation, name="d"),
                                 keras.layers.Dense(2, name="o")], name="m")

    built = changes.pop("model", None) or model(**changes.pop("layer", {}))
    namespace = {
        "__name__": "loops_user",  # a module of user code (exec's default is "builtins", a trusted module)
        "model": built,
        "optimizer": changes.pop("optimizer", None) or keras.optimizers.Adam(0.01, name="opt"),
        "loss_object": changes.pop("loss", None) or keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                                                name="loss"),
        "train_loss": changes.pop("metric", None) or keras.metrics.Mean(name="train_loss"),
        "SCALE": changes.pop("scale", 1.0),
    }
    assert not changes, changes
    namespace["optimizer"].build(namespace["model"].trainable_variables)
    exec(STEP, namespace)  # noqa: S102 - the test's own program
    return namespace


def _walk(namespace):
    from graphcache.traces import keying

    return keying.walk_root(namespace["train_step"].python_function)


def _key(**changes) -> str:
    return _walk(_namespace(**changes)).digest()


def _subclass(factor: float, code: str = SUBCLASS):
    scope = {"FACTOR": factor, "__name__": "loops_user"}  # a module of user code (not "builtins", exec's default)
    exec(code, scope)  # noqa: S102 - the test's own program
    model = scope["Net"](name="m")
    model(__import__("numpy").zeros((1, 4), "float32"))
    return model


def test_the_key_covers_what_a_custom_train_step_reads_and_binds_variables_by_path():
    import keras

    walk = _walk(_namespace())
    base = walk.digest()
    assert _key() == base, "the same program rebuilt: the same key"
    namespace = _namespace()
    bindings = _walk(namespace).bindings
    model, optimizer, metric = namespace["model"], namespace["optimizer"], namespace["train_loss"]
    for index, variable in enumerate(model.variables):
        assert bindings[f"g:model/keras:{index}:{variable.path}"] is variable._value
    for index, variable in enumerate(optimizer.variables):
        assert bindings[f"g:optimizer/keras-optimizer:{index}:{variable.path}"] is variable._value
    for index, variable in enumerate(metric.variables):
        assert bindings[f"g:train_loss/keras-metric:{index}:{variable.path}"] is variable._value
    changed = {
        "units": _key(layer={"units": 4}),
        "activation": _key(layer={"activation": "tanh"}),
        "learning_rate": _key(optimizer=keras.optimizers.Adam(0.02, name="opt")),
        "beta_1": _key(optimizer=keras.optimizers.Adam(0.01, beta_1=0.5, name="opt")),
        "optimizer class": _key(optimizer=keras.optimizers.AdamW(0.01, weight_decay=0.0, name="opt")),
        "from_logits": _key(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False, name="loss")),
        "metric class": _key(metric=keras.metrics.Sum(name="train_loss")),
        "scale": _key(scale=2.0),
    }
    assert all(key != base for key in changed.values()), [name for name, key in changed.items() if key == base]
    assert len(set(changed.values())) == len(changed)


def test_a_user_model_class_is_walked_and_its_attributes_read_by_the_step_are_keyed():
    base = _key(model=_subclass(1.0))
    assert _key(model=_subclass(1.0)) == base
    assert _key(model=_subclass(0.5)) != base  # a global its call() reads
    assert _key(model=_subclass(1.0, SUBCLASS.replace("* FACTOR", "* FACTOR + 0.0"))) != base  # its code


def test_refused_with_a_counted_reason():
    import keras
    import tensorflow as tf

    from graphcache.traces import keying
    from graphcache.traces.walk import Uncacheable

    def refused(namespace) -> Uncacheable:
        with pytest.raises(Uncacheable) as caught:
            _walk(namespace)
        return caught.value

    unbuilt = keras.Sequential([keras.layers.Dense(2, name="d")], name="m")
    namespace = {"__name__": "loops_user", "model": unbuilt}
    exec("import tensorflow as tf\n@tf.function\ndef train_step(x):\n    return model(x)\n", namespace)  # noqa: S102
    caught = refused(namespace)
    assert caught.reason == "creates_variables" and "not built" in caught.detail

    class Noisy(keras.layers.Layer):
        def call(self, x):
            self.add_loss(tf.reduce_sum(x))
            return x

    layer = Noisy()
    layer(tf.ones([1, 2]))  # eagerly: the loss stays on the layer
    namespace = {"__name__": "loops_user", "model": layer}
    exec("import tensorflow as tf\n@tf.function\ndef train_step(x):\n    return model(x)\n", namespace)  # noqa: S102
    assert "losses" in refused(namespace).detail

    class Opaque:  # a plain user object read whole is still refused
        pass

    namespace = {"__name__": "loops_user", "model": Opaque()}
    exec("import tensorflow as tf\n@tf.function\ndef train_step(x):\n    return model(x)\n", namespace)  # noqa: S102
    assert refused(namespace).reason == "value"
    assert keying is not None


def test_a_custom_gradient_no_output_depends_on_is_stored_one_an_output_depends_on_is_not():
    import tensorflow as tf

    from graphcache.traces import stored
    from graphcache.traces.walk import Uncacheable

    @tf.custom_gradient
    def clipped(x):
        return tf.identity(x), lambda dy: tf.clip_by_value(dy, -1.0, 1.0)

    v = tf.Variable(1.0)

    @tf.function
    def updates_only(x):
        v.assign(clipped(x))  # what the custom gradient computes reaches a variable only, never an output
        return x * 2.0

    @tf.function
    def returns_it(x):
        return clipped(x) * 2.0

    for function, allowed in ((updates_only, True), (returns_it, False)):
        concrete = function.get_concrete_function(tf.constant(1.0))
        library = stored.library_of(concrete.function_def.signature.name)
        if allowed:
            stored.check_graph(library)
        else:
            with pytest.raises(Uncacheable):
                stored.check_graph(library)


# -- a first trace's build (traces/building.py), in this process ------------------------------------------------
def _built_eagerly(namespace, optimizer):
    """What a first trace's apply_gradients does to ``optimizer``, done eagerly: the tf.Variables it made."""
    from keras.src import backend

    held = {id(variable) for variable in optimizer.variables}
    with backend.name_scope(optimizer.name, caller=optimizer):
        optimizer.build(namespace["model"].trainable_variables)
    optimizer.built = True
    return [variable._value for variable in optimizer.variables if id(variable) not in held]


def _unbuilt_namespace(optimizer):
    namespace = _namespace(optimizer=optimizer)
    namespace["optimizer"] = optimizer = type(optimizer).from_config(optimizer.get_config())  # _namespace built it
    return namespace


def test_a_first_trace_s_optimizer_build_is_learned_stored_and_redone_by_the_same_key():
    import keras

    from graphcache.traces import building

    namespace = _unbuilt_namespace(keras.optimizers.Adam(0.01, name="opt"))
    walk = _walk(namespace)
    before = building.unbuilt(walk)
    assert list(before) == ["g:optimizer"]
    created = _built_eagerly(namespace, namespace["optimizer"])
    namespace["model"]._called = True  # the trace calls the model
    recipe = building.learn(walk, before, created, ["g:model"])
    assert building.decode(building.encode(recipe)) == recipe
    (build,) = recipe.builds
    assert build.optimizer == "g:optimizer" and len(build.variables) == len(namespace["model"].trainable_variables)
    assert build.made == [variable.path for variable in namespace["optimizer"].variables[2:]]  # after iteration, lr

    again = _unbuilt_namespace(keras.optimizers.Adam(0.01, name="opt"))  # a later process: the same key
    walk_again = _walk(again)
    assert walk_again.digest() == walk.digest()
    assert building.apply(walk_again, recipe) and again["optimizer"].built and again["model"]._called
    assert [v.path for v in again["optimizer"].variables] == [v.path for v in namespace["optimizer"].variables]
    assert [v._value.name for v in again["optimizer"].variables] == [v._value.name for v in namespace["optimizer"].variables]
    assert _walk(again).digest() == _walk(namespace).digest(), "built before the trace: the retrace's key"
    assert not building.apply(_walk(again), recipe), "built already: nothing is done again"


def test_first_traces_that_make_other_variables_leave_no_build_to_redo():
    import keras
    import tensorflow as tf

    from graphcache.errors import CorruptEntryError
    from graphcache.traces import building
    from graphcache.traces.walk import Uncacheable

    namespace = _unbuilt_namespace(keras.optimizers.Adam(0.01, name="opt"))
    walk = _walk(namespace)
    before = building.unbuilt(walk)
    created = _built_eagerly(namespace, namespace["optimizer"])
    with pytest.raises(Uncacheable):  # a variable besides the optimizer's (a metric made in the trace, ...)
        building.learn(walk, before, [*created, tf.Variable(1.0)], [])

    class Mine(keras.optimizers.Adam):  # a user class that says how it builds: not redone
        def build(self, variables):
            super().build(variables)

    namespace = _unbuilt_namespace(Mine(0.01, name="opt"))
    walk = _walk(namespace)
    before = building.unbuilt(walk)
    created = _built_eagerly(namespace, namespace["optimizer"])
    with pytest.raises(Uncacheable) as caught:
        building.learn(walk, before, created, [])
    assert "defines how it builds" in caught.value.detail
    with pytest.raises(CorruptEntryError):
        building.decode(building.MAGIC + b"{not json")
