"""What a miss's trace did that its key cannot see, recorded while it runs: a trace that did any of it is not stored.

The key (walk.py, ambient.py) is computed before tracing from what the function's code names. Code can
reach outside state by paths no static walk follows (a callable looked up in a registry, an object's
method, a library calling back into user code), so the trace that a miss stores is also watched while it
runs, and refused (``recorded``) when it:

- **opened a file** other than Python sources and bytecode (imports, autograph's reading of the function's
  source) and autograph's own generated modules: ``np.load``, ``open``, ``pickle.load`` of a file opened
  inside, anything that reads data the key does not hold. Seen through PEP 578 audit events (``open``);
- **imported a module that trust.py does not trust** (its top-level code ran inside the trace, unwalked);
- **read an environment variable** other than those in ``ALLOWED_ENV`` (read by TensorFlow while tracing,
  and changing no graph): ``os.environ`` and ``os.environb`` are watched on the tracing thread for the trace's
  duration (``posix.environ``, the start-up copy, is a plain dict no watch can see: walked code that reaches
  ``posix`` is refused, stateful.py);
- raised any **other audit event** not in ``HARMLESS_EVENTS`` (sockets, subprocesses, directory listings,
  unpickling, ``ctypes``, ...);
- **read or wrote a variable eagerly**: code under ``tf.init_scope()`` (or any eager context inside the trace)
  that reads a ``tf.Variable``'s value (``v.numpy()``, ``float(v)``) bakes this process's value into the graph,
  and one that assigns it does so once, at trace time; the key holds variables by dtype, shape and device only
  (their values are bound at run time), so neither can be replayed. Seen by watching the resource variable
  class's reads and assignments on the tracing thread while it executes eagerly.

Cost: the audit hook and the environment watch are added once per process, at the first miss, and stay (a hook
cannot be removed, PEP 578); both return at once unless this thread is recording. Python 3.11 has no cheap way to see every function a
trace runs (a profile hook doubles tracing time; 3.12's ``sys.monitoring`` does not), which is why this
records events, not calls.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from .. import runtime
from .trust import is_trusted

# Audit events that read no outside state (introspection, compilation of code the key already holds).
HARMLESS_EVENTS = frozenset({
    "builtins.id", "object.__getattr__", "object.__setattr__", "object.__delattr__", "sys._getframe",
    "sys._getframemodulename", "compile", "exec", "function.__new__", "code.__new__", "marshal.loads",
    "marshal.load", "marshal.dumps", "tempfile.mkstemp", "os.chmod",
})
# Environment variables TensorFlow reads while tracing that change no graph.
ALLOWED_ENV = {
    "AUTOGRAPH_VERBOSITY": "autograph's log verbosity (tensorflow/python/autograph/utils/ag_logging.py)",
    "TF_PS_DISABLE_ASYNC_EXECUTOR_GLOBALLY": "the parameter-server executor's mode (Keras' fit asks it)",
}
SOURCE_SUFFIXES = (".py", ".pyc", ".so")
AUTOGRAPH_PREFIX = "__autograph_generated_file"

PATCH = "trace_recording"  # runtime.state.patched: the audit hook and os.environ's watched class, once a process
_state = threading.local()  # .record: the Record of the trace this thread is running, if any


class Record:
    """What one trace did (``problems()`` names what the key cannot cover)."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.imported: list[str] = []
        self.environment: list[str] = []
        self.events: list[str] = []
        self.variables: list[tuple[str, str]] = []  # (read or assigned, the variable's name)

    def problems(self) -> list[str]:
        found = [f"opened {path}" for path in dict.fromkeys(self.opened)]
        found += [f"imported {name} (not a trusted package: its code is not in the key)"
                  for name in dict.fromkeys(self.imported) if not is_trusted(name)]
        found += [f"read the environment variable {name}" for name in dict.fromkeys(self.environment)
                  if name not in ALLOWED_ENV]
        found += [f"raised the audit event {event}" for event in dict.fromkeys(self.events)]
        found += [f"{access} the variable {name} eagerly ({VARIABLE_ACCESS_WHY[access]})"
                  for access, name in dict.fromkeys(self.variables)]
        return found


def _audit(event: str, args: tuple[Any, ...]) -> None:
    record = getattr(_state, "record", None)
    if record is None or event in HARMLESS_EVENTS:
        return
    if event == "open":
        path, mode = args[0], args[1]
        if _harmless_open(path, mode):
            return
        record.opened.append(str(path))
    elif event == "import":
        record.imported.append(str(args[0]))
    else:
        record.events.append(event)


def _harmless_open(path: Any, mode: Any) -> bool:
    """Reading Python's own files (imports, source for autograph) or writing autograph's generated module."""
    if isinstance(path, int):  # a file descriptor: opened (and recorded) before
        return True
    name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
    reading = mode is None or ("r" in str(mode) and "+" not in str(mode))
    if reading and name.endswith(SOURCE_SUFFIXES):
        return True
    temp = os.path.abspath(tempfile.gettempdir())
    if os.path.abspath(name) == temp:  # tempfile opens the folder itself before autograph writes its module there
        return True
    return os.path.basename(name).startswith(AUTOGRAPH_PREFIX) and os.path.dirname(os.path.abspath(name)) == temp


class _WatchedEnviron(type(os.environ)):  # type: ignore[misc]
    """The class of ``os.environ`` and ``os.environb`` (str and bytes views of one environment) while a trace is
    recorded: reads on the recording thread are noted. ``get``, ``in``, ``copy`` and ``items`` go through
    ``__getitem__`` or ``__iter__``; ``len`` and ``repr`` read the data directly."""

    def __getitem__(self, key: Any) -> Any:
        _note(key)
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[Any]:
        _note("(all of them)")
        return super().__iter__()

    def __len__(self) -> int:
        _note("(all of them: their number)")
        return super().__len__()

    def __repr__(self) -> str:
        _note("(all of them)")
        return super().__repr__()


def _note(key: Any) -> None:
    """A read of the environment, noted while this thread records (its name made only then: every read of
    ``os.environ`` in the process comes through here)."""
    record = getattr(_state, "record", None)
    if record is not None:
        record.environment.append(os.fsdecode(key) if isinstance(key, bytes) else str(key))


def _install() -> None:
    """The audit hook and the watch on ``os.environ``, once a process (neither can be taken back safely: a hook
    never can, and another thread may be reading the environment): both pass everything on unless this thread
    is recording."""
    with runtime.state.lock:
        if PATCH in runtime.state.patched:
            return
        sys.addaudithook(_audit)
        original = type(os.environ)
        for environ in (os.environ, getattr(os, "environb", None)):  # environb: POSIX only
            if environ is not None and type(environ) is _WatchedEnviron.__mro__[1]:
                environ.__class__ = _WatchedEnviron
        _watch_variables()
        runtime.state.patched[PATCH] = original


# The resource variable methods every eager read and assignment goes through (numpy(), value(), read_value(),
# float(v) and v + 1 all read through _read_variable_op), and what each does.
VARIABLE_ACCESS_WHY = {"read": "its value at trace time would be in the graph",
                       "assigned": "once, at trace time: a hit would not assign it"}
WATCHED = "_graphcache_watched"  # marks a wrapper (TensorFlow's own decorators set __wrapped__ too)
VARIABLE_ACCESS = {"_read_variable_op": "read", "sparse_read": "read", "gather_nd": "read", "assign": "assigned",
                   "assign_add": "assigned", "assign_sub": "assigned"}


def _watch_variables() -> None:
    """Wrap the methods where each resource variable class defines them (ResourceVariable holds its own
    references to BaseResourceVariable's: a wrapper on the base alone would not see ``tf.Variable``'s calls)."""
    from tensorflow.python.ops import resource_variable_ops

    classes, queue = [], [resource_variable_ops.BaseResourceVariable]
    while queue:
        cls = queue.pop()
        classes.append(cls)
        queue.extend(sub for sub in cls.__subclasses__() if sub not in classes)
    for cls in classes:
        for name, access in VARIABLE_ACCESS.items():
            method = vars(cls).get(name)
            if callable(method) and not getattr(method, WATCHED, False):
                setattr(cls, name, _watched(method, access))


def _watched(method: Any, access: str) -> Any:
    def watched(variable: Any, *args: Any, **kwargs: Any) -> Any:
        record = getattr(_state, "record", None)
        if record is not None and _eager():
            record.variables.append((access, str(getattr(variable, "name", "?"))))
        return method(variable, *args, **kwargs)

    watched.__wrapped__ = method  # type: ignore[attr-defined]
    setattr(watched, WATCHED, True)
    return watched


def _eager() -> bool:
    from tensorflow.python.eager import context

    return context.executing_eagerly()


@contextlib.contextmanager
def record() -> Iterator[Record]:
    """Record what the code run inside does (this thread only; nested records share the outer one)."""
    outer = getattr(_state, "record", None)
    if outer is not None:
        yield outer
        return
    _install()
    current = Record()
    _state.record = current
    try:
        yield current
    finally:
        _state.record = None


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """graphcache's own work inside a recorded trace (the key and entry read of a nested trace: nested.py) is not
    the trace's: nothing it does is recorded."""
    current = getattr(_state, "record", None)
    _state.record = None
    try:
        yield
    finally:
        _state.record = current


__all__ = ["ALLOWED_ENV", "HARMLESS_EVENTS", "Record", "paused", "record"]
