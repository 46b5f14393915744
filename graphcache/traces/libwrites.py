"""Attributes the program set on a trusted library's modules (``tf.nn.relu = my_relu``): keyed as the values they hold.

trust.py names TensorFlow, Keras and NumPy by the identity of their installed files instead of walking their code.
That identity says nothing of what their modules hold at run time: library code resolves names through module
attributes when it runs (Keras' TensorFlow backend calls ``tf.nn.relu`` at trace time), so a program that replaces
one changes what a trace of untouched library code builds. A trace made before the patch was served after it,
stale (``tf.nn.relu`` wrapped to double its result, then a Keras ``Dense(activation="relu")`` model's ``predict``).

So each module of a trusted package that is loaded when traces are enabled gets a module class of its own whose
``__setattr__`` and ``__delattr__`` note the attribute's path (``runtime.state.library_writes``) before doing what
the plain module class does; reads are untouched. At each key (keying.py), every noted attribute whose value now is
not the library's own (a module, or a function or class defined by a trusted package's files) is keyed as walk.py
keys any value it reads, under ``lib:<module>.<name>``: a user function by its code, a plain value exactly, anything
else refused. Writes of library objects (TensorFlow's lazy loaders filling in their modules) are left out.

Not seen: an attribute set before traces were enabled (``graphcache run`` enables them before the program runs;
``install()`` after a patch misses it), on a module loaded after, or a module's ``__dict__`` written directly.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .. import runtime
from .trust import defines, is_trusted
from .walk import Walk

PATCHED = "traces.libwrites"
WATCHED_PACKAGES = ("tensorflow", "keras", "numpy")  # the packages whose code looks names up in their modules


class _WatchedModule(types.ModuleType):
    """A trusted module that notes writes to its attributes (reads are the plain module's)."""

    def __setattr__(self, name: str, value: Any) -> None:
        runtime.state.library_writes.add((self.__name__, name))
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        runtime.state.library_writes.add((self.__name__, name))
        super().__delattr__(name)


def install() -> None:
    """Watch the loaded modules of the trusted packages, once per process (see the module docstring)."""
    with runtime.state.lock:
        if PATCHED in runtime.state.patched:
            return
        for name, module in list(sys.modules.items()):
            if type(module) is types.ModuleType and name.partition(".")[0] in WATCHED_PACKAGES:
                module.__class__ = _WatchedModule  # lazy loaders (ModuleType subclasses) are left alone
        runtime.state.patched[PATCHED] = True


def key(walk: Walk) -> None:
    """Every noted attribute that now holds something other than the library's own, into ``walk``."""
    for module_name, name in sorted(runtime.state.library_writes):
        module = sys.modules.get(module_name)
        value = getattr(module, name, _MISSING) if module is not None else _MISSING
        if value is _MISSING:
            walk.value(("deleted library attribute", module_name, name), f"lib:{module_name}.{name}")
        elif not _library_own(value):
            walk.value(value, f"lib:{module_name}.{name}")


_MISSING = object()


def _library_own(value: Any) -> bool:
    """A module, or a function or class whose code a trusted package's files define: what the library itself puts
    in its modules."""
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, types.FunctionType):
        return defines(value.__module__ or "", value.__code__.co_filename)
    if isinstance(value, type):
        return is_trusted(value.__module__) and value.__module__ in sys.modules and defines(
            value.__module__, getattr(sys.modules[value.__module__], "__file__", None) or "")
    return False
