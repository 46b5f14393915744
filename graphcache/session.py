"""graphcache.Session: a drop-in tf.compat.v1.Session whose graphs are compiled through the cache.

How it works. The user's graph G is left alone. The first time a (feeds, fetches, targets) signature
runs, its fan-in is compiled through the cache and the compiled graph is imported, under its own name
scope, into a private run graph R; a tf.compat.v1.Session on R (optimizers off) runs every step. All
signatures live in that one session, so variable state is shared: every variable keeps the shared name
it had in G (its node name when it had none), so the copies in each scope resolve to one variable.
Library functions in compiled graphs are named by their content, so signatures never clash.

The public surface (fetch structures, feed validation, ``run`` options) is tf.compat.v1.Session's own:
only the lowest step, ``_do_run``, is redirected from G to R.

A graph the cache cannot take (resource ops such as tables or iterators; ``GRAPHCACHE_DISABLE=1``)
runs the normal TensorFlow way, on G, with one warning.
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from . import graphs, settings
from .cache import GraphCache, warn_once
from .compiled import runtime_config
from .errors import UnsupportedGraphError

log = logging.getLogger("graphcache")

_STATEFUL_NAMED = frozenset({"VariableV2", "Variable", "VarHandleOp", "TemporaryVariable"})
_scope_ids = itertools.count()


@dataclass(frozen=True)
class _Imported:
    """One compiled signature imported into the run graph under ``scope``."""

    scope: str
    key: str
    hit: bool

    def name(self, original: str) -> str:
        return f"{self.scope}/{original}"


def _pin_shared_names(graph_def) -> None:
    """Give stateful nodes with an empty shared_name their node name, so scoped copies share state.

    TensorFlow resolves such a node's state by node name, which the import scope would change.
    """
    for node in graph_def.node:
        named_by_node = node.op in _STATEFUL_NAMED or "shared_name" in node.attr
        if named_by_node and not node.attr["shared_name"].s:
            node.attr["shared_name"].s = node.name.encode()
        if node.attr.get("use_node_name_sharing") is not None and node.attr["use_node_name_sharing"].b:
            node.attr["use_node_name_sharing"].b = False


class Session(tf.compat.v1.Session):
    """``tf.compat.v1.Session`` that compiles each new signature through a GraphCache before its first run."""

    def __init__(self, target: str = "", graph: Any = None, config: Any = None, *, cache: GraphCache | None = None,
                 cache_dir: Any = None, experimental_config: Any = None) -> None:
        super().__init__(target, graph, config)
        if cache_dir is None and experimental_config is not None:
            cache_dir = experimental_config.graph_compiler_cache_dir
        self._plain = settings.disabled()
        self._cache = None if self._plain else (cache or GraphCache(cache_dir))
        self._user_config = config
        self._run_graph = tf.Graph()
        self._run_session = tf.compat.v1.Session(target, graph=self._run_graph, config=runtime_config(config))
        self._signatures: dict[tuple, _Imported] = {}
        self._prepare_lock = threading.RLock()
        self._checked = False

    @property
    def cache(self) -> GraphCache | None:
        return self._cache

    @property
    def compiled_signatures(self) -> dict[tuple, _Imported]:
        """(feeds, fetches, targets) -> where its compiled graph lives; for inspection and tests."""
        return dict(self._signatures)

    # -- the redirected step -------------------------------------------------------------------------------
    def _do_run(self, handle, target_list, fetch_list, feed_dict, options, run_metadata):
        if handle is not None:
            raise NotImplementedError("graphcache.Session does not support partial_run; use session.run")
        if self._plain:
            return super()._do_run(handle, target_list, fetch_list, feed_dict, options, run_metadata)
        feeds = [ref.deref() for ref in feed_dict]
        signature_key = (
            tuple(sorted(t.name for t in feeds)),
            tuple(sorted({t.name for t in fetch_list})),
            tuple(sorted({op.name for op in target_list})),
        )
        imported = self._signatures.get(signature_key) or self._prepare(signature_key)
        if imported is None:  # the session switched to plain TensorFlow
            return super()._do_run(handle, target_list, fetch_list, feed_dict, options, run_metadata)
        graph = self._run_graph
        run_fetches = [graph.get_tensor_by_name(imported.name(t.name)) for t in fetch_list]
        run_targets = [graph.get_operation_by_name(imported.name(op.name)) for op in target_list]
        run_feeds = {graph.get_tensor_by_name(imported.name(ref.deref().name)).ref(): value
                     for ref, value in feed_dict.items()}
        return self._run_session._do_run(None, run_targets, run_fetches, run_feeds, options, run_metadata)

    def _prepare(self, signature_key: tuple) -> _Imported | None:
        with self._prepare_lock:
            if signature_key in self._signatures:
                return self._signatures[signature_key]
            feeds, fetches, targets = signature_key
            graph_def = self.graph.as_graph_def()
            if not self._checked:
                self._checked = True
                offending = graphs.unsupported_nodes(graph_def)
                if offending:
                    self._go_plain(offending)
                    return None
            try:
                compiled = self._cache.compile(graph_def, fetches, feeds, targets, options=self._user_config,
                                               name="session:" + ",".join(fetches + targets)[:100])
            except UnsupportedGraphError as exc:
                if self._signatures:  # state already lives in the run graph: compile this one uncached there
                    warn_once("resource_ops", f"graphcache: {exc}; compiling this signature without the cache")
                    compiled = self._cache.compile_without_cache(graph_def, fetches, feeds, targets,
                                                                 options=self._user_config)
                else:
                    self._go_plain(exc.nodes)
                    return None
            run_graph_def = compiled.graph_def
            _pin_shared_names(run_graph_def)
            scope = f"graphcache_{next(_scope_ids)}"
            with self._run_graph.as_default():
                tf.graph_util.import_graph_def(run_graph_def, name=scope)
            imported = _Imported(scope, compiled.key, compiled.hit)
            self._signatures[signature_key] = imported
            return imported

    def _go_plain(self, offending: list[tuple[str, str]]) -> None:
        self._plain = True
        warn_once("resource_ops", "graphcache: " + graphs.unsupported_message(offending)
                  + " This session runs it the normal TensorFlow way, without the cache.")
        if self._cache is not None:
            self._cache._count_uncacheable("resource_ops")

    # -- the rest of the Session surface -------------------------------------------------------------------
    def make_callable(self, fetches, feed_list=None, accept_options=False):
        feed_list = list(feed_list or [])

        def call(*args, **kwargs):
            if len(args) != len(feed_list):
                raise TypeError(f"expected {len(feed_list)} feed values, got {len(args)}")
            options = kwargs.pop("options", None) if accept_options else None
            run_metadata = kwargs.pop("run_metadata", None) if accept_options else None
            return self.run(fetches, feed_dict=dict(zip(feed_list, args, strict=True)), options=options,
                            run_metadata=run_metadata)

        return call

    def partial_run_setup(self, fetches, feeds=None):
        raise NotImplementedError("graphcache.Session does not support partial_run; use session.run")

    def close(self) -> None:
        try:
            self._run_session.close()
        finally:
            super().close()
