"""TF2 functions compiled once: the optimized graph of every tf.function's first call, cached.

``enable(cache)`` (called by ``GraphCache(functions=True)`` / ``GRAPHCACHE_FUNCTIONS=1``) makes the first
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
from typing import TYPE_CHECKING, Any

from ..core import settings
from ..core.failures import warn_once
from .hook import ALIAS_KIND, KIND, FunctionCache

if TYPE_CHECKING:
    from ..cache import GraphCache

ENV_FUNCTIONS = settings.ENV_FUNCTIONS

_lock = threading.Lock()
_active: FunctionCache | None = None
_original: Any = None


def requested(explicit: bool | None = None) -> bool:
    """Whether TF2 function caching is asked for: the argument, else ``GRAPHCACHE_FUNCTIONS``, else False."""
    return settings.resolve_flag(explicit, ENV_FUNCTIONS)


def active() -> FunctionCache | None:
    """The function cache this process's eager calls go through (None when none is)."""
    return _active


def enable(cache: GraphCache) -> FunctionCache | None:
    """Cache the optimized graphs of TF2 functions' first calls in ``cache`` from now on (idempotent).

    One cache per process: a second enable with another cache dir warns and keeps the first. Functions
    whose kernel already exists (called before enable) are not affected. Returns None when not enabled
    (a disabled cache)."""
    global _active
    if cache.disabled:
        return None
    with _lock:
        if _active is not None:
            if _active.cache.cache_dir != cache.cache_dir:
                warn_once("functions_second_enable", f"graphcache: TF2 functions are already cached in "
                                                     f"{_active.cache.cache_dir}; not switching to {cache.cache_dir}")
            return _active
        _active = FunctionCache(cache)
        _install()
        return _active


def wait_for_writes(timeout: float | None = None) -> bool:
    """Wait for function entries being stored in the background; True when none is left."""
    function_cache = _active
    return True if function_cache is None else function_cache.wait_for_writes(timeout)


def disable() -> None:
    """Stop caching (the wrapper stays installed and passes every call through)."""
    global _active
    with _lock:
        _active = None


def _install() -> None:
    """Wrap ``AtomicFunction.call_flat`` once per process (see hook.py for why there)."""
    global _original
    if _original is not None:
        return
    from tensorflow.python.eager.polymorphic_function import atomic_function

    original = atomic_function.AtomicFunction.call_flat

    def call_flat(atomic: Any, *args: Any) -> Any:
        function_cache = _active
        if function_cache is None:
            return original(atomic, *args)
        return function_cache.call(original, atomic, args)

    call_flat.__wrapped__ = original  # type: ignore[attr-defined]
    atomic_function.AtomicFunction.call_flat = call_flat
    _original = original


__all__ = ["ALIAS_KIND", "ENV_FUNCTIONS", "KIND", "FunctionCache", "active", "disable", "enable", "requested", "wait_for_writes"]
