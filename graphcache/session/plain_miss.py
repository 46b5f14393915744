"""A Session's miss compiled by running it the plain TensorFlow way, and the compiled graph kept as the entry.

Compiling a miss offline (Grappler through ``TF_OptimizeGraphSerialized``) holds several serialized copies of
the graph at once, on top of what the session already keeps: a Session with several signatures of a big
frozen model peaked well above plain TensorFlow, and took longer (benchmarks/session_collect_probe.py compares
both routes: benchmarks/results/session_collect_probe.txt). So a miss runs the
signature on the Session's own TensorFlow session, over the user's graph, as plain TensorFlow would, asking
for the graph its executor runs (``RunOptions.output_partition_graphs``); compile/collected.py makes that
importable and GraphCache stores it under the signature's key (``compile_by_running``). The signature keeps
running on that session in this process (``RanPlain``): its memory and its results are plain TensorFlow's.
Other processes hit the entry and import it into their run graph like any compiled graph.

Only where the plain session and the run graph cannot disagree: a graph without state shared by name
(variables: a signature run on the user's graph would not share them with those in the run graph), without
GPUs (one partition per run) and without XLA auto-clustering, for a run without ``RunOptions`` or
``RunMetadata`` of the caller's (the partition graphs would have to be kept out of the caller's metadata) and
at the original precision. Everything else compiles offline, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import pywrap_tf_session as tf_session

from ..compile import collected, graphs, identity
from .run_graph import shares_state

if TYPE_CHECKING:
    from ..cache import GraphCache
    from ..compile.compiled import CompiledGraph

log = logging.getLogger("graphcache")


@dataclass(frozen=True)
class RanPlain:
    """A signature whose miss ran on the Session's own TensorFlow session: it keeps running there."""

    key_source: Any  # the entry's key (or its PendingKey); "" when nothing was stored
    hit: bool = False  # as Imported's: a miss, always
    stored: bool = True

    @property
    def key(self) -> str:
        return self.key_source if isinstance(self.key_source, str) else self.key_source.key


def possible(session_config: Any, graph_def: Any) -> bool:
    """Whether a miss of this session's graph may run the plain way (see the module docstring)."""
    if session_config is not None:
        jit = session_config.graph_options.optimizer_options.global_jit_level
        if jit not in (config_pb2.OptimizerOptions.DEFAULT, config_pb2.OptimizerOptions.OFF):
            return False
        if session_config.experimental.disable_output_partition_graphs:  # TensorFlow would refuse the run
            return False
    # resource ops added since the session's first run (which checked the graph then) compile as before
    return (not shares_state({node.op for node in graph_def.node}) and not graphs.unsupported_nodes(graph_def)
            and not identity.gpus())


class PlainRun:
    """One run of a signature on the Session's own TensorFlow session that collects what it compiled.

    ``do_run(options, run_metadata)`` is TensorFlow's ``Session._do_run`` with the run's other arguments bound;
    calling the object runs it (from inside GraphCache's miss, under the key's lock) and returns the compiled
    graph's bytes, or raises ``collected.NotImportable`` after the run, whose outputs are kept either way.
    """

    def __init__(self, do_run: Callable[[Any, Any], Any], feed_dict: dict, feeds: tuple, fetches: tuple,
                 targets: tuple) -> None:
        self._do_run = do_run
        self._signature = (list(feeds), list(fetches), list(targets))
        self._feed_types = {ref.deref().name: ref.deref().dtype.base_dtype.as_datatype_enum for ref in feed_dict}
        self.ran = False
        self.outputs: Any = None

    def __call__(self) -> bytes:
        options = config_pb2.RunOptions(output_partition_graphs=True)
        options_ptr = tf_session.TF_NewBufferFromString(options.SerializeToString())
        metadata_ptr = tf_session.TF_NewBuffer()
        try:
            self.outputs = self._do_run(options_ptr, metadata_ptr)
            self.ran = True
            metadata = config_pb2.RunMetadata.FromString(tf_session.TF_GetBuffer(metadata_ptr))
        finally:
            tf_session.TF_DeleteBuffer(metadata_ptr)
            tf_session.TF_DeleteBuffer(options_ptr)
        return graphs.serialize(collected.importable(list(metadata.partition_graphs), *self._signature,
                                                     self._feed_types))


def compile_by_running(cache: GraphCache, graph: Any, fetches: tuple, feeds: tuple, targets: tuple, options: Any,
                       name: str, plain_run: PlainRun) -> CompiledGraph | None:
    """A hit, or the miss run the plain way with what TensorFlow compiled stored; None when it ran but its graph
    could not be kept (counted as ``not_importable``)."""
    try:
        compiled = cache.compile_by_running(graph, fetches, feeds, targets, run=plain_run, options=options,
                                            name=name)
    except collected.NotImportable as exc:
        log.info("graphcache: %s ran the plain way and is not cached: %s", name, exc)
        cache.count_uncacheable("not_importable")
        return None
    if not compiled.hit:
        compiled.first_run_done()  # the run is over: the entry's write may start
    return compiled
