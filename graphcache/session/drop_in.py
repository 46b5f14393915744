"""graphcache.Session: a drop-in tf.compat.v1.Session whose graphs are compiled through the cache.

How it works. The user's graph G is left alone. The first time a (feeds, fetches, targets) signature
runs, its fan-in is compiled through the cache and the compiled graph is imported, under its own name
scope, into a private run graph R (graphcache/session/run_graph.py); a plain session on R (optimizers off) runs
every step. A miss of a graph without state shared by name runs the plain way instead, on this session's
own TensorFlow session over G, and stores what TensorFlow compiled for it (plain_miss.py); such a signature
keeps running there. A graph with variables always goes through R, so its signatures share one session and
its variables: each keeps the shared name it had in G (its node name when it had none), so the copies in
each scope resolve to one variable. Large constants are imported once and shared by the signatures that
hold them. Library functions in compiled graphs are named by their content, so signatures never clash.

Faithful to tf.compat.v1.Session. The public surface (fetch structures, feed validation, ``run``
options, the default-session machinery) is TensorFlow's own: only the lowest steps are redirected from G
to R: ``_do_run`` (``run``, ``partial_run``), ``partial_run_setup``, ``make_callable`` and
``_make_callable_from_options``. What comes back refers to G: a run error's ``op`` and ``node_def`` are
G's (TensorFlow's own ``_do_call`` maps the error, after R's names are rewritten to G's), its message
names G's nodes; a partial-run handle is G's too. A non-interactive TensorFlow session places the whole
graph, so a node pinned to a device that does not exist fails every run even when it is not run; so it
does here (checked on G, which R never sees whole). ``InteractiveSession`` is the same over
tf.compat.v1.InteractiveSession (place-pruned, installs itself as the default session).

A graph the cache cannot take (resource ops such as tables or iterators; ``GRAPHCACHE_DISABLE=1``)
runs the normal TensorFlow way, on G, with one warning. So does, silently, a graph too small to be worth
caching (under ``GRAPHCACHE_MIN_NODES`` nodes, default 300, and under a MiB: it compiles faster than the
cache could serve it), decided at the session's first run and counted in stats as ``small_graph``.

``hooks=[...]`` runs SessionRunHooks the way MonitoredSession does (begin and after_create_session at
construction, before_run/after_run around every ``run``, end at a clean close); runs a hook makes from
inside its callbacks (``run_context.session.run``) bypass the hooks. ``SessionCreator`` builds this
Session for ``tf.compat.v1.train.MonitoredSession``. ``ExperimentalConfig(accelerate_train_mode=...)``
runs training signatures at reduced precision until a ``TellMeStepOrLossHook`` says to switch; each
(signature, precision) pair is its own compile and its own import (graphcache/accelerate/).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import session as tf_session_lib

from .. import accelerate, runtime
from ..compile import graphs
from ..compile.compiled import CompiledGraph, runtime_config
from ..compile.heap import release_freed_memory
from ..compile.identity import onednn_enabled
from ..core import settings
from ..core.failures import warn_once
from ..errors import UnsupportedGraphError
from . import plain_miss
from .lazy_cache import SessionCache
from .placement import Placement
from .plain_miss import PlainRun, RanPlain
from .run_graph import Imported, RunGraph, pin_shared_names, retyped, shares_state

if TYPE_CHECKING:
    from ..cache import GraphCache

log = logging.getLogger("graphcache")

def _signature_key(feeds, fetches, targets) -> tuple:
    return (tuple(sorted({t.name for t in feeds})), tuple(sorted({t.name for t in fetches})),
            tuple(sorted({op.name for op in targets})))


def _compile_options(config: Any) -> Any:
    """The ConfigProto a signature is compiled with: the session's, less ``place_pruned_graph`` (placement,
    not compiling: InteractiveSession forces it, and it should not split the cache)."""
    if config is None or not config.graph_options.place_pruned_graph:
        return config
    out = config_pb2.ConfigProto()
    out.CopyFrom(config)
    out.graph_options.place_pruned_graph = False
    return out


class _CachingSession:
    """The graphcache behaviour, mixed into tf.compat.v1.Session and tf.compat.v1.InteractiveSession."""

    def __init__(self, target: str = "", graph: Any = None, config: Any = None, *, cache: GraphCache | None = None,
                 cache_dir: Any = None, experimental_config: Any = None, hooks: Any = None,
                 jit: bool = False) -> None:
        # First, so that close() and __del__ work whatever fails below (a missing cache dir, a bad target).
        self._runner: RunGraph | None = None
        self._hooks = list(hooks or [])
        self._hooks_ended = True
        self._signatures: dict[tuple, Imported] = {}
        self._scope_ids = itertools.count()
        self._partial_runs: dict[str, tuple[str, Imported]] = {}
        if cache is None and cache_dir is None and experimental_config is None:
            installed = runtime.state.installed  # what install() set (adoption.py), if anything
            if installed is not None:
                cache, experimental_config = installed.cache, installed.experimental_config
        if cache_dir is None and experimental_config is not None:
            cache_dir = experimental_config.graph_compiler_cache_dir
        self._plain = settings.disabled()
        self._cache = None if self._plain else SessionCache(cache, cache_dir)  # opened at the first compile
        if jit:
            # XLA auto-clustering, executables cached by graphcache. TensorFlow reads the XLA flags
            # before its first op, so this comes before the session exists.
            from .. import xla  # only a jit session loads the XLA plugin

            config = xla.jit_config(config, cache=self._cache.get())
        super().__init__(target, graph, config)
        self._compile_config = _compile_options(self._config)
        self._runner = RunGraph(target, runtime_config(self._config))
        self._prepare_lock = threading.RLock()
        self._checked = False
        self._min_nodes = settings.min_nodes()  # read here: a bad value fails the construction, not a run
        self._placement = Placement(self._config, self.graph, self.list_devices)  # this session's devices
        mode = getattr(experimental_config, "accelerate", None)
        self._accelerator = None
        if mode is not None:  # its rewriter may not run here (oneDNN): it asks, and counts what ran
            cache = self._cache  # not self: a session its accelerator refers to would only go with the cyclic GC
            self._accelerator = accelerate.Accelerator(mode, config, onednn=onednn_enabled(),
                                                       count=lambda **deltas: cache.get().count(**deltas))
        if self._accelerator is not None and self._plain:
            warn_once("accelerate_plain", f"graphcache: accelerate_train_mode={mode.text!r} is ignored: "
                                          "GRAPHCACHE_DISABLE=1 runs this session the plain TensorFlow way")
            self._accelerator = None
        self._in_hooks = threading.local()
        self._should_stop = False
        self._exiting_with_error = False
        self._hooks_ended = not self._hooks
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
        return None if self._cache is None else self._cache.get()

    @property
    def compiled_signatures(self) -> dict[tuple, Imported]:
        """(feeds, fetches, targets) -> where its compiled graph lives; for inspection and tests.

        A reduced-precision variant (accelerate_train_mode) is keyed (feeds, fetches, targets, rewriter).
        """
        return {key if not variant else (*key, variant): imported
                for (key, variant), imported in self._signatures.items()}

    @property
    def _run_graph(self):
        """The private run graph (tests look inside it)."""
        return self._runner.graph

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

    # -- the redirected steps ------------------------------------------------------------------------------
    def _do_run(self, handle, target_list, fetch_list, feed_dict, options, run_metadata):
        if self._plain:
            return super()._do_run(handle, target_list, fetch_list, feed_dict, options, run_metadata)
        self._check_placement()
        if handle is not None:
            return self._partial_run_step(handle, target_list, fetch_list, feed_dict)
        signature_key = _signature_key([ref.deref() for ref in feed_dict], fetch_list, target_list)
        variant = None
        if self._accelerator is not None:
            variant = self._accelerator.variant_for_run(
                self.graph, [t.op.name for t in fetch_list] + [op.name for op in target_list])
        imported = self._signatures.get((signature_key, variant.rewriter if variant else ""))
        if imported is None:
            plain_run = None
            if variant is None and options is None and run_metadata is None:  # a miss may run it the plain way
                plain_run = PlainRun(functools.partial(super()._do_run, None, target_list, fetch_list, feed_dict),
                                     feed_dict, *signature_key)
            imported = self._prepare(signature_key, variant, plain_run)
            if imported is None:  # the session switched to plain TensorFlow
                return super()._do_run(handle, target_list, fetch_list, feed_dict, options, run_metadata)
            if plain_run is not None and plain_run.ran:  # the miss ran it (plain_miss.py)
                release_freed_memory()  # the source GraphDef, the collected graph's copies (compile/heap.py)
                return plain_run.outputs
            if not isinstance(imported, RanPlain):
                try:
                    return self._run_imported(imported, target_list, fetch_list, feed_dict, options, run_metadata)
                finally:  # the compile, the import and the first run's set-up freed copies of the graph
                    release_freed_memory()
        if isinstance(imported, RanPlain):  # its miss ran the plain way: it keeps running there
            return super()._do_run(handle, target_list, fetch_list, feed_dict, options, run_metadata)
        return self._run_imported(imported, target_list, fetch_list, feed_dict, options, run_metadata)

    def _run_imported(self, imported, target_list, fetch_list, feed_dict, options, run_metadata):
        graph = self._runner.graph
        run_fetches = [graph.get_tensor_by_name(imported.name(t.name)) for t in fetch_list]
        run_targets = [graph.get_operation_by_name(imported.name(op.name)) for op in target_list]
        run_feeds = {graph.get_tensor_by_name(imported.name(ref.deref().name)).ref(): value
                     for ref, value in feed_dict.items()}
        if not imported.loss_scaled:
            return self._call_run_graph(self._runner.run, options, run_feeds, run_fetches, run_targets, run_metadata)
        loss_scale = self._accelerator.loss_scale
        run_feeds[graph.get_tensor_by_name(imported.name(accelerate.LOSS_SCALE_FEED)).ref()] = \
            np.float32(loss_scale.value)
        run_fetches.append(graph.get_tensor_by_name(imported.name(accelerate.ALL_FINITE_FETCH)))
        results = self._call_run_graph(self._runner.run, options, run_feeds, run_fetches, run_targets, run_metadata)
        loss_scale.update(bool(results.pop()))
        return results

    def _check_placement(self) -> None:
        message = self._placement.misplaced()
        if message is not None:
            raise self._user_error(tf.errors.InvalidArgumentError(None, None, message))

    def _call_run_graph(self, fn, *args):
        """``fn(*args)`` on the run graph, its TensorFlow errors turned into errors about the user's graph.

        The run graph's names are rewritten to the user's, then TensorFlow's own ``_do_call`` of this session
        (whose graph is the user's) finds the op, fills ``op``/``node_def`` and interpolates the message,
        exactly as for a plain session.
        """
        run, graph = self._runner, self.graph

        def translated(*call_args):
            try:
                return fn(*call_args)
            except tf.errors.OpError as exc:
                if self._closed:  # closed by another thread after this run began
                    raise RuntimeError("Attempted to use a closed Session.") from None
                raise retyped(exc, run.user_message(exc.message, graph)) from None

        return self._do_call(translated, *args)

    def _prepare(self, signature_key: tuple, variant: accelerate.Variant | None = None,
                 plain_run: PlainRun | None = None) -> Imported | RanPlain | None:
        variant_name = variant.rewriter if variant else ""
        with self._prepare_lock:
            if (signature_key, variant_name) in self._signatures:
                return self._signatures[(signature_key, variant_name)]
            feeds, fetches, targets = signature_key
            graph_def = self.graph.as_graph_def()
            if not self._checked:
                self._checked = True
                if self._accelerator is None and graphs.too_small(graph_def, self._min_nodes):
                    self._plain = True  # accelerate_train_mode needs the compile path: never small
                    self._cache.count_uncacheable("small_graph")
                    return None
                offending = graphs.unsupported_nodes(graph_def)
                if offending:
                    self._go_plain(offending)
                    return None
            options, label, loss_scaled = self._compile_config, ",".join(fetches + targets)[:100], False
            if variant is not None:
                graph_def, feeds, fetches, options, label, loss_scaled = accelerate.variant_signature(
                    variant, self._compile_config, graph_def, self.graph, feeds, fetches, targets, label)
            cache = self._compiling_cache()
            if plain_run is not None and plain_miss.possible(self._config, graph_def):
                handed, graph_def = graphs.Handover(graph_def), None  # the cache lets go of it before the run
                compiled = plain_miss.compile_by_running(cache, handed, fetches, feeds, targets, options,
                                                         "session:" + label, plain_run)
                if compiled is None or not compiled.hit:  # ran plain: it stays on TensorFlow's own session
                    ran = RanPlain(compiled.key_source if compiled is not None else "", stored=compiled is not None)
                    self._signatures[(signature_key, variant_name)] = ran
                    return ran
            else:
                compiled = self._compile(cache, graph_def, fetches, feeds, targets, options, label)
            if compiled is None:  # the session switched to plain TensorFlow
                return None
            del graph_def  # a frozen model's weights: not held while the compiled graph is imported
            run_graph_def = None
            if variant is not None or shares_state(compiled.op_types()):
                # Parsed and edited in place, then imported. Stateless graphs skip this and are imported
                # from their bytes as they are (no parse) when nothing can be shared.
                run_graph_def = compiled.graph_def
                if variant is not None and not accelerate.low_precision_casts(run_graph_def, variant.dtype):
                    warn_once("accelerate_no_casts", f"graphcache: {variant.rewriter} converted nothing in "
                              f"{label} to {variant.dtype}: it trains at the original precision")
                pin_shared_names(run_graph_def)
            scope = f"graphcache_{next(self._scope_ids)}"  # unique in this session's run graph
            keep = {name.rpartition(":")[0] for name in (*feeds, *fetches)} | set(targets)
            self._runner.add(compiled, scope, keep, run_graph_def)
            imported = Imported(scope, compiled.key_source, compiled.hit, variant_name, loss_scaled)
            self._signatures[(signature_key, variant_name)] = imported
            return imported

    def _compiling_cache(self) -> GraphCache:
        """The cache, once earlier entries' writes (each holds its payload) are over: not during a compile (heap.py)."""
        cache = self._cache.get()
        if cache.pending_writes:
            cache.wait_for_writes()
        return cache

    def _compile(self, cache: GraphCache, graph_def: Any, fetches: tuple, feeds: tuple, targets: tuple,
                 options: Any, label: str) -> CompiledGraph | None:
        """One signature compiled through the cache (a CompiledGraph); None when the session went plain."""
        try:
            compiled = cache.compile(graph_def, fetches, feeds, targets, options=options, name="session:" + label)
        except UnsupportedGraphError as exc:
            if self._signatures:  # state already lives in the run graph: compile this one uncached there
                warn_once("resource_ops", f"graphcache: {exc}; compiling this signature without the cache")
                return cache.compile_without_cache(graph_def, fetches, feeds, targets, options=options)
            self._go_plain(exc.nodes)
            return None
        if not compiled.hit:  # Grappler's freed working copies go back to the OS first (compile/heap.py)
            release_freed_memory()
        return compiled

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

    # -- partial runs --------------------------------------------------------------------------------------
    def partial_run_setup(self, fetches, feeds=None):
        if self._plain:
            return super().partial_run_setup(fetches, feeds)
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        if self.graph.version == 0:
            raise RuntimeError("The Session graph is empty. Add operations to the graph before calling run().")
        feed_tensors = _partial_run_feeds(self.graph, feeds)
        handler = tf_session_lib._FetchHandler(self.graph, fetches, {})  # TensorFlow's own fetch validation
        fetch_tensors, targets = handler.fetches(), handler.targets()
        self._check_placement()
        signature_key = _signature_key(feed_tensors, fetch_tensors, targets)
        imported = self._signatures.get((signature_key, ""))
        if imported is None:
            imported = self._prepare(signature_key)
            release_freed_memory()
        if imported is None or isinstance(imported, RanPlain):
            return super().partial_run_setup(fetches, feeds)
        graph = self._runner.graph
        handle = self._call_run_graph(
            self._runner.partial_run_setup, [graph.get_tensor_by_name(imported.name(t.name)) for t in feed_tensors],
            [graph.get_tensor_by_name(imported.name(t.name)) for t in fetch_tensors],
            [graph.get_operation_by_name(imported.name(op.name)) for op in targets])
        user_handle = self._runner.user_message(handle, self.graph)  # the handle names tensors too
        self._partial_runs[user_handle] = (handle, imported)
        return user_handle

    def _partial_run_step(self, handle, target_list, fetch_list, feed_dict):
        known = self._partial_runs.get(handle)
        if known is None:  # not ours: TensorFlow's own error for a handle it never gave out
            return super()._do_run(handle, target_list, fetch_list, feed_dict, None, None)
        if target_list:
            raise RuntimeError("partial_run() requires empty `target_list`. "
                               f"Received: target_list={target_list} (non-empty)")
        run_handle, imported = known
        graph = self._runner.graph

        def run_tensor(tensor, what):
            try:
                return graph.get_tensor_by_name(imported.name(tensor.name))
            except KeyError:  # pruned by the compile: not part of this partial run, as TensorFlow would say
                raise self._user_error(tf.errors.InvalidArgumentError(
                    None, None, f"The {what} {tensor.name} was not specified in partial_run_setup.")) from None

        run_feeds = {run_tensor(ref.deref(), "feed").ref(): value for ref, value in feed_dict.items()}
        run_fetches = [run_tensor(t, "fetch") for t in fetch_list]
        return self._call_run_graph(self._runner.partial_run, run_handle, run_feeds, run_fetches)

    def _user_error(self, error: tf.errors.OpError) -> tf.errors.OpError:
        """``error`` as TensorFlow's ``_do_call`` would raise it for this session's graph."""
        def fail():
            raise error

        try:
            self._do_call(fail)
        except tf.errors.OpError as mapped:
            return mapped
        return error

    # -- callables -----------------------------------------------------------------------------------------
    def make_callable(self, fetches, feed_list=None, accept_options=False):
        if self._plain or feed_list is not None:
            return super().make_callable(fetches, feed_list, accept_options)  # with feeds: TF goes through run()
        tf_session_lib._FetchHandler(self.graph, fetches, {})  # bad fetches fail here, as in TF
        run = self.run  # hooks included, as for the callables TensorFlow makes with a feed_list
        if accept_options:
            def call_with_options(options=None, run_metadata=None):
                return run(fetches, options=options, run_metadata=run_metadata)

            return call_with_options
        return lambda: run(fetches)

    def _make_callable_from_options(self, callable_options):
        if self._plain:
            return super()._make_callable_from_options(callable_options)
        graph = self.graph
        feeds = [graph.as_graph_element(name, allow_operation=False) for name in callable_options.feed]
        fetches = [graph.as_graph_element(name, allow_operation=False) for name in callable_options.fetch]
        targets = [graph.as_graph_element(name, allow_tensor=False) for name in callable_options.target]
        connected = [(graph.as_graph_element(c.from_tensor, allow_operation=False),
                      graph.as_graph_element(c.to_tensor, allow_operation=False))
                     for c in callable_options.tensor_connection]
        if self._accelerator is not None:  # the precision switch and loss scaling happen per run
            return _RunCallable(self, feeds, fetches, targets, callable_options.run_options) if not connected \
                else super()._make_callable_from_options(callable_options)
        self._check_placement()
        signature_key = _signature_key(feeds + [to for _, to in connected], fetches + [f for f, _ in connected],
                                       targets)
        imported = self._signatures.get((signature_key, ""))
        if imported is None:
            imported = self._prepare(signature_key)
            release_freed_memory()
        if imported is None or isinstance(imported, RanPlain):
            return super()._make_callable_from_options(callable_options)
        scoped = config_pb2.CallableOptions()
        scoped.CopyFrom(callable_options)
        del scoped.feed[:], scoped.fetch[:], scoped.target[:], scoped.tensor_connection[:]
        scoped.feed.extend(imported.name(t.name) for t in feeds)
        scoped.fetch.extend(imported.name(t.name) for t in fetches)
        scoped.target.extend(imported.name(op.name) for op in targets)
        for from_tensor, to_tensor in connected:
            scoped.tensor_connection.add(from_tensor=imported.name(from_tensor.name),
                                         to_tensor=imported.name(to_tensor.name))
        for devices in (scoped.feed_devices, scoped.fetch_devices):
            named = {imported.name(graph.as_graph_element(k, allow_operation=False).name): v
                     for k, v in devices.items()}
            devices.clear()
            devices.update(named)
        return self._call_run_graph(self._runner.make_callable, scoped, self.graph)

    # -- closing -------------------------------------------------------------------------------------------
    def __del__(self):
        self._hooks_ended = True  # no hook callbacks from the garbage collector
        if "_session" in self.__dict__:  # else construction failed before TensorFlow's session existed
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
            if "_session" in self.__dict__:
                super().close()
        finally:
            if self._runner is not None:
                self._runner.close()
            if self._cache is not None:
                self._cache.close()


class Session(_CachingSession, tf.compat.v1.Session):
    """``tf.compat.v1.Session`` that compiles each new signature through a GraphCache before its first run."""

    def __exit__(self, exec_type, exec_value, exec_tb):
        self._exiting_with_error = exec_type is not None
        return super().__exit__(exec_type, exec_value, exec_tb)


class InteractiveSession(_CachingSession, tf.compat.v1.InteractiveSession):
    """``tf.compat.v1.InteractiveSession`` (the default session from construction on, place-pruned) that
    compiles each new signature through a GraphCache before its first run."""


class _RunCallable:
    """A ``_make_callable_from_options`` callable that goes through ``run`` (accelerate_train_mode sessions:
    the precision switch and the loss scale are decided per run). Returns the fetched values as a list."""

    def __init__(self, session: Any, feeds: list, fetches: list, targets: list, run_options: Any) -> None:
        self._session_run = super(_CachingSession, session).run
        self._feeds, self._fetches, self._targets = feeds, fetches, targets
        self._options = run_options if run_options.ByteSize() else None

    def __call__(self, *args, run_metadata=None):
        if len(args) != len(self._feeds):
            raise TypeError(f"expected {len(self._feeds)} feed values, got {len(args)}")
        results = self._session_run(self._fetches + self._targets, feed_dict=dict(zip(self._feeds, args, strict=True)),
                            options=self._options, run_metadata=run_metadata)
        return results[:len(self._fetches)]


def _partial_run_feeds(graph: Any, feeds: Any) -> list:
    """The feed tensors of ``partial_run_setup(fetches, feeds)``, expanded as TensorFlow expands them."""
    if feeds is None:
        feeds = []
    if not isinstance(feeds, list | tuple):
        feeds = [feeds]
    out = []
    for feed in feeds:
        expand = next((fn for kind, _, _, fn in tf_session_lib._REGISTERED_EXPANSIONS if isinstance(feed, kind)), None)
        if expand is None:
            raise TypeError(f'Feed argument {feed} has invalid type "{type(feed).__name__}"')
        for subfeed in expand(feed):
            out.append(graph.as_graph_element(subfeed, allow_tensor=True, allow_operation=False))
    return out


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
