"""The backend interface: a name, its identity-relevant options, and compile()."""

from __future__ import annotations

import abc
from typing import Any

from tensorflow.core.framework import graph_pb2

from .. import graphs
from ..graphs import Signature


class Compiler(abc.ABC):
    name: str = "abstract"

    @abc.abstractmethod
    def options(self) -> dict[str, Any]:
        """Backend settings that change the compiled result (part of the compiler identity)."""

    @abc.abstractmethod
    def compile(self, graph_def: graph_pb2.GraphDef, tf_graph: Any, signature: Signature,
                config: Any = None) -> graph_pb2.GraphDef:
        """Compile ``graph_def`` for ``signature``. ``tf_graph`` is the same graph, imported (validated)."""

    def compile_serialized(self, graph_def: graph_pb2.GraphDef, tf_graph: Any, signature: Signature,
                           config: Any = None) -> bytes:
        """``compile``, returning the compiled GraphDef serialized. Backends that get bytes from TensorFlow
        override this to skip a parse and a serialization of the (possibly large) result."""
        return graphs.serialize(self.compile(graph_def, tf_graph, signature, config))
