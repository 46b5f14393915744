"""graphcache's process-wide state, all of it in one place, and the one ``reset()`` the tests use.

Everything else keeps its state per object (a GraphCache, a Session, a remote tier) or none. What must exist
once per process lives in ``state``:

- ``installed``: what ``graphcache.install()`` set (the cache and experimental_config of sessions given
  neither, and how to undo the install: session/adoption.py);
- ``plugins``: each enabled plugin's process-wide handle by name (``xla``: the XLA directory TensorFlow is
  bound to, since TensorFlow reads its XLA flags once; ``functions``: the function cache every eager call
  goes through), and the plugin modules registered beyond graphcache's own; ``patched``: what graphcache wrapped in TensorFlow, by name, with the original, so it is
  wrapped once;
- ``warned``: the kinds of failure already warned about (core/failures.py: a failing disk warns once);
- ``writers``, ``tiers``, ``deferred``: background writes, remote tiers with uploads and deferred builds
  still pending, which the exit drain finishes (``exit_drains``: its stages, core/exits.py).

This module imports nothing of graphcache: the layers below the core use it too.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProcessState:
    lock: threading.RLock = field(default_factory=threading.RLock)  # guards installed, plugins, patched
    installed: Any = None
    plugins: dict[str, Any] = field(default_factory=dict)
    plugin_modules: dict[str, str] = field(default_factory=dict)  # plugins registered by name (core/plugins.py)
    patched: dict[str, Any] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)
    warned_lock: threading.Lock = field(default_factory=threading.Lock)
    # Weak: a writer, tier or build nobody holds any more has nothing pending (its threads hold it otherwise).
    writers: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    tiers: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    deferred: weakref.WeakValueDictionary[tuple[str, str], Any] = field(
        default_factory=weakref.WeakValueDictionary)
    pending_lock: threading.Lock = field(default_factory=threading.Lock)  # guards writers, tiers, deferred
    exit_drains: dict[str, list[Callable[[], None]]] = field(default_factory=dict)
    exit_lock: threading.Lock = field(default_factory=threading.Lock)


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
