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

``hooks=[...]`` runs SessionRunHooks the way MonitoredSession does (begin and after_create_session at
construction, before_run/after_run around every ``run``, end at a clean close); runs a hook makes from
inside its callbacks (``run_context.session.run``) bypass the hooks. ``SessionCreator`` builds this
Session for ``tf.compat.v1.train.MonitoredSession``. ``ExperimentalConfig(accelerate_train_mode=...)``
runs training signatures at reduced precision until a ``TellMeStepOrLossHook`` says to switch; each
(signature, precision) pair is its own compile and its own import (graphcache/accelerate/).
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from . import accelerate, graphs
from . import xla as _xla
from .cache import GraphCache
from .compiled import runtime_config
from .core import settings
from .core.failures import warn_once
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
    variant: str = ""  # "" for the original precision, else the mixed-precision rewriter's name
    loss_scaled: bool = False  # feeds accelerate.LOSS_SCALE_FEED and fetches accelerate.ALL_FINITE_FETCH

    def name(self, original: str) -> str:
        return f"{self.scope}/{original}"


def _shares_state(op_types: set[str]) -> bool:
    """Whether a graph with these op types may hold state that _pin_shared_names must name (variables, or
    any op with a ``shared_name`` attribute; unknown op types, such as function calls, count as such)."""
    from tensorflow.python.framework import op_def_registry

    for op in op_types:
        op_def = op_def_registry.get(op)
        if op in _STATEFUL_NAMED or op_def is None or any(
                attr.name in ("shared_name", "use_node_name_sharing") for attr in op_def.attr):
            return True
    return False


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
                 cache_dir: Any = None, experimental_config: Any = None, hooks: Any = None,
                 jit: bool = False) -> None:
        if cache_dir is None and experimental_config is not None:
            cache_dir = experimental_config.graph_compiler_cache_dir
        self._plain = settings.disabled()
        self._cache = None if self._plain else (cache or GraphCache(cache_dir))
        if jit:
            # XLA auto-clustering, executables cached by graphcache. TensorFlow reads the XLA flags
            # before its first op, so this comes before the session exists.
            config = _xla.jit_config(config, cache=self._cache)
        super().__init__(target, graph, config)
        self._user_config = config
        self._run_graph = tf.Graph()
        self._run_session = tf.compat.v1.Session(target, graph=self._run_graph, config=runtime_config(config))
        self._signatures: dict[tuple, _Imported] = {}
        self._prepare_lock = threading.RLock()
        self._checked = False
        mode = getattr(experimental_config, "accelerate", None)
        self._accelerator = accelerate.Accelerator(mode, config) if mode is not None else None
        if self._accelerator is not None and self._plain:
            warn_once("accelerate_plain", f"graphcache: accelerate_train_mode={mode.text!r} is ignored: "
                                          "GRAPHCACHE_DISABLE=1 runs this session the plain TensorFlow way")
            self._accelerator = None
        self._hooks = list(hooks or [])
        self._in_hooks = threading.local()
        self._should_stop = False
        self._exiting_with_error = False
        self._hooks_ended = False
        if self._hooks:
            try:
                with self.graph.as_default():
                    for hook in self._hooks:
                        hook.begin()
                coord = tf.compat.v1.train.Coordinator()
                for hook in self._hooks:
                    hook.after_create_session(self, coord)
            except BaseException:
                self._hooks_ended = True
                self.close()
                raise

    @property
    def accelerator(self) -> accelerate.Accelerator | None:
        """The accelerate_train_mode state (None when off): precision now, switch step/loss, run counts."""
        return self._accelerator

    @property
    def cache(self) -> GraphCache | None:
        return self._cache

    @property
    def compiled_signatures(self) -> dict[tuple, _Imported]:
        """(feeds, fetches, targets) -> where its compiled graph lives; for inspection and tests.

        A reduced-precision variant (accelerate_train_mode) is keyed (feeds, fetches, targets, rewriter).
        """
        return {key if not variant else (*key, variant): imported
                for (key, variant), imported in self._signatures.items()}

    # -- hooks (MonitoredSession's protocol) ---------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if not self._hooks or getattr(self._in_hooks, "active", False):
            return super().run(fetches, feed_dict, options, run_metadata)
        if self._should_stop:
            raise RuntimeError("Run called even after should_stop requested.")
        actual_fetches = {"caller": fetches}
        run_context = tf.compat.v1.train.SessionRunContext(
            original_args=tf.compat.v1.train.SessionRunArgs(fetches, feed_dict), session=self)
        options = options or tf.compat.v1.RunOptions()
        hook_feeds: dict = {}
        self._in_hooks.active = True
        try:
            for hook in self._hooks:
                request = hook.before_run(run_context)
                if request is None:
                    continue
                if request.fetches is not None:
                    actual_fetches[hook] = request.fetches
                if request.feed_dict:
                    if set(hook_feeds) & set(request.feed_dict):
                        raise RuntimeError("Same tensor is fed by two hooks.")
                    hook_feeds.update(request.feed_dict)
                if request.options:
                    options.trace_level = max(options.trace_level, request.options.trace_level)
                    options.timeout_in_ms = max(options.timeout_in_ms, request.options.timeout_in_ms)
        finally:
            self._in_hooks.active = False
        if hook_feeds and feed_dict and set(hook_feeds) & set(feed_dict):
            raise RuntimeError("Same tensor is fed by a SessionRunHook and user.")
        run_feeds = {**hook_feeds, **(feed_dict or {})} if hook_feeds else feed_dict
        run_metadata = run_metadata or tf.compat.v1.RunMetadata()
        outputs = super().run(actual_fetches, run_feeds, options, run_metadata)
        self._in_hooks.active = True
        try:
            for hook in self._hooks:
                hook.after_run(run_context, tf.compat.v1.train.SessionRunValues(
                    results=outputs.get(hook), options=options, run_metadata=run_metadata))
        finally:
            self._in_hooks.active = False
        self._should_stop = self._should_stop or run_context.stop_requested
        return outputs["caller"]

    def should_stop(self) -> bool:
        """True once a hook asked to stop (``run_context.request_stop()``), as in MonitoredSession."""
        return self._should_stop

    def __exit__(self, exec_type, exec_value, exec_tb):
        self._exiting_with_error = exec_type is not None
        return super().__exit__(exec_type, exec_value, exec_tb)

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
        variant = None
        if self._accelerator is not None:
            variant = self._accelerator.variant_for_run(
                self.graph, [t.op.name for t in fetch_list] + [op.name for op in target_list])
        imported = self._signatures.get((signature_key, variant.rewriter if variant else "")) \
            or self._prepare(signature_key, variant)
        if imported is None:  # the session switched to plain TensorFlow
            return super()._do_run(handle, target_list, fetch_list, feed_dict, options, run_metadata)
        graph = self._run_graph
        run_fetches = [graph.get_tensor_by_name(imported.name(t.name)) for t in fetch_list]
        run_targets = [graph.get_operation_by_name(imported.name(op.name)) for op in target_list]
        run_feeds = {graph.get_tensor_by_name(imported.name(ref.deref().name)).ref(): value
                     for ref, value in feed_dict.items()}
        if not imported.loss_scaled:
            return self._run_session._do_run(None, run_targets, run_fetches, run_feeds, options, run_metadata)
        loss_scale = self._accelerator.loss_scale
        run_feeds[graph.get_tensor_by_name(imported.name(accelerate.LOSS_SCALE_FEED)).ref()] = \
            np.float32(loss_scale.value)
        run_fetches.append(graph.get_tensor_by_name(imported.name(accelerate.ALL_FINITE_FETCH)))
        results = self._run_session._do_run(None, run_targets, run_fetches, run_feeds, options, run_metadata)
        loss_scale.update(bool(results.pop()))
        return results

    def _prepare(self, signature_key: tuple, variant: accelerate.Variant | None = None) -> _Imported | None:
        variant_name = variant.rewriter if variant else ""
        with self._prepare_lock:
            if (signature_key, variant_name) in self._signatures:
                return self._signatures[(signature_key, variant_name)]
            feeds, fetches, targets = signature_key
            graph_def = self.graph.as_graph_def()
            if not self._checked:
                self._checked = True
                offending = graphs.unsupported_nodes(graph_def)
                if offending:
                    self._go_plain(offending)
                    return None
            options, label, loss_scaled = self._user_config, ",".join(fetches + targets)[:100], False
            if variant is not None:
                options = accelerate.variant_options(self._user_config, variant)
                label = f"{label[:80]}@{variant.dtype}"
                if variant.loss_scaling:
                    roots = [name.rpartition(":")[0] for name in fetches] + list(targets)
                    graph_def, why_not = accelerate.add_loss_scaling(graph_def, self.graph, roots)
                    loss_scaled = why_not is None
                    if loss_scaled:
                        feeds = (*feeds, accelerate.LOSS_SCALE_FEED)
                        fetches = (*fetches, accelerate.ALL_FINITE_FETCH)
                    else:
                        warn_once("accelerate_no_loss_scale", f"graphcache: accelerate_train_mode trains "
                                  f"{label} in float16 without graphcache's loss scaling: {why_not}")
            try:
                compiled = self._cache.compile(graph_def, fetches, feeds, targets, options=options,
                                               name="session:" + label)
            except UnsupportedGraphError as exc:
                if self._signatures:  # state already lives in the run graph: compile this one uncached there
                    warn_once("resource_ops", f"graphcache: {exc}; compiling this signature without the cache")
                    compiled = self._cache.compile_without_cache(graph_def, fetches, feeds, targets,
                                                                 options=options)
                else:
                    self._go_plain(exc.nodes)
                    return None
            if variant is not None or _shares_state(compiled.op_types()):
                # Parsed and edited in place; import_into then imports the edited GraphDef. Stateless
                # graphs skip this and are imported from their bytes as they are (no parse).
                run_graph_def = compiled.graph_def
                if variant is not None and not accelerate.low_precision_casts(run_graph_def, variant.dtype):
                    warn_once("accelerate_no_casts", f"graphcache: {variant.rewriter} converted nothing in "
                              f"{label} to {variant.dtype}: it trains at the original precision")
                _pin_shared_names(run_graph_def)
            scope = f"graphcache_{next(_scope_ids)}"
            compiled.import_into(self._run_graph, name=scope)
            imported = _Imported(scope, compiled.key, compiled.hit, variant_name, loss_scaled)
            self._signatures[(signature_key, variant_name)] = imported
            return imported

    def _go_plain(self, offending: list[tuple[str, str]]) -> None:
        self._plain = True
        warn_once("resource_ops", "graphcache: " + graphs.unsupported_message(offending)
                  + " This session runs it the normal TensorFlow way, without the cache.")
        if self._accelerator is not None:
            warn_once("accelerate_plain", f"graphcache: accelerate_train_mode={self._accelerator.mode.text!r} "
                                          "is ignored: this graph runs the plain TensorFlow way")
            self._accelerator = None
        if self._cache is not None:
            self._cache.count_uncacheable("resource_ops")

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

    def __del__(self):
        self._hooks_ended = True  # no hook callbacks from the garbage collector
        super().__del__()

    def close(self) -> None:
        if self._hooks and not self._hooks_ended and not self._exiting_with_error and not self._closed:
            self._hooks_ended = True
            self._in_hooks.active = True
            try:
                for hook in self._hooks:
                    hook.end(self)
            finally:
                self._in_hooks.active = False
        try:
            self._run_session.close()
        finally:
            super().close()


class SessionCreator(tf.compat.v1.train.SessionCreator):
    """A MonitoredSession session creator that makes a ``graphcache.Session``.

    Like ``tf.compat.v1.train.ChiefSessionCreator``: finalizes the scaffold, then restores the latest
    checkpoint (``checkpoint_dir`` / ``checkpoint_filename_with_path``) or runs the scaffold's init op,
    feed and init_fn, then its local init op.

        creator = graphcache.SessionCreator(scaffold=None, config=None, experimental_config=cfg)
        with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=[hook]) as sess: ...
    """

    def __init__(self, scaffold: Any = None, master: str = "", config: Any = None, checkpoint_dir: Any = None,
                 checkpoint_filename_with_path: Any = None, *, cache: GraphCache | None = None,
                 cache_dir: Any = None, experimental_config: Any = None) -> None:
        self._scaffold = scaffold or tf.compat.v1.train.Scaffold()
        self._master = master
        self._config = config
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_filename_with_path = checkpoint_filename_with_path
        self._cache = cache
        self._cache_dir = cache_dir
        self._experimental_config = experimental_config

    def create_session(self) -> Session:
        scaffold = self._scaffold
        scaffold.finalize()
        session = Session(self._master, graph=tf.compat.v1.get_default_graph(), config=self._config,
                          cache=self._cache, cache_dir=self._cache_dir,
                          experimental_config=self._experimental_config)
        path = self._checkpoint_filename_with_path
        if path is None and self._checkpoint_dir:
            path = tf.train.latest_checkpoint(self._checkpoint_dir)
        if path and scaffold.saver is not None:
            scaffold.saver.restore(session, path)
        else:
            if scaffold.init_op is not None:
                session.run(scaffold.init_op, feed_dict=scaffold.init_feed_dict)
            if scaffold.init_fn is not None:
                scaffold.init_fn(scaffold, session)
        if scaffold.local_init_op is not None:
            session.run(scaffold.local_init_op, feed_dict=getattr(scaffold, "local_init_feed_dict", None))
        return session
