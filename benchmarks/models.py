"""Real example models, for the demo, the tests and the benchmarks (nothing is downloaded).

Keras models are built with ``weights=None`` (seeded, so two processes build the same weights) and
frozen to a GraphDef: Keras 3 cannot build layers in TF1 graph mode, so Keras enters as a frozen graph.
The TF1 training graphs are built with ``tf.compat.v1`` ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class FrozenModel:
    name: str
    graph_def: Any  # GraphDef
    feeds: list[str]
    fetches: list[str]
    input_shape: tuple[int, ...]

    def example_input(self, seed: int = 0) -> np.ndarray:
        return np.random.RandomState(seed).rand(*self.input_shape).astype(np.float32)

    def feed_dict(self, seed: int = 0) -> dict[str, np.ndarray]:
        return {self.feeds[0]: self.example_input(seed)}


def _keras_model(kind: str):
    import keras

    keras.utils.set_random_seed(1234)
    if kind == "mlp":
        return keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                                 keras.layers.Dense(10, name="logits")], name="mlp")
    if kind == "cnn":
        return keras.Sequential([
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv1"),
            keras.layers.BatchNormalization(name="bn1"),
            keras.layers.MaxPooling2D(name="pool1"),
            keras.layers.Conv2D(32, 3, activation="relu", name="conv2"),
            keras.layers.GlobalAveragePooling2D(name="gap"),
            keras.layers.Dense(10, name="logits"),
        ], name="cnn")
    if kind == "resnet50":
        return keras.applications.ResNet50(weights=None)
    if kind == "mobilenetv2":
        return keras.applications.MobileNetV2(weights=None)
    if kind == "inceptionv3":
        return keras.applications.InceptionV3(weights=None)
    if kind == "efficientnetb0":
        return keras.applications.EfficientNetB0(weights=None)
    if kind == "densenet121":
        return keras.applications.DenseNet121(weights=None)
    if kind == "bert":
        return bert_encoder()
    # Any other keras.applications constructor by its lower-case name (xception, nasnetmobile, ...): the
    # benchmarks check models their table does not use with these.
    constructors = {name.lower(): name for name in dir(keras.applications) if name[:1].isupper()}
    if kind in constructors:
        return getattr(keras.applications, constructors[kind])(weights=None)
    raise ValueError(f"unknown model {kind!r}: use mlp, cnn, resnet50, mobilenetv2, inceptionv3, "
                     "efficientnetb0, densenet121, bert or another keras.applications name in lower case")


def bert_encoder(layers: int = 12, hidden: int = 768, heads: int = 12, seq_len: int = 128, vocab: int = 30522):
    """A BERT-base-sized Transformer encoder (12 layers, hidden 768) in Keras, taking token ids."""
    import keras

    tokens = keras.Input((seq_len,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, hidden, name="embed")(tokens)
    for i in range(layers):
        attn = keras.layers.MultiHeadAttention(heads, hidden // heads, name=f"attn{i}")(x, x)
        x = keras.layers.LayerNormalization(name=f"ln{i}a")(x + attn)
        ff = keras.layers.Dense(hidden * 4, activation="gelu", name=f"ff{i}a")(x)
        ff = keras.layers.Dense(hidden, name=f"ff{i}b")(ff)
        x = keras.layers.LayerNormalization(name=f"ln{i}b")(x + ff)
    return keras.Model(tokens, x, name="bert")


def freeze_keras(kind: str, batch: int = 1) -> FrozenModel:
    """Build a Keras model and freeze its inference function to a GraphDef."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = _keras_model(kind)
    shape = (batch, *model.input_shape[1:])
    dtype = tf.int32 if kind == "bert" else tf.float32
    fn = tf.function(lambda x: model(x, training=False))
    concrete = fn.get_concrete_function(tf.TensorSpec(shape, dtype, name="input"))
    frozen = convert_variables_to_constants_v2(concrete)
    graph_def = frozen.graph.as_graph_def()
    return FrozenModel(kind, graph_def, [t.name for t in frozen.inputs], [t.name for t in frozen.outputs], shape)


def example_input_for(model: FrozenModel, seed: int = 0) -> np.ndarray:
    if model.name == "bert":
        return np.random.RandomState(seed).randint(0, 30522, size=model.input_shape).astype(np.int32)
    return model.example_input(seed)


@dataclass
class TrainingGraph:
    graph: Any  # tf.Graph
    init: Any
    train: Any
    loss: Any
    weight: Any
    x: Any
    y: Any
    global_step: Any

    def batch(self, seed: int = 0) -> dict[Any, np.ndarray]:
        rng = np.random.RandomState(seed)
        return {self.x: rng.rand(16, 8).astype(np.float32), self.y: rng.rand(16, 1).astype(np.float32)}


def tf1_training_graph(resource_variables: bool = True, optimizer: str = "adam") -> TrainingGraph:
    """A small TF1 regression graph: two dense layers, a loss, an optimizer and a global step."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(7)
        x = v1.placeholder(tf.float32, [None, 8], name="x")
        y = v1.placeholder(tf.float32, [None, 1], name="y")
        init_w1 = np.random.RandomState(1).randn(8, 16).astype(np.float32) * 0.3
        init_w2 = np.random.RandomState(2).randn(16, 1).astype(np.float32) * 0.3
        w1 = v1.get_variable("w1", initializer=init_w1, use_resource=resource_variables)
        b1 = v1.get_variable("b1", initializer=np.zeros(16, np.float32), use_resource=resource_variables)
        w2 = v1.get_variable("w2", initializer=init_w2, use_resource=resource_variables)
        hidden = tf.nn.relu(tf.matmul(x, w1) + b1)
        pred = tf.matmul(hidden, w2)
        loss = tf.reduce_mean(tf.square(pred - y), name="loss")
        global_step = v1.train.get_or_create_global_step()
        opt = v1.train.AdamOptimizer(0.01) if optimizer == "adam" else v1.train.GradientDescentOptimizer(0.1)
        train = opt.minimize(loss, global_step=global_step, name="train")
        init = v1.global_variables_initializer()
    return TrainingGraph(graph, init, train, loss, w1, x, y, global_step)
