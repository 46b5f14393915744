"""The faster miss path compiles exactly what the old one did.

validation.py replaced ``tf.graph_util.import_graph_def`` of the whole graph (the old validation, which
gave Grappler's signature its dtypes and shapes) with TensorFlow's C importer on a light copy. Grappler
sees the graph itself unchanged; what could differ is its signature. These tests compare, on real
models, the signature and the optimized GraphDef of both paths: they must be the same, byte for byte in
protobuf's deterministic serialization.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from benchmarks import models
from graphcache import InvalidGraphError
from graphcache.compile import graphs, validation
from graphcache.compile.compiled import runtime_config
from graphcache.compile.compilers import GrapplerCompiler
from graphcache.core import priority

from .helpers import CONTROL_FLOW_MODEL


def _old_validation(graph_def, signature):
    """The old path: the whole graph imported with import_graph_def, the signature's tensors read from it."""
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    for name in (*signature.feeds, *signature.fetches):
        graph.get_tensor_by_name(name)
    return graph


def assert_same_compile(graph_def, fetches, feeds=(), targets=()):
    signature = graphs.Signature.create(fetches, feeds, targets)
    old = _old_validation(graph_def, signature)
    new = validation.validate(graph_def, signature)
    for name in (*signature.feeds, *signature.fetches):
        assert new.get_tensor_by_name(name).dtype == old.get_tensor_by_name(name).dtype
        assert new.get_tensor_by_name(name).shape.as_proto() == old.get_tensor_by_name(name).shape.as_proto()
    compiler = GrapplerCompiler()
    assert compiler._signature_def(new, signature) == compiler._signature_def(old, signature)  # Grappler's input
    optimized_old = graph_pb2.GraphDef.FromString(compiler.compile_serialized(graph_def, old, signature))
    optimized_new = graph_pb2.GraphDef.FromString(compiler.compile_serialized(graph_def, new, signature))
    # Grappler's output, byte for byte in protobuf's deterministic form (TensorFlow serializes attribute maps
    # in no fixed order: two compiles of the same input differ in raw bytes, never in content)
    assert optimized_new.SerializeToString(deterministic=True) == optimized_old.SerializeToString(deterministic=True)
    return optimized_new


def _control_flow():
    namespace: dict = {}
    exec(CONTROL_FLOW_MODEL, namespace)  # noqa: S102 (the shared test model's source)
    return namespace["build_control_flow_graph"]()


def test_keras_models_compile_the_same(mlp, cnn):
    for model in (mlp, cnn):
        assert_same_compile(model.graph_def, model.fetches, model.feeds)


@pytest.mark.parametrize("resource", [True, False])
def test_tf1_training_graphs_compile_the_same(resource):
    training = models.tf1_training_graph(resource_variables=resource)
    graph_def = training.graph.as_graph_def()
    assert_same_compile(graph_def, [training.loss], [training.x, training.y], [training.train])
    assert_same_compile(graph_def, [], [], [training.init])


def test_control_flow_and_functions_compile_the_same():
    graph_def, feeds, fetches = _control_flow()
    assert_same_compile(graph_def, fetches, feeds)


def _benchmark_model_case(name):
    model = models.freeze_keras(name)
    optimized = assert_same_compile(model.graph_def, model.fetches, model.feeds)
    # and the compiled graph runs, with the outputs of the original graph
    x = models.example_input_for(model)
    outputs = []
    for graph_def, config in ((optimized, runtime_config()), (model.graph_def, None)):  # as graphcache runs it; TF
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            outputs.append(sess.run(model.fetches, {model.feeds[0]: x}))
    got, want = outputs
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_benchmark_model_compiles_the_same():
    _benchmark_model_case("mobilenetv2")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "inceptionv3", "bert", "efficientnetb0", "densenet121"])
def test_every_benchmark_model_compiles_the_same(name):
    _benchmark_model_case(name)


def test_graphs_serialize_writes_protobufs_own_bytes(mlp, cnn):
    """graphs.serialize (one node at a time, faster in upb) is byte for byte SerializeToString, on graphs with
    and without a function library, debug info, the deprecated version field, or nothing at all."""
    training = models.tf1_training_graph(resource_variables=True).graph.as_graph_def()
    control_flow = _control_flow()[0]
    assert control_flow.library.function  # functions and gradients: the library field is written
    odd = graph_pb2.GraphDef()
    odd.CopyFrom(mlp.graph_def)
    odd.version = 7
    odd.debug_info.files.append("model.py")
    empty_library = graph_pb2.GraphDef()
    empty_library.library.SetInParent()  # present but empty: still written, as protobuf writes it
    for graph_def in (mlp.graph_def, cnn.graph_def, training, control_flow, odd, empty_library, graph_pb2.GraphDef()):
        assert graphs.serialize(graph_def) == graph_def.SerializeToString()


def test_grapplers_input_is_the_metagraph_it_was(mlp):
    """The MetaGraphDef handed to Grappler, built from the pieces, parses to the MetaGraphDef with the graph."""
    from graphcache.compile.compilers import grappler

    signature = graphs.Signature.create(mlp.fetches, mlp.feeds)
    rest = GrapplerCompiler._signature_def(validation.validate(mlp.graph_def, signature), signature)
    whole = type(rest)()
    whole.CopyFrom(rest)
    whole.graph_def.CopyFrom(mlp.graph_def)
    assert type(rest).FromString(grappler._metagraph_bytes(mlp.graph_def, rest)) == whole


def test_validation_without_the_c_importer_gives_the_same_tensors(mlp, monkeypatch):
    signature = graphs.Signature.create(mlp.fetches, mlp.feeds)
    fast = validation.validate(mlp.graph_def, signature)

    def unavailable(*args):
        raise validation._CImportUnavailable("test")

    monkeypatch.setattr(validation, "_c_import", unavailable)
    slow = validation.validate(mlp.graph_def, signature)
    for name in (*signature.feeds, *signature.fetches):
        assert (fast.get_tensor_by_name(name).dtype, fast.get_tensor_by_name(name).shape) == \
            (slow.get_tensor_by_name(name).dtype, slow.get_tensor_by_name(name).shape)
    assert fast.get_operations()  # anything else a tf.Graph has comes from the full import, on demand


def test_validation_rejects_what_would_abort_grappler(mlp):
    graph_def = type(mlp.graph_def)()
    graph_def.CopyFrom(mlp.graph_def)
    node = next(n for n in graph_def.node if n.input)
    node.input[0] = "no_such_node"
    signature = graphs.Signature.create(mlp.fetches, mlp.feeds)
    with pytest.raises(InvalidGraphError, match="does not import"):
        validation.validate(graph_def, signature)
    with pytest.raises(InvalidGraphError, match="is not a tensor of the graph"):
        validation.validate(mlp.graph_def, graphs.Signature.create([mlp.fetches[0].split(":")[0] + ":3"],
                                                                   mlp.feeds))


def test_a_constant_with_a_bad_dtype_is_rejected_before_grappler(mlp, cache):
    """A Const whose tensor's dtype is unknown (35) or not its node's passes TensorFlow's importer and aborted
    the process in Grappler's constant folding (found by test_fuzz.py's graph fuzzing): now InvalidGraphError."""
    for dtype in (35, 3):  # not a DataType; int32 where the node says float
        graph_def = type(mlp.graph_def)()
        graph_def.CopyFrom(mlp.graph_def)
        node = next(n for n in graph_def.node if n.op == "Const" and n.attr["dtype"].type == 1)
        node.attr["value"].tensor.dtype = dtype
        with pytest.raises(InvalidGraphError, match=f"constant {node.name!r}"):
            cache.compile(graph_def, mlp.fetches, mlp.feeds)


def test_background_threads_run_below_the_callers_priority():
    """core/priority.py: a background write or build lowers its own thread's priority, not the caller's."""
    if not sys.platform.startswith("linux"):
        pytest.skip("nice is per thread on Linux only")
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []
    worker = threading.Thread(target=priority.in_background(
        lambda: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))))
    worker.start()
    worker.join()
    assert seen == [min(19, caller + priority.NICE_STEP)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller  # the caller is untouched


def _nodes_by_name(graph_def):
    """name -> (op, inputs, device, attrs) with constants by value (dtype, shape, bytes), not by how their
    TensorProto stores them (tensor_content or repeated values)."""
    out = {}
    for node in graph_def.node:
        attrs = {}
        for key, value in node.attr.items():
            if key == "value" and node.op == "Const":
                array = tf.make_ndarray(value.tensor)
                attrs[key] = (array.dtype.str, array.shape, array.tobytes())
            else:
                attrs[key] = value.SerializeToString(deterministic=True)
        out[node.name] = (node.op, list(node.input), node.device, attrs)
    return out


def _compiled_with_and_without_the_tfg_hook(monkeypatch, graph_def, fetches, feeds=(), targets=()):
    from graphcache.compile.compilers import grappler

    signature = graphs.Signature.create(fetches, feeds, targets)
    validated = validation.validate(graph_def, signature)
    compiler = GrapplerCompiler()
    without = graph_pb2.GraphDef.FromString(compiler.compile_serialized(graph_def, validated, signature))
    with monkeypatch.context() as patch:
        patch.setattr(grappler, "_without_tfg_hook", lambda config: config)  # TensorFlow's default: the hook on
        with_hook = graph_pb2.GraphDef.FromString(compiler.compile_serialized(graph_def, validated, signature))
    return with_hook, without


def test_grapplers_mlir_hook_changes_no_compiled_graph(mlp, cnn, monkeypatch):
    """The backend turns Grappler's MLIR (TFG) hook off (compilers/grappler.py: a round trip through MLIR
    that TensorFlow documents as optimizing nothing; DenseNet121's first-ever miss 0.92x the time): on the
    test models, training graphs, control flow and functions, the compiled graph has the same nodes, inputs,
    devices and attributes either way, constants equal by value, and the same library functions."""
    training = models.tf1_training_graph(resource_variables=True)
    control_flow, cf_feeds, cf_fetches = _control_flow()
    mobilenet = models.freeze_keras("mobilenetv2")
    cases = [(mlp.graph_def, mlp.fetches, mlp.feeds, ()), (cnn.graph_def, cnn.fetches, cnn.feeds, ()),
             (training.graph.as_graph_def(), [training.loss], [training.x, training.y], [training.train]),
             (control_flow, cf_fetches, cf_feeds, ()),
             (mobilenet.graph_def, mobilenet.fetches, mobilenet.feeds, ())]
    for graph_def, fetches, feeds, targets in cases:
        with_hook, without = _compiled_with_and_without_the_tfg_hook(monkeypatch, graph_def, fetches, feeds, targets)
        assert _nodes_by_name(without) == _nodes_by_name(with_hook)
        assert sorted(f.signature.name for f in without.library.function) == \
            sorted(f.signature.name for f in with_hook.library.function)
    assert GrapplerCompiler().options()["tfg_hook"] is False  # in the identity: entries of either never mix
