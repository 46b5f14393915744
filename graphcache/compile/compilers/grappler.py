"""The Grappler backend: TensorFlow's meta-optimizer run offline, as a session would run it.

``tf_optimizer.OptimizeGraph`` without a cluster builds Grappler's default (single-machine) cluster,
which costs seconds on a process's first call for a big model. A virtual cluster described by its devices
is built once per process and costs almost nothing; the rewriters that matter (pruning, constant folding,
remapping, arithmetic, layout) do not measure the hardware, they read its description.

Feeds are declared to Grappler through a signature with dtypes and shapes: an undeclared fed tensor that
is not a placeholder can be folded away. Fetches and targets go into the ``train_op`` collection, so
Grappler keeps them and prunes everything else.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2, device_properties_pb2, meta_graph_pb2

from ...errors import InvalidGraphError
from .. import graphs, identity, wire
from ..graphs import Signature
from .base import Compiler

_CPU_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


class GrapplerCompiler(Compiler):
    name = "grappler"

    def __init__(self) -> None:
        self._cluster = None
        self._lock = threading.Lock()

    def options(self) -> dict[str, Any]:
        return {"cluster": "virtual", "tfg_hook": False}

    def _devices(self) -> list[device_properties_pb2.NamedDevice]:
        devices = [device_properties_pb2.NamedDevice(
            name=_CPU_DEVICE,
            properties=device_properties_pb2.DeviceProperties(
                type="CPU", num_cores=os.cpu_count() or 1, frequency=2000, memory_size=2**34),
        )]
        for index, gpu in enumerate(identity.gpus()):  # the GPUs the compiler identity names
            devices.append(device_properties_pb2.NamedDevice(
                name=f"/job:localhost/replica:0/task:0/device:GPU:{index}",
                properties=device_properties_pb2.DeviceProperties(
                    type="GPU", vendor="NVIDIA", model=gpu.name,
                    frequency=1500, num_cores=100, memory_size=2**34,
                    environment={"architecture": gpu.compute_capability or "0.0"}),
            ))
        return devices

    def _virtual_cluster(self):
        from tensorflow.python.grappler import cluster as gcluster

        if self._cluster is None:
            self._cluster = gcluster.Cluster(devices=self._devices())
        return self._cluster

    def compile(self, graph_def: graph_pb2.GraphDef, tf_graph: Any, signature: Signature,
                config: Any = None) -> graph_pb2.GraphDef:
        return graph_pb2.GraphDef.FromString(self.compile_serialized(graph_def, tf_graph, signature, config))

    def compile_serialized(self, graph_def: graph_pb2.GraphDef, tf_graph: Any, signature: Signature,
                           config: Any = None) -> bytes:
        config = config if config is not None else config_pb2.ConfigProto()
        if not isinstance(config, config_pb2.ConfigProto):
            raise InvalidGraphError(f"options must be a tf.compat.v1.ConfigProto, not {type(config).__name__}")
        metagraph = _metagraph_bytes(graph_def, self._signature_def(tf_graph, signature))
        config = _without_tfg_hook(config)
        with self._lock:  # one Grappler run at a time per cluster object
            try:
                # tf_optimizer.OptimizeGraph without its two round trips through Python protos: it would
                # serialize a MetaGraphDef holding a copy of the graph, and parse the result.
                return _optimize_serialized()(self._virtual_cluster().tf_cluster, config.SerializeToString(),
                                              metagraph, False, b"graph_to_optimize", False)
            except Exception as exc:  # Grappler reports bad graphs as InvalidArgumentError and friends
                raise InvalidGraphError(f"Grappler could not compile the graph: {exc}") from exc

    @staticmethod
    def _signature_def(tf_graph: Any, signature: Signature) -> meta_graph_pb2.MetaGraphDef:
        """A MetaGraphDef without its graph: fetches and targets kept (train_op collection), feeds and
        fetches declared with dtypes and shapes (the "graphcache" signature)."""
        metagraph = meta_graph_pb2.MetaGraphDef()
        keep = metagraph.collection_def["train_op"].node_list.value
        keep.extend(signature.roots())
        spec = metagraph.signature_def["graphcache"]
        for index, name in enumerate(signature.feeds):
            tensor = tf_graph.get_tensor_by_name(name)
            if tensor.dtype.base_dtype.as_datatype_enum == 0:
                raise InvalidGraphError(f"feed {name!r} has no dtype")
            info = spec.inputs[f"feed{index}"]
            info.name = name
            info.dtype = tensor.dtype.base_dtype.as_datatype_enum
            info.tensor_shape.CopyFrom(tensor.shape.as_proto())
        for index, name in enumerate(signature.fetches):
            tensor = tf_graph.get_tensor_by_name(name)
            info = spec.outputs[f"fetch{index}"]
            info.name = name
            info.dtype = tensor.dtype.base_dtype.as_datatype_enum
            info.tensor_shape.CopyFrom(tensor.shape.as_proto())
        return metagraph


def _without_tfg_hook(config: config_pb2.ConfigProto) -> config_pb2.ConfigProto:
    """A copy of ``config`` with Grappler's MLIR hook off (``RewriterConfig.disable_tfg_optimizer``). The hook
    converts the graph to MLIR's TFG dialect and back on every meta-optimizer iteration; TensorFlow documents it
    as running no optimization of its own. On the models tested it changes no node of the compiled graph
    (folded constants kept bit for bit, stored as repeated values rather than ``tensor_content``:
    tests/test_miss_path.py), and with it off a first-ever miss is faster on some models and no slower on the
    others (benchmarks/results/first_ever_ab.txt, written by benchmarks/first_ever_ab.py). It is in the
    backend's options (``tfg_hook``),
    so entries compiled with it and without it never mix."""
    out = config_pb2.ConfigProto()
    out.CopyFrom(config)
    out.graph_options.rewrite_options.disable_tfg_optimizer = True
    return out


_METAGRAPH_GRAPH_DEF = 2  # MetaGraphDef.graph_def's field number (tensorflow/core/protobuf/meta_graph.proto)


def _metagraph_bytes(graph_def: graph_pb2.GraphDef, metagraph: meta_graph_pb2.MetaGraphDef) -> bytes:
    """The serialized MetaGraphDef ``metagraph`` with ``graph_def`` as its graph, built without copying the
    graph into the MetaGraphDef first: protobuf accepts fields in any order, so the graph's field is
    appended to the serialized rest, and the graph's bytes are written once, node by node
    (graphs.serialized_pieces)."""
    pieces = graphs.serialized_pieces(graph_def)
    size = sum(map(len, pieces))
    field = wire.length_delimited_tag(_METAGRAPH_GRAPH_DEF) + wire.varint(size)
    return b"".join((metagraph.SerializeToString(), field, *pieces))


def _optimize_serialized() -> Any:
    from tensorflow.python.grappler import tf_optimizer

    return tf_optimizer.tf_opt.TF_OptimizeGraphSerialized
