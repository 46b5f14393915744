"""What a trace reads off an object (``self.<name>``), and the key of a tf.function *method*.

Why: ``@tf.function`` on a method (``def __call__(self, x)`` of a ``tf.Module``, the most common TF2 pattern)
traces a graph that depends on the method's code and on the object: every attribute the code reads becomes a
constant (a float), a capture (a variable) or a branch taken (a flag). The key of such a trace
(``walk_method``) holds:

- the method's function, walked as any function (walk.py: code, defaults, closures, the globals it reads);
- the object's class, walked as walk.py walks a class (every method's code, plain class attributes); library
  base classes by name, and only those whose state is the object's ``__dict__`` (``STATE_BASES``: ``object``,
  ``abc.ABC``, ``tf.Module`` and its trackable bases). Any other library base (a Keras layer or model: objects.py's
  walk_method keys its methods instead), a metaclass, ``__getattr__``,
  ``__getattribute__`` or ``__slots__`` is refused: attributes would come from somewhere the key cannot see;
- each ``self.<name>`` the method reads, and those read by the methods of its class it reaches through
  ``self`` (``self.helper(x)``, a property, ``self(x)``, ``super().name``: every definition of the name in the
  class's MRO is followed, a superset of what runs), in first-read order: an attribute the object holds keyed by
  value (``keyed_state``: plain values exactly, tf.Variables as the walk's bindings at paths like ``self.w``,
  bound on a hit by that path; eager tensors by value; lists, tuples and dicts, TensorFlow's tracked ones
  included, item by item in their order; a nested ``tf.Module`` by its class and its whole ``__dict__``, the
  same rules recursively, since any of its methods or attributes may be reached), a class attribute by the
  class walk. A name only a library class defines (tf.Module's ``name_scope``, ``trainable_variables``) is
  library code reading the object's state: the object's whole ``__dict__`` is keyed then (``object_state``).

Refused (``Uncacheable``; reason ``method`` unless said): code that assigns ``self.<name>`` or rebinds
``self`` (``writes_state``: a hit would skip the assignment), hands ``self`` to other code (what that reads
is not followed), reads a descriptor of user code other than functions and properties (``self.__dict__``, a
slot), a name neither the object nor its classes hold; an attribute holding an object of another kind (an
instance of a plain user class, a Keras layer: what its code reads is not followed), a class method.

Writes the reachable code does not make itself (a nested module's method appending to a list it holds) change
what the walk keys: the walk after a miss's trace (keying.same_reads) differs, and that trace is not stored.

``self_reads`` and ``keyed_state`` are also how kerasstep.py keys a user layer's reads off ``self`` (with Keras'
own rule for the objects of a model).
"""

from __future__ import annotations

import abc
import dis
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorflow.python.eager.polymorphic_function import polymorphic_function, tf_method_target
from tensorflow.python.framework import ops
from tensorflow.python.module import module as module_lib
from tensorflow.python.trackable import autotrackable
from tensorflow.python.trackable import base as trackable_base

from .bytecode import ATTRIBUTE_LOADS, ATTRIBUTE_WRITES, chain_after, code_objects
from .walk import Uncacheable, Walk, is_library

REASON = "method"
MAX_DEPTH = 16
SELF_READS = ATTRIBUTE_LOADS | {"LOAD_SUPER_ATTR"}  # the last: super().name from Python 3.12 on
REBINDS = frozenset({"STORE_FAST", "DELETE_FAST", "STORE_DEREF", "DELETE_DEREF"})
# Library base classes whose instances keep all their state in __dict__ (what object_state keys).
STATE_BASES = frozenset({object, abc.ABC, module_lib.Module, autotrackable.AutoTrackable, trackable_base.Trackable})
METACLASSES = (type, abc.ABCMeta)
HOOKS = ("__getattr__", "__getattribute__", "__slots__")  # attributes from elsewhere than __dict__ and the class
# Trackable's checkpoint bookkeeping: it mirrors the object's other attributes (names -> the objects they hold).
TRACKABLE_BOOKKEEPING = frozenset({
    "_self_setattr_tracking", "_self_unconditional_checkpoint_dependencies", "_self_unconditional_dependency_names",
    "_self_unconditional_deferred_dependencies", "_self_update_uid", "_self_name_based_restores",
    "_self_saveable_object_factories"})
StateRule = Callable[[Walk, Any, str, int], bool]  # keys a value of its own kinds: True when it did
MISSING = object()


@dataclass
class BoundMethod:
    """A trace of a tf.function method: the object it is bound to and the plain function (``self`` first)."""

    instance: Any
    function: types.FunctionType


def bound_method(target: types.MethodType) -> BoundMethod:
    """The method tf.function traces (its target: a bound method whose ``__self__`` is TensorFlow's weak
    ``TfMethodTarget`` for a decorated method, or the object itself for ``tf.function(obj.method)``)."""
    owner = target.__self__
    if isinstance(owner, tf_method_target.TfMethodTarget):
        owner = owner.target
    function = target.__func__
    if not isinstance(function, types.FunctionType):
        raise Uncacheable("not_a_function", f"it traces a method that is a {type(function).__name__}")
    if is_library(getattr(function, "__module__", None) or ""):
        raise Uncacheable("library", f"{function.__module__}.{function.__qualname__} is library code")
    if owner is None or isinstance(owner, type):
        raise Uncacheable(REASON, f"{function.__qualname__} is bound to a class or to nothing (a class method)")
    return BoundMethod(owner, function)


# -- reads off self, in code ---------------------------------------------------------------------------------
def self_reads(function: types.FunctionType, where: str, reason: str) -> list[str]:
    """Attribute names ``function`` reads off its first argument (``super().name`` and ``self(x)``, which reads
    ``__call__``, included); refuses writes, rebinding it, and ``self`` handed on (``reason``)."""
    code = function.__code__
    if not code.co_argcount:
        if code.co_flags & inspect.CO_VARARGS:  # self is args[0]: its reads are not followed
            raise Uncacheable(reason, f"{where} takes self in *{code.co_varnames[code.co_kwonlyargcount]}")
        return []
    me = code.co_varnames[0]
    reads: list[str] = []
    for current in code_objects(code):
        instructions = list(dis.get_instructions(current))
        for index, ins in enumerate(instructions):
            after = instructions[index + 1] if index + 1 < len(instructions) else None
            if ins.opname == "LOAD_GLOBAL" and ins.argval == "super":
                reads.extend(_super_read(instructions, index, where, reason))
            if isinstance(ins.argval, tuple):  # Python 3.13's pairs (LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST, ...)
                if current is not code or me not in ins.argval:
                    continue
                if ins.opname != "LOAD_FAST_LOAD_FAST" or ins.argval[0] == me:  # only self loaded last is followed
                    raise Uncacheable(reason, f"{where} hands self to other code (what that reads is not followed)")
            elif ins.argval != me:
                continue
            if ins.opname in REBINDS and (current is code or "DEREF" in ins.opname):
                raise Uncacheable("writes_state", f"{where} assigns {me} itself")
            if not (ins.opname in ("LOAD_DEREF", "LOAD_CLOSURE") or
                    (current is code and ins.opname.startswith("LOAD_FAST"))):
                continue
            if after is not None and after.opname in SELF_READS:
                reads.append(str(after.argval))
            elif called_here(instructions, ins, after):  # self(x): the class's __call__
                reads.append("__call__")
            elif after is not None and after.opname in ATTRIBUTE_WRITES:
                raise Uncacheable("writes_state", f"{where} assigns self.{after.argval} (it may run in the trace)")
            elif ins.opname != "LOAD_CLOSURE":
                raise Uncacheable(reason, f"{where} hands self to other code (what that reads is not followed)")
    return reads


def self_chains(function: types.FunctionType) -> list[tuple[str, ...]]:
    """The attribute chains of two or more names ``function`` reads off its first argument (``self.inner.k``):
    what ``self_reads`` keys as ``inner`` alone when ``inner`` is an object the caller labels (a model's layer)."""
    code = function.__code__
    if not code.co_argcount:
        return []
    me = code.co_varnames[0]
    found: list[tuple[str, ...]] = []
    for current in code_objects(code):
        instructions = list(dis.get_instructions(current))
        for index, ins in enumerate(instructions):
            if ins.argval != me or not (ins.opname == "LOAD_DEREF" or
                                        (current is code and ins.opname.startswith("LOAD_FAST"))):
                continue
            chain = chain_after(instructions, index)
            if chain and len(chain) > 1 and chain not in found:
                found.append(chain)
    return found


def _super_read(instructions: list[dis.Instruction], index: int, where: str, reason: str) -> list[str]:
    """The name of ``super().name``: up to Python 3.11 ``LOAD_GLOBAL super; [PRECALL 0]; CALL 0; LOAD_ATTR name`` (the
    frame's ``self`` is read without an instruction naming it); from 3.12 on ``LOAD_SUPER_ATTR`` after a load of
    ``self``, which the caller's scan reads. Any other use of super (``s = super()``) is refused."""
    following = [ins for ins in instructions[index + 1:index + 4] if ins.opname != "PRECALL"]
    if any(ins.opname == "LOAD_SUPER_ATTR" for ins in following):
        return []
    if len(following) >= 2 and following[0].opname == "CALL" and following[0].arg == 0 and \
            following[1].opname in SELF_READS:
        return [str(following[1].argval)]
    raise Uncacheable(reason, f"{where} uses super() other than as super().name")


def called_here(instructions: list[dis.Instruction], ins: dis.Instruction, after: dis.Instruction | None) -> bool:
    """Whether ``ins`` loads the callee of a call (``self(x)``): a NULL is pushed next to a callee (before it up to
    Python 3.12, after it from 3.13)."""
    position = instructions.index(ins)
    before = instructions[position - 1] if position else None
    return (before is not None and before.opname == "PUSH_NULL") or (after is not None and after.opname == "PUSH_NULL")


# -- values read off self -------------------------------------------------------------------------------------
def keyed_state(walk: Walk, value: Any, where: str, depth: int, rule: StateRule, reason: str) -> None:
    """A value code reads off an object: ``rule``'s kinds first, then lists, tuples and dicts (plain or TensorFlow's
    and Keras' tracked ones) item by item, else walk.py's plain values; refused with ``reason`` otherwise."""
    if depth > MAX_DEPTH:
        raise Uncacheable(reason, f"{where} is nested too deeply to key")
    if rule(walk, value, where, depth):
        return
    if isinstance(value, (list, tuple, dict)) and not plain_or_tracked(type(value)):
        raise Uncacheable(reason, f"{where} is a {type(value).__qualname__} (a container class of user code)")
    if isinstance(value, (list, tuple)):
        walk.value(("list", type(value).__name__, len(value)), where)
        for index, item in enumerate(value):
            keyed_state(walk, item, f"{where}[{index}]", depth + 1, rule, reason)
    elif isinstance(value, dict):
        if any(type(key) is not str for key in value):
            raise Uncacheable(reason, f"{where} is a dict with keys that are not str")
        walk.value(("dict", type(value).__name__, list(value)), where)  # in its order: a trace iterates it so
        for key, item in value.items():
            keyed_state(walk, item, f"{where}[{key!r}]", depth + 1, rule, reason)
    else:
        try:
            walk.value(value, where)
        except Uncacheable as exc:
            raise Uncacheable(reason, f"{where}: {exc.detail}") from None


def plain_or_tracked(kind: type) -> bool:
    return kind in (list, tuple, dict) or is_library(kind.__module__)


def module_rule(walk: Walk, value: Any, where: str, depth: int) -> bool:
    """A nested tf.Module: its class (checked, walked) and its whole ``__dict__`` (any of its methods may run)."""
    if not isinstance(value, module_lib.Module):
        return False
    if walk.once(value, where):
        check_class(type(value), where)
        walk.value(type(value), f"{where}/class")
        object_state(walk, value, where, depth)
    return True


def object_state(walk: Walk, obj: Any, where: str, depth: int) -> None:
    """Every attribute ``obj`` holds (Trackable's bookkeeping, which mirrors them, aside; a name scope by its name)."""
    trackable = isinstance(obj, trackable_base.Trackable)
    items = [(name, value) for name, value in vars(obj).items()
             if not (trackable and name in TRACKABLE_BOOKKEEPING)]
    walk.value(("state", [name for name, _ in items]), where)
    for name, value in items:
        at = f"{where}.{name}"
        if isinstance(value, ops.name_scope_v2):  # tf.Module's, made from its name in __init__
            walk.value(("name scope", value.name), at)
        else:
            keyed_state(walk, value, at, depth + 1, module_rule, REASON)


def check_class(cls: type, where: str) -> None:
    """Refuses classes whose instances' attributes may come from elsewhere than ``__dict__`` and the classes."""
    if type(cls) not in METACLASSES:
        raise Uncacheable(REASON, f"{where}'s class {cls.__qualname__} has the metaclass {type(cls).__qualname__}")
    for klass in cls.__mro__:
        if is_library(klass.__module__):
            if klass not in STATE_BASES:
                raise Uncacheable(REASON, f"{where}'s class derives from {klass.__module__}.{klass.__qualname__} "
                                          "(library state the key cannot see)")
            continue
        for hook in HOOKS:
            if hook in vars(klass):
                raise Uncacheable(REASON, f"{where}'s class {klass.__qualname__} defines {hook}")


# -- a method's key -------------------------------------------------------------------------------------------
def walk_method(method: BoundMethod, walk: Walk | None = None) -> Walk:
    """The walk of a tf.function method's trace (see the module docstring) into ``walk`` (a new one by default);
    raises Uncacheable."""
    instance = method.instance
    cls = type(instance)
    check_class(cls, "self")  # first: a Keras layer's method is refused as a method, whatever its code reads
    walk = Walk() if walk is None else walk
    walk.function(method.function, "")
    walk.value(cls, "self/class")
    names, library = reached_reads(cls, method.function)
    for name in names:
        _read(walk, instance, name)
    if library:
        object_state(walk, instance, "self", 0)
    return walk


def reached_reads(cls: type, function: types.FunctionType) -> tuple[list[str], bool]:
    """The names ``function`` and the methods of ``cls`` it reaches through ``self`` read off ``self``, and whether a
    library class defines one of them (then library code reads the object's state)."""
    names, library, _ = reached(cls, function)
    return names, library


def reached(cls: type, function: types.FunctionType) -> tuple[list[str], bool, list[types.FunctionType]]:
    """reached_reads(), and the functions it followed (``function`` first)."""
    names: dict[str, None] = {}
    library = False
    queue, seen = [function], {id(function)}
    followed = []
    while queue:
        current = queue.pop(0)
        followed.append(current)
        for name in self_reads(current, current.__qualname__, REASON):
            if name in names:
                continue
            names[name] = None
            for owner in cls.__mro__:
                attr = vars(owner).get(name, MISSING)
                if attr is MISSING:
                    continue
                if is_library(owner.__module__):
                    library = True
                    continue
                for one in _self_functions(attr):
                    if id(one) not in seen:
                        seen.add(id(one))
                        queue.append(one)
    return list(names), library, followed


def _self_functions(attr: Any) -> list[types.FunctionType]:
    """The functions a class attribute runs with ``self`` (a method, a property's accessors, a tf.function's)."""
    if isinstance(attr, property):
        candidates = [attr.fget, attr.fset, attr.fdel]
    elif isinstance(attr, polymorphic_function.Function):
        candidates = [attr.python_function]
    elif isinstance(attr, (staticmethod, classmethod)):  # no self: their code is the class walk's
        candidates = []
    else:
        candidates = [attr]
    return [candidate for candidate in candidates if isinstance(candidate, types.FunctionType)]


def _read(walk: Walk, instance: Any, name: str) -> None:
    """One ``self.<name>``, resolved as Python resolves it: a data descriptor of the class, else what the object
    holds, else the class attribute."""
    where = f"self.{name}"
    found = _class_attribute(type(instance), name)
    if found is not None and _unknown_descriptor(found[1]) and not is_library(found[0].__module__):
        raise Uncacheable(REASON, f"{where} is a {type(found[1]).__name__} of {found[0].__qualname__} (a descriptor "
                                  "the key does not follow)")
    held = vars(instance)
    if name in held and not (found is not None and _data_descriptor(found[1])):
        walk.value(("attribute", name), where)
        keyed_state(walk, held[name], where, 0, module_rule, REASON)
    elif found is not None:  # its value: the class walk's (a user class) or the library's version (object_state)
        walk.value(("class attribute", name, found[0].__module__, found[0].__qualname__), where)
    else:
        raise Uncacheable(REASON, f"{where}: neither the object nor its classes hold it (a __getattr__?)")


def _class_attribute(cls: type, name: str) -> tuple[type, Any] | None:
    for owner in cls.__mro__:
        attr = vars(owner).get(name, MISSING)
        if attr is not MISSING:
            return owner, attr
    return None


def _data_descriptor(attr: Any) -> bool:
    return hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")


def _unknown_descriptor(attr: Any) -> bool:
    known = (types.FunctionType, property, staticmethod, classmethod, polymorphic_function.Function)
    return hasattr(type(attr), "__get__") and not isinstance(attr, known)


__all__ = ["BoundMethod", "bound_method", "called_here", "check_class", "keyed_state", "module_rule", "object_state",
           "plain_or_tracked", "reached", "reached_reads", "self_chains", "self_reads", "walk_method"]
