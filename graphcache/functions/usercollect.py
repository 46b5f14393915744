"""What TensorFlow collection the program turned on itself (run metadata, graphs): a miss leaves it alone.

A miss turns TensorFlow's graph collector on for its call and exports what was collected (hook.py). Both are
process-wide: the export takes everything collected since the last one, and turning the collector off turns it
off for everyone. With run metadata or graph collection the program turned on itself
(``context.enable_run_metadata()``, ``tf.summary.trace_on(graph=True)``, a profiler), a miss would take the
program's step stats and graphs and stop its collection: TensorFlow's own ``polymorphic_function_test``
``testRunMetadata`` failed so under ``install()``. TensorFlow keeps no Python-side flag of either switch, so the
eager Context's four switches are wrapped once per process to note the program's (``runtime.state.collecting``);
graphcache's own collection calls TensorFlow's C functions directly and is never noted. A first call made while
the program collects runs the normal way, and its function is not stored (counted ``user_collection``).
"""

from __future__ import annotations

from typing import Any

from tensorflow.python import pywrap_tfe
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.eager import context
from tensorflow.python.framework import c_api_util

from .. import runtime

PATCHED = "functions.usercollect"
SWITCHES = {  # Context method -> (what it switches, on)
    "enable_run_metadata": ("run_metadata", True), "disable_run_metadata": ("run_metadata", False),
    "enable_graph_collection": ("graphs", True), "disable_graph_collection": ("graphs", False),
}


def install() -> None:
    """Wrap the Context's collection switches once per process (see the module docstring)."""
    with runtime.state.lock:
        if PATCHED in runtime.state.patched:
            return
        originals = {name: getattr(context.Context, name) for name in SWITCHES}
        for name, original in originals.items():
            setattr(context.Context, name, _noting(original, *SWITCHES[name]))
        runtime.state.patched[PATCHED] = originals


def _noting(original: Any, what: str, on: bool) -> Any:
    def switch(ctx: Any) -> Any:
        result = original(ctx)
        (runtime.state.collecting.add if on else runtime.state.collecting.discard)(what)
        return result

    switch.__wrapped__ = original  # type: ignore[attr-defined]
    return switch


def program_collects() -> bool:
    """Whether the program has run metadata or graph collection on (noted since ``install``)."""
    return bool(runtime.state.collecting)


def collect_graphs(ctx: Any, on: bool) -> None:
    """graphcache's own graph collection on or off (TensorFlow's C switch: not noted as the program's)."""
    handle = ctx._handle  # initialized: the call being collected runs in it
    (pywrap_tfe.TFE_ContextEnableGraphCollection if on else pywrap_tfe.TFE_ContextDisableGraphCollection)(handle)


def export_run_metadata(ctx: Any) -> bytes:
    """What the eager context collected, as a serialized RunMetadata (``Context.export_run_metadata`` without
    its parse: the store parses only the graph it takes, off the caller's path; optimized.pick_collected)."""
    with c_api_util.tf_buffer() as buffer:
        pywrap_tfe.TFE_ContextExportRunMetadata(ctx._handle, buffer)
        return pywrap_tf_session.TF_GetBuffer(buffer)
