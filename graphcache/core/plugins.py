"""Plugins: what a cache can switch on without knowing it.

A plugin is a module with ``enable(cache, **options)``; it registers what it needs on the cache's ``hooks``
and returns its handle (or None when it is not enabled, e.g. for a disabled cache). GraphCache, install()
and a plugin's own API all enable it through ``enable(cache, name)``, the one place that does; nothing
that hosts a plugin imports it, and a plugin imports the core, never its host (the architecture test).
Plugins are found by name: graphcache's own in ``BUILTIN`` (module paths, imported on first use, as fsspec's
``known_implementations``), others as ``register`` adds them (runtime.state.plugin_modules).

The hooks, per cache (``Hooks``):

- ``on_miss(handler)``: called with a ``MissEvent`` when a graph miss is about to write its entry; returns
  extra header fields for the entry (or None). Explaining misses uses it (explain/plugin.py).
- ``on_flush(handler)``: called by ``flush()`` after the background writes, before the uploads are waited
  for. XLA uses it: new executables become entries, and so are uploaded too.
- ``want(name)``: enable a plugin at the first miss rather than now (explaining misses is on by default,
  and costs nothing to a process that only hits).

Exit work joins the exit drain directly (core/exits.py), and groups of entries are declared by their kind
(entry/kinds.py). A handler that raises is logged and skipped (a strict cache's CacheIOError excepted): a
plugin's bug never fails a compile.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from .. import runtime
from ..errors import CacheIOError

log = logging.getLogger("graphcache")

BUILTIN: dict[str, str] = {
    "explain": "graphcache.explain.plugin",  # misses that explain themselves
    "functions": "graphcache.functions",  # TF2 functions' optimized graphs
    "traces": "graphcache.traces",  # TF2 tf.functions' traces (no Python tracing on a hit)
    "xla": "graphcache.xla",  # TensorFlow's XLA executables
}


class MissEvent(NamedTuple):
    """A graph miss about to be written: its ``fingerprint`` (compile/keys.Fingerprint), ``name`` and
    ``signature`` (compile/graphs.Signature)."""

    fingerprint: Any
    name: str
    signature: Any


class Hooks:
    """The hooks one cache's plugins registered (see the module docstring)."""

    def __init__(self) -> None:
        self._miss: list[Callable[[MissEvent], dict[str, Any] | None]] = []
        self._flush: list[Callable[[], object]] = []
        self._wanted: list[str] = []
        self._lock = threading.Lock()
        self.enabled: dict[str, Any] = {}  # plugin name -> its handle

    def on_miss(self, handler: Callable[[MissEvent], dict[str, Any] | None]) -> None:
        with self._lock:
            self._miss.append(handler)

    def on_flush(self, handler: Callable[[], object]) -> None:
        with self._lock:
            if handler not in self._flush:
                self._flush.append(handler)

    def want(self, name: str) -> None:
        with self._lock:
            self._wanted.append(name)

    def miss(self, cache: Any, event: MissEvent) -> dict[str, Any]:
        """Run the miss handlers (enabling wanted plugins first); the extra header fields they return."""
        with self._lock:
            wanted, self._wanted = self._wanted, []
        for name in wanted:
            enable(cache, name)
        extra: dict[str, Any] = {}
        for handler in list(self._miss):
            try:
                extra.update(handler(event) or {})
            except CacheIOError:  # a strict cache's failure: the caller's to see
                raise
            except Exception:  # a plugin's bug must not fail the user's compile
                log.warning("graphcache: a miss hook failed", exc_info=True)
        return extra

    def flush(self) -> None:
        for handler in list(self._flush):
            try:
                handler()
            except CacheIOError:
                raise
            except Exception:
                log.warning("graphcache: a flush hook failed", exc_info=True)


def register(name: str, module: str) -> None:
    """Make the plugin module ``module`` (a dotted path with an ``enable(cache, **options)``) known as ``name``."""
    with runtime.state.lock:
        runtime.state.plugin_modules[name] = module


def enable(cache: Any, name: str, **options: Any) -> Any:
    """Enable the plugin ``name`` for ``cache`` (see the module docstring); its handle, or None."""
    known = {**BUILTIN, **runtime.state.plugin_modules}
    try:
        path = known[name]
    except KeyError:
        raise ValueError(f"unknown graphcache plugin {name!r}: one of {', '.join(sorted(known))}") from None
    handle = importlib.import_module(path).enable(cache, **options)
    if handle is not None:
        cache.hooks.enabled[name] = handle
    return handle


def release(name: str, handle: Any) -> None:
    """Drop ``handle`` as the process's handle of the plugin ``name``, unless another one replaced it already."""
    with runtime.state.lock:
        if runtime.state.plugins.get(name) is handle:
            del runtime.state.plugins[name]


def one_per_process(name: str, cache: Any, make: Callable[[Any], Any], *, replace: bool, what: str) -> Any:
    """The process's one handle of the plugin ``name`` (runtime.state.plugins), on ``cache``, for plugins
    that patch TensorFlow process-wide (TF2 functions, traces): made by ``make(cache)`` when there is none.
    A handle on another cache is kept, with one warning when its dir differs, unless ``replace``
    (``install()`` called again), which releases it. Call it under the plugin's own lock."""
    from .failures import warn_once

    current = runtime.state.plugins.get(name)
    if current is not None and current.cache is not cache:
        if replace:
            current.release()
            current = None
        elif current.cache.cache_dir != cache.cache_dir:
            warn_once(f"{name}_second_enable", f"graphcache: {what} are already cached in "
                                               f"{current.cache.cache_dir}; not switching to {cache.cache_dir}")
    if current is None:
        current = runtime.state.plugins[name] = make(cache)
    return current
