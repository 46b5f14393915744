"""CompiledGraph: what a compile returns, and how an optimized graph is run without compiling it again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

from .graphs import Signature


def runtime_config(config: Any = None) -> config_pb2.ConfigProto:
    """A copy of ``config`` with the meta-optimizer and the classic graph optimizer off.

    The graph was already compiled by Grappler: running the optimizers again would pay the compile a
    second time (the very cost the cache removes).
    """
    out = config_pb2.ConfigProto()
    if config is not None:
        out.CopyFrom(config)
    out.graph_options.rewrite_options.disable_meta_optimizer = True
    out.graph_options.rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    out.graph_options.optimizer_options.opt_level = config_pb2.OptimizerOptions.L0
    out.graph_options.optimizer_options.do_constant_folding = False
    out.graph_options.optimizer_options.do_common_subexpression_elimination = False
    return out


@dataclass
class CompiledGraph:
    """The result of ``GraphCache.compile``.

    ``compile_seconds`` is the original compile's time, also on a hit (so a hit can say what it saved).
    """

    key: str
    hit: bool
    graph_def: graph_pb2.GraphDef
    compile_seconds: float
    name: str
    signature: Signature

    @property
    def feeds(self) -> tuple[str, ...]:
        return self.signature.feeds

    @property
    def fetches(self) -> tuple[str, ...]:
        return self.signature.fetches

    @property
    def targets(self) -> tuple[str, ...]:
        return self.signature.targets

    def import_graph(self):
        """A new tf.Graph holding the compiled graph (node names unchanged)."""
        import tensorflow as tf

        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(self.graph_def, name="")
        return graph

    def session(self, config: Any = None, target: str = ""):
        """A tf.compat.v1.Session on the compiled graph, with the optimizers off."""
        import tensorflow as tf

        return tf.compat.v1.Session(target, graph=self.import_graph(), config=runtime_config(config))
