"""TF2 traces cached: a later process gets a tf.function's ConcreteFunction without Python tracing.

``enable(cache)`` (a plugin, core/plugins.py: ``GraphCache(traces=True)``, ``install(traces=True)`` or
``GRAPHCACHE_TRACES=1`` enable it through ``plugins.enable(cache, "traces")``; off by default, docs/tf2-traces.md
says why) makes every top-level trace of a ``tf.function`` look its key up first: the Python function's code and
everything it reaches, the values and attribute chains it reads, its variables by dtype and shape, the
arguments' TraceTypes, the tracing options, the trusted libraries' settings, the trusted packages' identities
and the compiler identity, all computed before tracing. A hit registers the stored function
library in the eager context and calls it by name, bound to this process's variables (no Python runs; the
FuncGraph is built only if something needs it); with the functions
plugin on, its first call is then served from the cache too (tracing and optimization both skipped).
Anything the key cannot cover is traced every time and counted ``trace_uncacheable`` with its reason.

Modules, one job each:

- ``trust``: which packages are named by identity instead of walked (an allowlist, each with its reason);
- ``bytecode``: what a code object reads and writes by name (globals, cells, attribute chains, sets, imports);
- ``walk``: the Python side of the key (code, reached functions and classes, plain values, variables);
- ``stateful``: the library modules and functions of process state a walk refuses to reach;
- ``ambient``: the TensorFlow, Keras and NumPy settings a trace can read, one keyed snapshot;
- ``recording``: what a miss's trace did that its key cannot see (files, untrusted imports, the environment);
- ``instance``: a tf.function method's object in the key (its class, the attributes its code reads);
- ``objects``: Keras objects and tf.Modules a trace reads (custom training loops), keyed whole;
- ``keying``: the key's named parts, and where a trace can be cached at all;
- ``stored``: the entry payload (function library + signatures + captures), its checks, the rebuild;
- ``lazy``: a rebuilt trace called by name, its FuncGraph built only when something needs it;
- ``hook``: the wrapper of ``tracing_compilation._create_concrete_function`` and the hit / miss flows.

Entries (through the cache's entry service, so ls/purge/evict/verify/export/import/push cover them):
``kind="tf_trace"``: key = keying.py's; payload = stored.py's; ``compile_seconds`` = the trace's seconds;
``extra = {"function", "functions", "nodes", "captures", "guards"}`` (guards: what each read path held, for misses).

``GRAPHCACHE_TRACE_VERIFY=1`` traces anyway after every hit and compares (hook.py).

``enable`` installs the wrapper but loads none of the modules above: the plugin's handle is a ``Pending`` one
until the first top-level trace (or ``active()``) makes it the ``TraceCache``, so a process under
``install()`` that never traces a tf.function (a TF1 program run by ``graphcache run``) never loads them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .. import runtime
from ..core import plugins, settings
from ..core.service import EntryService
from ..entry import kinds

if TYPE_CHECKING:
    from .hook import TraceCache

ENV_TRACES = settings.ENV_TRACES
NAME = "traces"  # hook.PLUGIN: the plugin's name, its key in runtime.state.plugins / .patched
KIND = kinds.TF_TRACE  # hook.KIND

_lock = threading.Lock()


class Pending:
    """The plugin's handle from ``enable`` until its first use, which replaces it with hook.py's TraceCache."""

    def __init__(self, cache: EntryService) -> None:
        self.cache = cache

    def release(self) -> None:
        plugins.release(NAME, self)


def __getattr__(name: str) -> Any:
    if name == "TraceCache":  # loaded when asked for (PEP 562), as by the first trace
        from .hook import TraceCache

        return TraceCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def requested(explicit: bool | None = None) -> bool:
    """Whether trace caching is asked for: the argument, else ``GRAPHCACHE_TRACES``, else False."""
    return settings.resolve_flag(explicit, ENV_TRACES)


def active() -> TraceCache | None:
    """The trace cache this process's tf.function traces go through (None when none is)."""
    while True:
        current = runtime.state.plugins.get(NAME)
        if not isinstance(current, Pending):
            return current
        from .hook import TraceCache  # the first use: hook.py and the modules it uses load here

        with _lock:  # as enable
            made = TraceCache(current.cache)
            with runtime.state.lock:  # unless it was released (or replaced) meanwhile: then look again
                if runtime.state.plugins.get(NAME) is current:
                    runtime.state.plugins[NAME] = made


def enable(cache: EntryService, *, replace: bool = False) -> TraceCache | Pending | None:
    """Cache the traces of tf.functions in ``cache`` from now on (idempotent; one cache per process, as the
    functions plugin: a second enable with another dir warns and keeps the first unless ``replace``).
    Functions traced before enable keep their traces. Returns None for a disabled cache."""
    if cache.disabled:
        return None
    with _lock:
        current = plugins.one_per_process(NAME, cache, Pending, replace=replace, what="tf.function traces")
        _install()
        from . import libwrites  # (TensorFlow-importing: this package's import stays light)

        libwrites.install()
        return current


def disable() -> None:
    """Stop caching traces (the wrapper stays installed and passes every trace through)."""
    current = active()
    if current is not None:
        current.release()


def _install() -> None:
    """Wrap ``tracing_compilation._create_concrete_function`` once per process (see hook.py for why there)."""
    patched = runtime.state.patched
    if NAME in patched:
        return
    from tensorflow.python.eager.polymorphic_function import tracing_compilation

    original = tracing_compilation._create_concrete_function

    def create_concrete_function(function_type: Any, type_context: Any, func_graph: Any, tracing_options: Any) -> Any:
        trace_cache = active()
        if trace_cache is None:
            return original(function_type, type_context, func_graph, tracing_options)
        return trace_cache.create(original, function_type, type_context, func_graph, tracing_options)

    create_concrete_function.__wrapped__ = original  # type: ignore[attr-defined]
    tracing_compilation._create_concrete_function = create_concrete_function
    patched[NAME] = original


__all__ = ["ENV_TRACES", "KIND", "TraceCache", "active", "disable", "enable", "requested"]
