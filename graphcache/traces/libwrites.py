"""Attributes the program set on a trusted library's modules (``tf.nn.relu = my_relu``): keyed as the values they hold.

trust.py names TensorFlow, Keras and NumPy by the identity of their installed files instead of walking their code.
That identity says nothing of what their modules hold at run time: library code resolves names through module
attributes when it runs (Keras' TensorFlow backend calls ``tf.nn.relu`` at trace time), so a program that replaces
one changes what a trace of untouched library code builds. A trace made before the patch was served after it,
stale (``tf.nn.relu`` wrapped to double its result, then a Keras ``Dense(activation="relu")`` model's ``predict``).

So the modules of the trusted packages are watched from the moment traces are enabled, and each attribute written
since is noted (``runtime.state.library_writes``). At each key (keying.py), every noted attribute whose value now is
not the library's own (a module, or a function or class defined by a trusted package's files) is keyed as walk.py
keys any value it reads, under ``lib:<module>.<name>``: a user function by its code, a plain value exactly, anything
else refused.

How writes are seen. A module's attributes are its ``__dict__``. Each watched module is noted with a shallow copy of
its dict; at each key, a module whose dict was written since (its version tag moved:
dicttags.py) is compared with its note name by name, and the note renewed. Three kinds of writes are left out: of the
library's own objects (TensorFlow's lazy loaders filling in their modules), of ``__warningregistry__`` (the warnings a
module gave, kept by the interpreter), and of the names the module's own code assigns as globals (``global FLAGS; FLAGS = Flags()``: the library's own state, set by its own functions; what of it a
trace reads is the settings snapshot's to key, ambient.py). A module loaded later is watched from the first key after
its load.

Where the tag cannot be read (an interpreter whose dict layout dicttags.py does not know), each module gets instead a
module class of its own whose ``__setattr__`` and ``__delattr__`` note the write. That was the only way once, and it
costs every read: CPython specializes attribute loads only on plain modules, so each ``module.attr`` in TensorFlow's
and Keras' Python code took the generic path, for the rest of the process (EfficientNetV2B0, from building the model to
its first ``predict``: ~230M more instructions in ``module_getattro``, callgrind; some 5% of that stretch).

Not seen: an attribute set before traces were enabled (``graphcache run`` enables them before the program runs;
``install()`` after a patch misses it) or on a module between its load and the next key; one set and set back between
two keys holds what it held, and there is nothing to key.
"""

from __future__ import annotations

import dis
import functools
import sys
import types
from typing import Any

from .. import runtime
from .dicttags import TagCell, tag_reader
from .trust import library_own
from .walk import Walk

PATCHED = "traces.libwrites"
WATCHED_PACKAGES = ("tensorflow", "keras", "numpy")  # the packages whose code looks names up in their modules
_MISSING = object()
# Written into a module's dict by the interpreter, not by code: which warnings the module gave (warnings.warn).
INTERPRETER_STATE = frozenset({"__warningregistry__"})


class _Noted:
    """One watched module's dict as last compared: its tag and a shallow copy (~2 MB for the ~80k attributes of a
    Keras process's ~2,100 trusted modules, made in ~3 ms)."""

    __slots__ = ("module", "entries", "cell", "tag", "copy")

    def __init__(self, module: types.ModuleType, cell: TagCell) -> None:
        self.module, self.entries, self.cell = module, vars(module), cell
        self.tag, self.copy = -1, {}
        self.renew()

    def renew(self) -> None:
        while True:  # again if another thread wrote the dict while it was copied
            tag = self.cell.value
            self.copy = self.entries.copy()
            if self.cell.value == tag:
                self.tag = tag
                return

    def written(self) -> set[str]:
        """The names whose value is another object than at the note (identity: ``==`` could run user code, and
        ``5 == 5.0`` traces another graph), added or removed; the note renewed (its copy is what is compared)."""
        before = self.copy
        self.renew()
        changed = {name for name, value in self.copy.items() if before.get(name, _MISSING) is not value}
        changed.update(before.keys() - self.copy.keys())
        return changed - own_globals(self.module.__name__) - INTERPRETER_STATE


class _Watch:
    """The watched modules of this process (``runtime.state.library_watch``)."""

    def __init__(self, tag_cell: Any) -> None:
        self.tag_cell = tag_cell
        self.noted: dict[str, _Noted] = {}
        self.modules_seen = 0  # len(sys.modules) when last looked through for new trusted modules

    def add_new(self) -> None:
        if len(sys.modules) == self.modules_seen:
            return
        for name, module in list(sys.modules.items()):
            if name not in self.noted and _watched(name, module):
                self.noted[name] = _Noted(module, self.tag_cell(vars(module)))
        self.modules_seen = len(sys.modules)

    def note_writes(self) -> None:
        for name, noted in self.noted.items():
            if noted.cell.value != noted.tag:
                runtime.state.library_writes.update((name, attribute) for attribute in noted.written())
        self.add_new()


class _WatchedModule(types.ModuleType):
    """A trusted module that notes writes to its attributes, where dict tags cannot be read (see the docstring)."""

    def __setattr__(self, name: str, value: Any) -> None:
        runtime.state.library_writes.add((self.__name__, name))
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        runtime.state.library_writes.add((self.__name__, name))
        super().__delattr__(name)


def _watched(name: str, module: Any) -> bool:
    # Lazy loaders (ModuleType subclasses) are left alone: what they load is a module of its own.
    return type(module) is types.ModuleType and name.partition(".")[0] in WATCHED_PACKAGES


@functools.cache  # by module: asked only for a module whose dict was written, and its code does not change
def own_globals(module_name: str) -> frozenset[str]:
    """The names a module's own code assigns or deletes as globals (``global X``), from its compiled code: every
    function and class body in it, nested ones too. Empty where its code cannot be had (an extension module)."""
    try:
        spec = getattr(sys.modules[module_name], "__spec__", None)
        code = spec.loader.get_code(module_name) if spec is not None and spec.loader is not None else None
    except Exception:  # no loader, no source or bytecode: nothing is the module's own (more is keyed, not less)
        code = None
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        opcodes = current.co_code[0::2]  # (opcode, argument) byte pairs; inline caches are opcode 0
        if _STORE_GLOBAL in opcodes or _DELETE_GLOBAL in opcodes:  # a scan in C: most code has no ``global``
            names.update(_assigned_globals(current))
        stack.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    return frozenset(names)


def _assigned_globals(code: types.CodeType) -> set[str]:
    """The names ``code`` stores or deletes as globals: its instructions decoded by hand (``dis`` builds an object
    per instruction, ~2 ms on TensorFlow's context.py; a first key meets a few such modules)."""
    names, raw, extended = set(), code.co_code, 0
    for at in range(0, len(raw), 2):
        opcode, argument = raw[at], raw[at + 1] | extended
        extended = argument << 8 if opcode == _EXTENDED_ARG else 0
        if opcode in (_STORE_GLOBAL, _DELETE_GLOBAL):  # their argument indexes co_names (3.11-3.13)
            names.add(code.co_names[argument])
    return names


_STORE_GLOBAL, _DELETE_GLOBAL, _EXTENDED_ARG = (dis.opmap[name] for name in (
    "STORE_GLOBAL", "DELETE_GLOBAL", "EXTENDED_ARG"))


def install() -> None:
    """Watch the trusted packages' modules, once per process (see the module docstring)."""
    with runtime.state.lock:
        if PATCHED in runtime.state.patched:
            return
        tag_cell = tag_reader()
        if tag_cell is not None:
            runtime.state.library_watch = _Watch(tag_cell)
            runtime.state.library_watch.add_new()
        else:
            for name, module in list(sys.modules.items()):
                if _watched(name, module):
                    module.__class__ = _WatchedModule
        runtime.state.patched[PATCHED] = True


def key(walk: Walk) -> None:
    """Every noted attribute that now holds something other than the library's own, into ``walk``."""
    with runtime.state.lock:
        if runtime.state.library_watch is not None:
            runtime.state.library_watch.note_writes()
        writes = sorted(runtime.state.library_writes)
    for module_name, name in writes:
        module = sys.modules.get(module_name)
        value = getattr(module, name, _MISSING) if module is not None else _MISSING
        if value is _MISSING:
            walk.value(("deleted library attribute", module_name, name), f"lib:{module_name}.{name}")
        elif not library_own(value):
            walk.value(value, f"lib:{module_name}.{name}")
