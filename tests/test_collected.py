"""compile/collected.py: the graph a plain TensorFlow session compiled for a run, made importable.

Each test runs a real TF1 graph in a plain ``tf.compat.v1.Session`` with ``output_partition_graphs`` and
replays what ``importable`` made of it in a new graph and session with the optimizers off (as graphcache's
hits run); outputs are compared bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from graphcache.compile.collected import NotImportable, importable
from graphcache.compile.compiled import runtime_config
from graphcache.compile.identity import onednn_enabled

RNG = np.random.RandomState(0)
IMAGES = RNG.rand(2, 8, 8, 3).astype(np.float32)


def model_graph() -> tf.Graph:
    """A small frozen convnet: its weights are constants, as in a frozen model."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        kernel = tf.constant(RNG.randn(3, 3, 3, 4).astype(np.float32))
        relu = tf.nn.relu(tf.nn.conv2d(x, kernel, 1, "SAME") + 0.1, name="relu")
        pooled = tf.reduce_mean(relu, axis=[1, 2], name="pooled")
        logits = tf.matmul(pooled, tf.constant(RNG.randn(4, 2).astype(np.float32)), name="logits")
        tf.group(logits, name="done")
        parts = tf.split(x, 3, axis=3, name="split")
        tf.reduce_sum(parts[1], name="second_channel")
    return graph


def collect(graph: tf.Graph, fetches: list[str], feeds: dict, targets: list[str] = (), config=None):
    """Plain TensorFlow's outputs for one run, and the partition graphs its session ran."""
    metadata = config_pb2.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        outputs = sess.run([*fetches, *targets], feeds, options=config_pb2.RunOptions(output_partition_graphs=True),
                           run_metadata=metadata)
    return outputs[:len(fetches)], list(metadata.partition_graphs)


def replay(graph_def, fetches: list[str], feeds: dict, targets: list[str] = ()) -> list:
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph, config=runtime_config()) as sess:
        return sess.run([*fetches, *targets], feeds)[:len(fetches)]


def test_a_collected_graph_replays_plain_tensorflows_outputs_bit_for_bit():
    fetches, feeds = ["logits:0", "relu:0", "logits:0"], {"x:0": IMAGES}
    expected, partitions = collect(model_graph(), fetches, feeds)
    graph_def = importable(partitions, list(feeds), fetches)
    ops = {node.name: node.op for node in graph_def.node}
    assert ops["x"] == "Placeholder" and not {"_Arg", "_Retval"} & set(ops.values())
    # What runs is TensorFlow's compiled graph, not the source: pruned to the run (the split, the sum and the
    # group are not in it) and, where TensorFlow resolved oneDNN on (as the cache identity asks it), with
    # oneDNN's kernels for the convolution and the MatMul. With oneDNN off (TensorFlow's default on CPUs
    # without AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX) Grappler leaves this graph's ops as they are.
    source_ops = {node.name: node.op for node in model_graph().as_graph_def().node}
    assert not {"split", "second_channel", "done"} & set(ops)
    if onednn_enabled():
        # oneDNN's own ops (here _MklNativeConv2D and _MklMatMul; fused ones on some CPUs): no plain Conv2D left
        assert "Conv2D" not in ops.values() and any(op.startswith("_Mkl") for op in ops.values()), ops
    else:
        assert ops == {name: source_ops[name] for name in ops}, ops
    got = replay(graph_def, fetches, feeds)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_a_run_of_targets_keeps_them_by_name():
    graph, feeds = model_graph(), {"x:0": IMAGES}
    expected, partitions = collect(graph, ["pooled:0"], feeds, ["done"])
    graph_def = importable(partitions, list(feeds), ["pooled:0"], ["done"])
    assert "done" in {node.name for node in graph_def.node}
    assert np.array_equal(replay(graph_def, ["pooled:0"], feeds, ["done"])[0], expected[0])


def test_a_feed_the_run_does_not_need_stays_feedable():
    """TensorFlow prunes a fed tensor the fetches do not need (no ``_Arg``): it comes back as a Placeholder."""
    graph = model_graph()
    with graph.as_default():
        tf.compat.v1.placeholder(tf.bool, [], name="training")
    feeds = {"x:0": IMAGES, "training:0": True}
    expected, partitions = collect(graph, ["logits:0"], feeds)
    graph_def = importable(partitions, list(feeds), ["logits:0"], feed_types={"training:0": tf.bool.as_datatype_enum})
    training = next(node for node in graph_def.node if node.name == "training")
    assert training.op == "Placeholder" and training.attr["dtype"].type == tf.bool.as_datatype_enum
    assert np.array_equal(replay(graph_def, ["logits:0"], feeds)[0], expected[0])
    _, partitions = collect(graph, ["logits:0"], feeds)
    with pytest.raises(NotImportable, match="'training:0' is not used by the run"):
        importable(partitions, list(feeds), ["logits:0"])  # no dtype for it


def test_what_cannot_stand_in_for_a_compiled_graph_is_refused_with_the_reason():
    feeds = {"split:1": IMAGES[..., :1]}  # a node's second output fed: no Placeholder can carry that name
    _, partitions = collect(model_graph(), ["second_channel:0"], feeds)
    with pytest.raises(NotImportable, match="'split:1' is output 1"):
        importable(partitions, list(feeds), ["second_channel:0"])

    _, partitions = collect(model_graph(), ["logits:0"], {"x:0": IMAGES})
    retval = next(node for node in partitions[0].node if node.op == "_Retval")
    retval.input[0] = "pooled"  # as if TensorFlow's passes had replaced the fetched node by another
    with pytest.raises(NotImportable, match=r"fetch 'logits:0' is computed by \['pooled'\]"):
        importable(partitions, ["x:0"], ["logits:0"])

    _, partitions = collect(model_graph(), ["x:0"], {"x:0": IMAGES})  # a fed tensor fetched back: TensorFlow
    with pytest.raises(NotImportable, match="0 partition graphs"):  # answers it without running a graph
        importable(partitions, ["x:0"], ["x:0"])

    graph = tf.Graph()  # two devices: the run is split into partitions that pass tensors between them
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        with tf.device("/cpu:1"):
            y = tf.square(x, name="y")
        tf.identity(y + 1.0, name="z")
    config = config_pb2.ConfigProto(device_count={"CPU": 2})
    _, partitions = collect(graph, ["z:0"], {"x:0": np.ones(2, np.float32)}, config=config)
    with pytest.raises(NotImportable, match="2 partition graphs"):
        importable(partitions, ["x:0"], ["z:0"])
    with pytest.raises(NotImportable, match="passes tensors between devices"):
        importable(partitions[:1], ["x:0"], ["z:0"])
