"""TF2 functions compiled once: the optimized graph of every tf.function's first call, cached.

``enable(cache)`` (a plugin, core/plugins.py: ``GraphCache(functions=True)``, ``GRAPHCACHE_FUNCTIONS=1`` and
``install()`` enable it through ``plugins.enable(cache, "functions")``) makes the first
call of every tf.function / ConcreteFunction run in eager mode (Keras ``predict``/``fit``/``__call__``
step functions, functions of SavedModels loaded with ``tf.saved_model.load``) take its optimized graph
from the cache when it is there and store it when it is not. What is saved is TensorFlow's
OptimizeFunctionGraph stage (function optimization passes, placer, Grappler, graph passes); tracing
(Python) and the rest of the instantiation (partitioning, kernel creation) still run.

Modules, one job each:

- ``keying``: the key of a first call (function library in keys.py's canonical form, argument shapes,
  inputs' dtypes/devices/resource shapes, call options, devices, compiler identity) and the fast alias key;
- ``optimized``: the entry payload (TensorFlow's OptimizedFunctionGraph proto, built from the graph
  TensorFlow's collector hands out), its checks, and TensorFlow's file name;
- ``tfdir``: the private directory TensorFlow's file cache is pointed at during a hit, one file at a time;
- ``hook``: the wrapper of ``Context.call_function`` and the hit / miss flows.

Entries (through GraphCache's entry service, so ls/purge/evict/verify/export/import/push cover them):

- ``kind="tf_function"``: key = the canonical key (keying.py); payload = the OptimizedFunctionGraph
  without its name (optimized.py); ``compile_seconds`` = the first call's seconds (optimization and the
  first run); ``extra = {"nodes", "optimized_nodes", "inputs", "outputs", "library"}``;
- ``kind="tf_function_alias"``: key = the fast key; payload = the canonical key (ASCII, 32 hex digits),
  also in ``extra["target"]``. An alias whose target is gone is a miss that rebuilds both.
"""

from __future__ import annotations

import threading
from typing import Any

from .. import runtime
from ..core import plugins, settings
from ..core.service import EntryService
from . import usercollect
from .hook import ALIAS_KIND, KIND, PLUGIN, FunctionCache

ENV_FUNCTIONS = settings.ENV_FUNCTIONS
NAME = PLUGIN  # the plugin's name (core/plugins.py) and its key in runtime.state.plugins / .patched

_lock = threading.Lock()


def requested(explicit: bool | None = None) -> bool:
    """Whether TF2 function caching is asked for: the argument, else ``GRAPHCACHE_FUNCTIONS``, else False."""
    return settings.resolve_flag(explicit, ENV_FUNCTIONS)


def active() -> FunctionCache | None:
    """The function cache this process's eager calls go through (None when none is)."""
    return runtime.state.plugins.get(NAME)


def enable(cache: EntryService, *, replace: bool = False) -> FunctionCache | None:
    """Cache the optimized graphs of TF2 functions' first calls in ``cache`` from now on (idempotent).

    One cache per process: a second enable with another cache dir warns and keeps the first, unless
    ``replace`` (``install()`` called again), which moves this process's function calls to ``cache``.
    Functions whose kernel already exists (called before enable) are not affected. Returns None when not
    enabled (a disabled cache)."""
    if cache.disabled:
        return None
    with _lock:
        current = plugins.one_per_process(NAME, cache, FunctionCache, replace=replace, what="TF2 functions")
        _install()
        usercollect.install()
        return current


def wait_for_writes(timeout: float | None = None) -> bool:
    """Wait for function entries being stored in the background; True when none is left."""
    function_cache = active()
    return True if function_cache is None else function_cache.wait_for_writes(timeout)


def disable() -> None:
    """Stop caching (the wrapper stays installed and passes every call through)."""
    current = active()
    if current is not None:
        current.release()


def _install() -> None:
    """Wrap ``AtomicFunction.call_flat`` once per process (see hook.py for why there)."""
    patched = runtime.state.patched
    if NAME in patched:
        return
    from tensorflow.python.eager.polymorphic_function import atomic_function

    original = atomic_function.AtomicFunction.call_flat

    def call_flat(atomic: Any, *args: Any) -> Any:
        function_cache = runtime.state.plugins.get(NAME)
        if function_cache is None:
            return original(atomic, *args)
        return function_cache.call(original, atomic, args)

    call_flat.__wrapped__ = original  # type: ignore[attr-defined]
    atomic_function.AtomicFunction.call_flat = call_flat
    patched[NAME] = original


__all__ = ["ALIAS_KIND", "ENV_FUNCTIONS", "KIND", "FunctionCache", "active", "disable", "enable", "requested", "wait_for_writes"]
