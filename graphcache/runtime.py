"""graphcache's process-wide state, all of it in one place, and the one ``reset()`` the tests use.

Everything else keeps its state per object (a GraphCache, a Session, a remote tier) or none. What must exist
once per process lives in ``state``:

- ``installed``: what ``graphcache.install()`` set (the cache and experimental_config of sessions given
  neither, and how to undo the install: session/adoption.py);
- ``plugins``: each enabled plugin's process-wide handle by name (``xla``: the XLA directory TensorFlow is
  bound to, since TensorFlow reads its XLA flags once; ``functions``: the function cache every eager call
  goes through), and the plugin modules registered beyond graphcache's own; ``patched``: what graphcache wrapped in TensorFlow, by name, with the original, so it is
  wrapped once; ``collecting``: the run metadata or graph collection the program itself has on (a miss then
  leaves TensorFlow's collector alone: functions/usercollect.py); ``library_writes``: attributes set on a trusted
  library's modules since traces were enabled (keyed: traces/libwrites.py), ``library_watch``: those modules' dicts
  as last compared;
- ``warned``: the kinds of failure already warned about (core/failures.py: a failing disk warns once);
- ``writers``, ``tiers``, ``deferred``, ``fleet_logs``: background writes, remote tiers with uploads,
  deferred builds and counters owed to the fleet still pending, which the exit drain finishes
  (``exit_drains``: its stages, core/exits.py).

This module imports nothing of graphcache: the layers below the core use it too.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any


class ProcessState:
    """The fields named in the module docstring (a plain class: no dataclass machinery at import)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # guards installed, plugins, plugin_modules, patched
        self.installed: Any = None
        self.plugins: dict[str, Any] = {}
        self.plugin_modules: dict[str, str] = {}  # plugins registered by name (core/plugins.py)
        self.patched: dict[str, Any] = {}
        # TensorFlow collection the program turned on itself ("run_metadata", "graphs": functions/usercollect.py)
        self.collecting: set[str] = set()
        # (module, attribute) the program set on a trusted library's modules (traces/libwrites.py)
        self.library_writes: set[tuple[str, str]] = set()
        self.library_watch: Any = None  # the trusted modules' dicts as last compared (traces/libwrites.py)
        self.warned: set[str] = set()
        self.warned_lock = threading.Lock()
        # Weak: a writer, tier or build nobody holds any more has nothing pending (its threads hold it otherwise).
        self.writers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.tiers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.deferred: weakref.WeakValueDictionary[tuple[str, str], Any] = weakref.WeakValueDictionary()
        self.fleet_logs: weakref.WeakSet[Any] = weakref.WeakSet()  # counters owed to the fleet (core/fleetlog.py)
        self.pending_lock = threading.Lock()  # guards writers, tiers, deferred, fleet_logs
        self.exit_drains: dict[str, list[Callable[[], None]]] = {}
        self.exit_lock = threading.Lock()


state = ProcessState()


def reset() -> None:
    """Forget what one test could leak into the next: the warnings given, the install (undone) and the active
    plugins (each handle's ``release()``, where it has one). Pending work (background writes, uploads,
    deferred builds, the exit drain) is kept: it is owed to the cache dirs it writes, not to a test."""
    with state.lock:
        installed, state.installed = state.installed, None
        plugins = list(state.plugins.values())
        state.plugins.clear()
    if installed is not None:
        installed.undo()
    for handle in plugins:
        release = getattr(handle, "release", None)
        if release is not None:
            release()
    with state.warned_lock:
        state.warned.clear()
