"""What a trace can read on the Python side, walked before tracing: the ``code`` part of a trace's key.

Tracing runs the Python function once; the graph it builds depends on the function's code and on every
Python value that code reads. The walk starts at the function and follows what its bytecode names:

- code objects, recursively (``co_code``, constants with nested code, names, variable names, flags,
  exception table; not file names or line numbers, which no graph sees), defaults and keyword defaults;
- closure cells and the module globals the code loads (``LOAD_GLOBAL``/``LOAD_NAME``, nested code
  included) and the modules it imports, and the **attribute chains** read off each (``mylib.SCALE``,
  ``helper.scale``, ``flags.FLAGS.scale``, ``Color.RED``): each chain is resolved in this process, as the trace
  will resolve it, and its value keyed under its path (``g:mylib.SCALE``). A module is keyed only by the
  chains read off it: a user module used any other way (handed to other code) is refused;
- code reached that way (functions, classes with their methods and plain attributes, tf.functions: their
  options and their Python function) is walked the same way, wherever it lives, unless trust.py trusts its
  package (the standard library, TensorFlow, Keras, NumPy and the few they need: named by the identity of
  their installed distribution, in the ``versions`` part). A project folder without ``__init__.py``, a
  package installed with ``pip install .`` and a third party's package are walked;
- values, only when plain: None, bool, int, float, complex, str, bytes, tuples/lists/dicts/sets of plain
  values, tf.DType, TensorShape, TensorSpec, NumPy scalars, dtypes and arrays (by their bytes), enum members
  (their class, walked, their name and value); tf.Variables by type, dtype, shape and device, eager
  tensors by dtype, shape, device and value. Variables and eager tensors are what a trace captures:
  ``bindings`` names each by the path it was reached by (``g:w``: global ``w``; ``c:scale``: closure cell;
  ``g:helper/g:w``: a global of a global function), so a restored trace binds this process's objects in the
  trace's capture order. An object only read through attribute chains (``FLAGS.scale``) is keyed by them.

Objects a ``rule`` claims (objects.py: Keras models, layers, optimizers, losses, metrics, schedules and
variables, tf.Modules) are keyed by it, wherever they are reached; attribute chains read off them are followed
(a method of one ends its chain: its code is the object's class walk).

Anything else refuses the trace (``Uncacheable`` with a reason of counters.TRACE_REASONS): an instance of
a user class or of a library type used as a whole, a user module handed to other code, a bound method, a
builtin with side effects (``print``, ``open``, ``hash`` of a str is seeded per process, ...), modules of
process state (``os``, ``time``, ``random``, ``numpy.random``, ``pickle``, ...: ``STATEFUL_MODULES``), trusted
functions that read files (``np.load``, ``tf.io.gfile``: ``STATE_READERS``), code that assigns globals,
enclosing variables or attributes of what it reads. Code that builds a set it may iterate is keyed with
``PYTHONHASHSEED`` where that is fixed (a set of str iterates in the hash seed's order), else refused
(keying.py).
The walk is repeated after a miss's trace: a trace that changed a value it read (appended to a list)
is not stored either. A tf.function *method* adds its object to this walk (instance.py).
"""

from __future__ import annotations

import builtins
import enum
import sys
import types
from typing import Any, Protocol

import numpy as np
import xxhash
from tensorflow.python.eager.polymorphic_function import polymorphic_function
from tensorflow.python.eager.polymorphic_function.polymorphic_function import UnliftedInitializerVariable
from tensorflow.python.framework import dtypes, ops, tensor_shape
from tensorflow.python.framework import tensor as tensor_lib
from tensorflow.python.ops import resource_variable_ops

from .bytecode import Reads, membership_only, scan
from .namedtuples import is_plain_namedtuple, made_by_namedtuple
from .stateful import STATEFUL_ATTRIBUTES, is_state_reader, is_stateful
from .trust import class_defines, defines, is_trusted, trust_of

# Builtins a traced function may call: none of them has a side effect or a per-process result.
SAFE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod",
    "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr", "hasattr",
    "hex", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object",
    "oct", "ord", "pow", "property", "range", "repr", "reversed", "round", "set", "slice", "sorted",
    "staticmethod", "str", "sum", "super", "tuple", "type", "zip", "None", "True", "False", "Ellipsis",
    "NotImplemented", "__build_class__", "__name__",
})
MAX_GUARDS = 4096  # reads noted for `graphcache misses` per trace (the key holds them all)
GUARD_TEXT = 60  # characters of a value's repr noted
MAX_VALUE_BYTES = 64 * 2**20  # eager tensors and arrays hashed by value up to this size
MAX_ITEMS = 10_000  # items of one container: bigger ones would make the key cost more than it saves
LONG_TEXT = 256  # str and bytes longer than this are keyed by their hash
SKIPPED_CLASS_ATTRS = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                                 "__annotations__", "__slots__", "__firstlineno__", "__static_attributes__"})
PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))  # exactly these types
CONTAINERS = (tuple, list, dict, set, frozenset)
FLAT_CONTAINERS = frozenset((tuple, list))
FLAT_SCALARS = frozenset(PLAIN_SCALARS)  # repr of each is exact and names its type (str quoted, 1 vs 1.0 vs True)
# A class's attributes that hold code, walked under any name: a dunder holding one is code that runs (a tf.function
# ``__call__``, a property, ``__new__``); other dunders (``__module__``, ``__hash__ = None``) are Python's bookkeeping.
CLASS_CODE = (types.FunctionType, staticmethod, classmethod, property, polymorphic_function.Function)


class Uncacheable(Exception):
    """A trace graphcache will not cache: ``reason`` (one of counters.TRACE_REASONS) and what it saw."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def is_library(module_name: str) -> bool:
    """Whether a module's code is named rather than walked: trusted by trust.py's allowlist."""
    return is_trusted(module_name)


class ObjectRule(Protocol):
    """Keys objects of kinds the plain rules refuse (objects.py: Keras objects and tf.Modules), wherever a walk
    reaches them: ``claims`` says which, ``key`` keys one (once: ``walk.once``)."""

    def claims(self, obj: Any) -> bool: ...

    def key(self, walk: Walk, obj: Any, path: str) -> None: ...


class Walk:
    """One walk from a function (see the module docstring): ``digest()`` is the key part, ``bindings`` the
    capturable objects by path, ``packages`` the trusted identities named (trust.py), ``hash_order`` where
    walked code builds a set (its iteration order is the process's string hash seed's). ``rule`` keys the
    objects it claims; ``objects`` holds what it keyed by path, ``before`` the state it keys as it was before a
    miss's trace (objects.py)."""

    def __init__(self, rule: ObjectRule | None = None, before: dict[Any, Any] | None = None,
                 reuse_configs: dict[str, Any] | None = None) -> None:
        self.rule = rule
        self.objects: dict[str, Any] = {}
        self.before = before or {}
        self._hasher = xxhash.xxh3_128()
        # Keras layer configs by path (kerasstep.py): what this walk keyed, and, for the walk after a miss's
        # trace, those of the walk before, reused for library layers (trust.py's LIBRARY_STEPS_KEEP_CONFIGS).
        self.configs: dict[str, Any] = {}
        self.reuse_configs = reuse_configs
        self._seen: dict[int, str] = {}  # id of a walked object -> the path it was first reached by
        self._keep: list[Any] = []  # walked objects stay alive for the walk, so their ids stay theirs
        self._code: dict[int, str] = {}
        self.bindings: dict[str, Any] = {}  # path -> tf.Variable or eager tensor
        self.packages: set[str] = set()
        self.hash_order: str | None = None
        self.guards: dict[str, str] = {}  # path -> what was keyed there, in words (stored with the entry)

    def digest(self) -> str:
        return self._hasher.hexdigest()

    def _emit(self, *parts: Any) -> None:
        data = "\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass")
        self._hasher.update(len(data).to_bytes(8, "little"))
        self._hasher.update(data)

    def guard(self, path: str, text: str) -> None:
        """Note what a path read, for ``graphcache misses`` to say which read changed (``g:SCALE 2.0 -> 3.0``)."""
        if len(self.guards) < MAX_GUARDS:
            self.guards.setdefault(path or "fn", text if len(text) <= GUARD_TEXT else text[:GUARD_TEXT] + "...")

    def once(self, obj: Any, path: str) -> bool:
        """True the first time ``obj`` is reached; later reaches emit a reference to the first path."""
        first = self._seen.get(id(obj))
        if first is not None:
            self._emit("ref", first)
            return False
        self._seen[id(obj)] = path
        self._keep.append(obj)
        return True

    def trusted(self, module_name: str) -> bool:
        """Whether code of ``module_name`` is named, not walked (trust.py); notes its identity for ``versions``."""
        trust = trust_of(module_name)
        if trust is None:
            return False
        self.packages.add(trust.identity)
        return True

    # -- functions and code ------------------------------------------------------------------------------
    def function(self, fn: types.FunctionType, path: str) -> None:
        """A user function: its code, defaults, closure and the globals its code reads."""
        if not self.once(fn, path):
            return
        code = fn.__code__
        digest = self.code_hash(code)
        self._emit("function", digest)
        self.guard(path, f"code of {fn.__qualname__} {digest[:12]}")
        for index, default in enumerate(fn.__defaults__ or ()):
            self.value(default, _join(path, f"d{index}"))
        for name in sorted(fn.__kwdefaults__ or {}):
            self.value(fn.__kwdefaults__[name], _join(path, f"k:{name}"))
        reads = self.reads(code, frozenset(code.co_freevars), path)
        if reads.builds_set and self.hash_order is None:
            self.hash_order = _where(path)
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            try:
                contents = cell.cell_contents
            except ValueError:
                self._emit("empty cell", name)
                continue
            self.named(contents, reads, name, _join(path, f"c:{name}"))
        for name in reads.globals:
            if name in fn.__globals__:
                self.named(fn.__globals__[name], reads, name, _join(path, f"g:{name}"))
            elif name in vars(builtins):
                builtin = vars(builtins)[name]
                if name not in SAFE_BUILTINS and not _is_exception(builtin):
                    raise Uncacheable("builtin", f"{_where(path)} calls {name}() (a side effect, or a result of "
                                                 "this process only)")
                if _original_builtin(name, builtin):
                    self._emit("builtin", name)
                else:  # builtins.abs = ...: what the name holds now is what the trace runs
                    self.value(builtin, _join(path, f"builtins.{name}"))
            else:
                self._emit("unbound", name)

    def named(self, value: Any, reads: Reads, name: str, path: str) -> None:
        """A global or closure cell the code reads: the value, and the attribute chains read off it. A module
        is keyed by its chains (a user module used otherwise is refused); an object the rules cannot key, by its
        chains when the code reads nothing else of it."""
        chains = reads.chains.get(name, [])
        bare = name in reads.bare or not chains
        if isinstance(value, types.ModuleType):
            self._module(value, path, bare)
        elif self.claims(value):  # keyed whole; what the code reads off it below
            self.value(value, path)
        elif bare or _keyable(value):
            self.value(value, path)
            if not isinstance(value, (types.FunctionType, type)):  # a plain value's attributes are its methods
                return
        else:
            self._object_by_chains(value, path)
        for chain in chains:
            self.chain(value, chain, path)

    def chain(self, base: Any, chain: tuple[str, ...], path: str) -> None:
        """An attribute chain read off ``base``, resolved as the trace will resolve it: through modules and
        objects the rules cannot key, up to the first value they can (keyed under the chain's path)."""
        current, at = base, path
        for attribute in chain:
            if isinstance(current, types.ModuleType) and f"{current.__name__}.{attribute}" in STATEFUL_ATTRIBUTES:
                raise Uncacheable("value", f"{_where(path)} reads {current.__name__}.{attribute} (process state)")
            owner = current
            try:
                current = getattr(current, attribute)
            except Exception as exc:  # the trace would fail the same way: what it reads is keyed as missing
                self._emit("missing attribute", at, attribute, type(exc).__name__)
                return
            at = f"{at}.{attribute}"
            if isinstance(owner, type) and isinstance(current, types.MethodType) and current.__self__ is owner:
                current = current.__func__  # a class method: its code (the class's attributes are the class walk's)
            self._emit("read", at)  # the path itself, so that two chains cannot trade values unseen
            if isinstance(current, types.ModuleType):
                self._module(current, at, bare=False)
            elif isinstance(current, types.MethodType) and current.__self__ is owner and self.claims(owner):
                self._emit("method of a keyed object", attribute)  # its code: the object's class walk
                return
            elif self.claims(current):  # keyed whole (or a reference to where it was); on along the chain
                self.value(current, at)
            elif _keyable(current):
                self.value(current, at)
                return
            else:
                self._object_by_chains(current, at)
        if not isinstance(current, types.ModuleType) and not self.claims(current):
            self.value(current, at)  # an object at the end of the chain: used as a whole (refused)

    def claims(self, obj: Any) -> bool:
        return self.rule is not None and self.rule.claims(obj)

    def _module(self, module: types.ModuleType, path: str, bare: bool) -> None:
        _check_stateful(module.__name__, path)
        if self.trusted(module.__name__):
            self._emit("module", module.__name__)
            return
        if bare:
            raise Uncacheable("value", f"{_where(path)} is the module {module.__name__!r}, handed to other code (only "
                                       "attributes read straight off a module of user code are keyed)")
        self._emit("user module", module.__name__)

    def _object_by_chains(self, obj: Any, path: str) -> None:
        """An object read only through attribute chains (``FLAGS.scale``): keyed by its class and those chains."""
        cls = type(obj)
        if not self.once(obj, path):
            return
        self._emit("object by attributes", cls.__module__, cls.__qualname__)
        if not self.trusted(cls.__module__):
            self._class(cls, _join(path, "class"))

    def reads(self, code: types.CodeType, enclosing: frozenset[str], path: str) -> Reads:
        """What ``code`` (nested code included) reads by name (bytecode.py); refuses code that assigns globals,
        variables of an enclosing scope or attributes of what it reads, and notes the modules it imports."""
        found = scan(code, enclosing)
        if found.writes:
            raise Uncacheable("writes_state", f"{_where(path)} assigns {found.writes[0]}")
        for name in found.imports:
            self._imported(name, path)
        return found

    def _imported(self, name: str, path: str) -> None:
        _check_stateful(name, path)
        if not self.trusted(name):
            raise Uncacheable("value", f"{_where(path)} imports {name!r} while tracing (its code is not walked)")
        self._emit("import", name)

    def code_hash(self, code: types.CodeType) -> str:
        known = self._code.get(id(code))
        if known is not None:
            return known
        hasher = xxhash.xxh3_128()
        for data in (code.co_code, getattr(code, "co_exceptiontable", b"")):
            hasher.update(len(data).to_bytes(8, "little"))
            hasher.update(data)
        consts = []
        membership = membership_only(code)
        for index, const in enumerate(code.co_consts):
            if isinstance(const, types.CodeType):
                consts.append("code:" + self.code_hash(const))
            elif isinstance(const, frozenset) and index in membership:  # `x in {...}`: order is not read
                consts.append("frozenset:" + repr(sorted(repr(item) for item in const)))
            elif isinstance(const, frozenset):  # `for k in {...}`: iterated in this process's hash-seed order,
                consts.append("frozenset:" + repr([repr(item) for item in const]))  # which the trace may bake
            else:
                consts.append(f"{type(const).__name__}:{const!r}")
        described = (consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                     code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                     code.co_name, getattr(code, "co_qualname", code.co_name))
        hasher.update(repr(described).encode("utf-8", "surrogatepass"))
        digest = hasher.hexdigest()
        self._code[id(code)] = digest
        self._keep.append(code)
        return digest

    # -- values ----------------------------------------------------------------------------------------------
    def value(self, obj: Any, path: str) -> None:
        """One value the code reads (see the module docstring for what is plain)."""
        kind = type(obj)
        if kind in PLAIN_SCALARS:
            if kind in (str, bytes) and len(obj) > LONG_TEXT:
                data = obj.encode("utf-8", "surrogatepass") if kind is str else obj
                digest = xxhash.xxh3_128_hexdigest(data)
                self._emit(kind.__name__, len(obj), digest)
                self.guard(path, f"{kind.__name__} of {len(obj)} {digest[:12]}")
            else:
                self._emit(kind.__name__, repr(obj))
                self.guard(path, repr(obj))
        elif kind in CONTAINERS:
            self._container(obj, path)
        elif isinstance(obj, tuple) and is_plain_namedtuple(kind):
            self._emit("namedtuple", kind.__module__, kind.__qualname__, kind._fields, repr(kind._field_defaults))
            self._container(obj, path)
        elif isinstance(obj, types.FunctionType):
            self._reached_function(obj, path)
        elif isinstance(obj, types.ModuleType):  # held in a container, a default: handed on as a whole
            self._module(obj, path, bare=True)
        elif isinstance(obj, type):
            self._class(obj, path)
        else:
            self._other(obj, path)

    def _container(self, obj: Any, path: str) -> None:
        if not self.once(obj, path):
            return
        if len(obj) > MAX_ITEMS:
            raise Uncacheable("value", f"{_where(path)} holds {len(obj)} items (more than {MAX_ITEMS} are not keyed)")
        if isinstance(obj, dict):
            self._emit("dict", len(obj))
            for key, item in obj.items():
                if type(key) not in PLAIN_SCALARS:
                    raise Uncacheable("value", f"{_where(path)} has a key of type {type(key).__name__}")
                self._emit("key", type(key).__name__, repr(key))
                self.value(item, f"{path}[{key!r}]")
            return
        if type(obj) in FLAT_CONTAINERS and all(type(item) in FLAT_SCALARS for item in obj):
            # a tuple or list of plain scalars (a Keras layer's or variable's description, a shape): one record,
            # its repr, which is exact for these types and tells tuple from list (a walk emits thousands of them)
            text = repr(obj)
            self._emit("flat", text)
            self.guard(path, text)
            return
        self._emit(type(obj).__name__, len(obj))
        for index, item in enumerate(obj):  # sets in their iteration order: a trace iterates them so too
            self.value(item, f"{path}[{index}]")

    def _reached_function(self, fn: types.FunctionType, path: str) -> None:
        module = getattr(fn, "__module__", None) or ""
        if self.trusted(module) and defines(module, fn.__code__.co_filename):
            _check_stateful(module, path)
            _check_state_reader(fn, path)
            self._emit("library function", module, fn.__qualname__)
            self.guard(path, f"{module}.{fn.__qualname__}")
        else:
            self.function(fn, path)

    def _class(self, cls: type, path: str) -> None:
        if self.trusted(cls.__module__) and class_defines(cls):
            _check_stateful(cls.__module__, path)
            _check_state_reader(cls, path)
            self._emit("library class", cls.__module__, cls.__qualname__)
            return
        if not self.once(cls, path):
            return
        self._emit("class", cls.__module__, cls.__qualname__, len(cls.__bases__))
        self.guard(path, f"class {cls.__qualname__}")
        for index, base in enumerate(cls.__bases__):
            self._class(base, _join(path, f"b{index}"))
        made = made_by_namedtuple(cls)  # its fields and defaults say what collections.namedtuple made of it
        if made:
            self._emit("namedtuple", cls._fields)
            self.value(cls._field_defaults, _join(path, "defaults"))
        is_enum = isinstance(cls, enum.EnumMeta)
        for name, attr in vars(cls).items():
            if name in made or name in SKIPPED_CLASS_ATTRS or (name.startswith("__") and name.endswith("__")
                                               and not isinstance(attr, CLASS_CODE)):
                continue
            if is_enum and _is_sunder(name):  # Enum's own bookkeeping: its members are keyed as attributes
                continue
            self._emit("attr", name)
            if isinstance(attr, (staticmethod, classmethod)):
                self.value(attr.__func__, f"{path}.{name}")
            elif isinstance(attr, property):
                for accessor in (attr.fget, attr.fset, attr.fdel):
                    self.value(accessor, f"{path}.{name}")
            else:
                self.value(attr, f"{path}.{name}")

    def _other(self, obj: Any, path: str) -> None:
        # Concrete types first: an isinstance() against an ABC (DType, TensorShape, BaseResourceVariable) that
        # fails fills the negative caches of the ABC and all its subclasses (over a thousand weak references
        # for one eager tensor), objects that live on and bring the process's next full collection forward.
        if type(obj) is ops.EagerTensor:
            self._eager_tensor(obj, path)
        elif isinstance(obj, dtypes.DType):
            self._emit("dtype", obj.name)
        elif isinstance(obj, tensor_shape.TensorShape):
            self._emit("shape", repr(obj))
        elif type(obj) is tensor_lib.TensorSpec:
            self._emit("spec", repr(obj))
        elif isinstance(obj, (np.generic, np.dtype)):
            self._emit("numpy", type(obj).__name__, repr(obj))
        elif type(obj) is np.ndarray:  # exactly: a subclass holds more than its bytes (a mask, a file: memmap)
            self._array(obj, path)
        elif isinstance(obj, enum.Enum):  # its class (methods, other members) and its value, not only its name
            self.value(type(obj), _join(path, "class"))
            self._emit("enum", obj.name)
            self.value(obj.value, _join(path, "value"))
        elif isinstance(obj, resource_variable_ops.BaseResourceVariable) and _is_tf_type(obj):
            self._variable(obj, path)
        elif isinstance(obj, ops.EagerTensor):
            self._eager_tensor(obj, path)
        elif isinstance(obj, polymorphic_function.Function):
            self._tf_function(obj, path)
        elif isinstance(obj, (types.BuiltinFunctionType, np.ufunc)) and _module_of(obj) \
                and self.trusted(_module_of(obj)) and isinstance(getattr(obj, "__self__", None), (type(None),
                                                                                                 types.ModuleType)):
            _check_stateful(_module_of(obj), path)
            _check_state_reader(obj, path)
            if _module_of(obj) == "builtins" and obj.__name__ not in SAFE_BUILTINS:
                raise Uncacheable("builtin", f"{_where(path)} is the builtin {obj.__name__}()")
            self.packages.add(_module_of(obj).partition(".")[0])
            self._emit("library builtin", _module_of(obj), getattr(obj, "__qualname__", obj.__name__))
        elif _library_export(obj) and self.trusted(_module_of(obj)):  # np.linspace: a NumPy dispatcher object
            _check_stateful(_module_of(obj), path)
            _check_state_reader(obj, path)
            self._emit("library callable", _module_of(obj), obj.__qualname__)
            self.guard(path, f"{_module_of(obj)}.{obj.__qualname__}")
        elif self.claims(obj):
            assert self.rule is not None
            self.rule.key(self, obj, path)
        elif isinstance(obj, types.MethodType):
            raise Uncacheable("value", f"{_where(path)} is a bound method of a {type(obj.__self__).__name__}")
        else:
            raise Uncacheable("value", f"{_where(path)} is a {type(obj).__module__}.{type(obj).__qualname__} "
                                       "(not a plain value)")

    def _array(self, array: np.ndarray, path: str) -> None:
        if array.dtype.hasobject or array.nbytes > MAX_VALUE_BYTES:
            raise Uncacheable("value", f"{_where(path)} is a NumPy array of {array.dtype} ({array.nbytes} bytes)")
        digest = xxhash.xxh3_128_hexdigest(np.ascontiguousarray(array))
        self._emit("ndarray", array.dtype.str, array.shape, digest)
        self.guard(path, f"ndarray {array.dtype} {array.shape} {digest[:12]}")

    def _variable(self, variable: Any, path: str) -> None:
        if not self.once(variable, path):
            return
        self.bindings[path] = variable
        # tf.function's first trace makes its variables of this subclass: they act as the ResourceVariable made eagerly
        kind = "ResourceVariable" if isinstance(variable, UnliftedInitializerVariable) else type(variable).__name__
        self._emit("variable", kind, variable.name, variable.dtype.name, repr(variable.shape),
                   variable.device, variable.trainable)
        self.guard(path, f"variable {variable.dtype.name} {variable.shape}")

    def _eager_tensor(self, value: Any, path: str) -> None:
        if not self.once(value, path):
            return
        if value.dtype in (dtypes.resource, dtypes.variant) or value.dtype.size * max(
                1, value.shape.num_elements() or 0) > MAX_VALUE_BYTES:
            raise Uncacheable("value", f"{_where(path)} is an eager tensor of {value.dtype.name} {value.shape}")
        data = value.numpy()
        if value.dtype == dtypes.string:  # a scalar's numpy() is bytes, not an array: keyed as an object array
            data = np.asarray(data, dtype=object)
        digest = xxhash.xxh3_128_hexdigest(np.ascontiguousarray(data).tobytes()) if data.dtype != object else \
            xxhash.xxh3_128_hexdigest(repr(data.tolist()).encode())
        self.bindings[path] = value
        self._emit("eager tensor", value.dtype.name, repr(value.shape), value.device, digest)
        self.guard(path, f"tensor {value.dtype.name} {value.shape} {digest[:12]}")

    def resource(self, handle: Any, path: str, *parts: Any) -> None:
        """A resource handle a trace may capture (a lookup table's), keyed by ``parts`` (its content, as the caller
        reads it: preprocessing.py) and bound by ``path`` on a hit."""
        if not self.once(handle, path):
            return
        self.bindings[path] = handle
        self._emit("resource", *parts)
        self.guard(path, " ".join(str(part) for part in parts))

    def _tf_function(self, function: Any, path: str) -> None:
        """A tf.function the code calls: its options, and its Python function walked as user code."""
        if not self.once(function, path):
            return
        signature = function.input_signature
        self._emit("tf.function", function._name, function._autograph, function._jit_compile,
                   function._reduce_retracing, repr(signature), sorted(function._attributes.items()),
                   repr(function._experimental_autograph_options))
        inner = function.python_function
        if not isinstance(inner, types.FunctionType):
            raise Uncacheable("method" if isinstance(inner, types.MethodType) else "not_a_function",
                              f"{_where(path)} is a tf.function of a {type(inner).__name__}")
        self._reached_function(inner, _join(path, "fn"))


def _check_stateful(module_name: str, path: str) -> None:
    if is_stateful(module_name):
        raise Uncacheable("value", f"{_where(path)} reaches {module_name} (process state: the environment, the "
                                   "clock, random numbers, files)")


def _check_state_reader(obj: Any, path: str) -> None:
    if is_state_reader(obj):
        raise Uncacheable("value", f"{_where(path)} is {_module_of(obj)}.{getattr(obj, '__name__', obj)}, which "
                                   "reads files (what it read is not in the key)")


KEYABLE_TYPES = (types.FunctionType, type, dtypes.DType, tensor_shape.TensorShape, np.generic, np.dtype, np.ndarray,
                 enum.Enum, resource_variable_ops.BaseResourceVariable, ops.EagerTensor, polymorphic_function.Function,
                 types.BuiltinFunctionType, np.ufunc, types.MethodType)


def _keyable(obj: Any) -> bool:
    """Whether ``Walk.value`` has a rule for ``obj`` (it keys it or refuses it as a whole), rather than it being an
    object read through its attributes."""
    kind = type(obj)
    return kind in PLAIN_SCALARS or kind in CONTAINERS or kind is tensor_lib.TensorSpec or \
        isinstance(obj, KEYABLE_TYPES) or (isinstance(obj, tuple) and is_plain_namedtuple(kind)) or \
        _library_export(obj)


def _library_export(obj: Any) -> bool:
    """Whether ``obj`` is what its module exports under its qualified name (``numpy.linspace``, a dispatcher object
    NumPy makes of a function): library API, not an instance holding state (a layer, a partial has no such name)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    qualname = getattr(obj, "__qualname__", None)
    if module is None or not isinstance(qualname, str) or not callable(obj):
        return False
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is obj


def _is_sunder(name: str) -> bool:
    return len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_" and name[-2] != "_"


def _original_builtin(name: str, obj: Any) -> bool:
    """Whether ``builtins.<name>`` is still Python's own (not replaced by the program: ``builtins.abs = ...``)."""
    if isinstance(obj, types.BuiltinFunctionType):
        return obj.__module__ == "builtins" and obj.__name__ == name
    if isinstance(obj, type):
        return obj.__module__ == "builtins" and obj.__name__ == name
    return obj is None or type(obj) in (bool, type(Ellipsis), type(NotImplemented)) or name in ("__name__",)


def _is_exception(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def _is_tf_type(obj: Any) -> bool:
    return type(obj).__module__.startswith("tensorflow.")


def _module_of(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    if module is None and isinstance(obj, np.ufunc):
        return "numpy"
    return module or ""


def _join(path: str, step: str) -> str:
    return f"{path}/{step}" if path else step


def _where(path: str) -> str:
    """A path as a log line names it: ``g:helper/c:scale`` -> ``global helper, closure scale``."""
    if not path:
        return "the function"
    words = {"g": "global", "c": "closure", "k": "keyword default"}
    shown = []
    for step in path.split("/"):
        kind, sep, name = step.partition(":")
        shown.append(f"{words.get(kind, kind)} {name}" if sep else step)
    return ", ".join(shown)
