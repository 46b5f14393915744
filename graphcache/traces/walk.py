"""What a trace can read on the Python side, walked before tracing: the ``code`` part of a trace's key.

Tracing runs the Python function once; the graph it builds depends on the function's code and on every
Python value that code reads. The walk starts at the function and follows what its bytecode names:

- code objects, recursively (``co_code``, constants with nested code, names, variable names, flags,
  exception table; not file names or line numbers, which no graph sees), defaults and keyword defaults;
- closure cells and the module globals the code loads (``LOAD_GLOBAL``/``LOAD_NAME``, nested code
  included) and the modules it imports;
- user code reached that way (functions, classes with their methods and plain attributes, tf.functions:
  their options and their Python function), walked the same way. Library code (TensorFlow, Keras, NumPy,
  the standard library, anything installed in site-packages) is named, not walked: its version is part of
  the key (``packages``);
- values, only when plain: None, bool, int, float, complex, str, bytes, tuples/lists/dicts/sets of plain
  values, tf.DType, TensorShape, TensorSpec, NumPy scalars, dtypes and arrays (by their bytes), enum members;
  tf.Variables by type, dtype, shape and device, eager tensors by dtype, shape, device and value. Variables
  and eager tensors are what a trace captures: ``bindings`` names each by the path it was reached by
  (``g:w``: global ``w``; ``c:scale``: closure cell; ``g:helper/g:w``: a global of a global function), so a
  restored trace binds this process's objects in the trace's capture order.

Anything else refuses the trace (``Uncacheable`` with a reason of counters.TRACE_REASONS): an instance of
a user class or of a library type, a user module, a bound method, a builtin with side effects (``print``,
``open``, ``hash`` of a str is seeded per process, ...), library modules of process state (``os``,
``time``, ``random``, ``numpy.random``, ...: ``STATEFUL_MODULES``), code that assigns globals or enclosing
variables.
The walk is repeated after a miss's trace: a trace that changed a value it read (appended to a list)
is not stored either. A tf.function *method* adds its object to this walk (instance.py).
"""

from __future__ import annotations

import builtins
import dis
import enum
import functools
import os
import sys
import sysconfig
import types
from typing import Any

import numpy as np
import xxhash
from tensorflow.python.eager.polymorphic_function import polymorphic_function
from tensorflow.python.framework import dtypes, ops, tensor_shape
from tensorflow.python.framework import tensor as tensor_lib
from tensorflow.python.ops import resource_variable_ops

# Builtins a traced function may call: none of them has a side effect or a per-process result.
SAFE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod",
    "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr", "hasattr",
    "hex", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object",
    "oct", "ord", "pow", "property", "range", "repr", "reversed", "round", "set", "slice", "sorted",
    "staticmethod", "str", "sum", "super", "tuple", "type", "zip", "None", "True", "False", "Ellipsis",
    "NotImplemented", "__build_class__", "__name__",
})
GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
NAMED_LOADS = GLOBAL_LOADS | {"LOAD_DEREF", "LOAD_CLASSDEREF"}  # a global or a closure cell, by name
GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
CELL_STORES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
# Library modules whose functions read or change process state (the environment, the clock, random
# generators, files, threads): a trace that reaches them could bake a value of this process only.
STATEFUL_MODULES = frozenset({
    "os", "sys", "random", "time", "datetime", "uuid", "secrets", "socket", "subprocess", "threading",
    "multiprocessing", "io", "importlib", "inspect", "gc", "ctypes", "logging", "warnings", "pickle", "shutil",
    "tempfile", "glob", "pathlib", "platform", "getpass", "signal", "select", "traceback", "locale", "thread",
})
# Attributes of library modules that are such state too, when the code reads them off the module.
STATEFUL_ATTRIBUTES = frozenset({"numpy.random"})
ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
MAX_VALUE_BYTES = 64 * 2**20  # eager tensors and arrays hashed by value up to this size
MAX_ITEMS = 10_000  # items of one container: bigger ones would make the key cost more than it saves
LONG_TEXT = 256  # str and bytes longer than this are keyed by their hash
SKIPPED_CLASS_ATTRS = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                                 "__annotations__", "__slots__", "__firstlineno__", "__static_attributes__"})
PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))  # exactly these types
CONTAINERS = (tuple, list, dict, set, frozenset)
OWN_PACKAGE = "graphcache"


class Uncacheable(Exception):
    """A trace graphcache will not cache: ``reason`` (one of counters.TRACE_REASONS) and what it saw."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[name]) for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    roots.update(os.path.realpath(path) for path in sys.path if path.endswith(("site-packages", "dist-packages")))
    return tuple(sorted(root + os.sep for root in roots))


@functools.cache
def is_library(module_name: str) -> bool:
    """Whether a module (by name) is library code: built in, in the standard library or installed in
    site-packages (TensorFlow, Keras, NumPy, ...), or graphcache itself. ``__main__`` and the user's own
    modules are not."""
    top = module_name.partition(".")[0]
    if top in ("builtins", OWN_PACKAGE) or top in sys.builtin_module_names:
        return True
    module = sys.modules.get(top)
    path = getattr(module, "__file__", None) if module is not None else None
    if module is None or top == "__main__":
        return False
    if path is None:  # a namespace package or a frozen module
        return True
    return os.path.realpath(path).startswith(_library_roots())


def package_version(top: str) -> str:
    module = sys.modules.get(top)
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else ""


class Walk:
    """One walk from a function (see the module docstring): ``digest()`` is the key part, ``bindings`` the
    capturable objects by path, ``packages`` the library packages named."""

    def __init__(self) -> None:
        self._hasher = xxhash.xxh3_128()
        self._seen: dict[int, str] = {}  # id of a walked object -> the path it was first reached by
        self._keep: list[Any] = []  # walked objects stay alive for the walk, so their ids stay theirs
        self._code: dict[int, str] = {}
        self.bindings: dict[str, Any] = {}  # path -> tf.Variable or eager tensor
        self.packages: set[str] = set()

    def digest(self) -> str:
        return self._hasher.hexdigest()

    def _emit(self, *parts: Any) -> None:
        data = "\x1f".join(str(part) for part in parts).encode("utf-8", "surrogatepass")
        self._hasher.update(len(data).to_bytes(8, "little"))
        self._hasher.update(data)

    def once(self, obj: Any, path: str) -> bool:
        """True the first time ``obj`` is reached; later reaches emit a reference to the first path."""
        first = self._seen.get(id(obj))
        if first is not None:
            self._emit("ref", first)
            return False
        self._seen[id(obj)] = path
        self._keep.append(obj)
        return True

    # -- functions and code ------------------------------------------------------------------------------
    def function(self, fn: types.FunctionType, path: str) -> None:
        """A user function: its code, defaults, closure and the globals its code reads."""
        if not self.once(fn, path):
            return
        code = fn.__code__
        self._emit("function", self.code_hash(code))
        for index, default in enumerate(fn.__defaults__ or ()):
            self.value(default, _join(path, f"d{index}"))
        for name in sorted(fn.__kwdefaults__ or {}):
            self.value(fn.__kwdefaults__[name], _join(path, f"k:{name}"))
        names, attributes = self._global_names(code, frozenset(code.co_freevars), path)
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            try:
                contents = cell.cell_contents
            except ValueError:
                self._emit("empty cell", name)
                continue
            self.value(contents, _join(path, f"c:{name}"))
            if isinstance(contents, types.ModuleType):
                self._check_attributes(contents, attributes.get(name, ()), path)
        for name in names:
            if name in fn.__globals__:
                found = fn.__globals__[name]
                self.value(found, _join(path, f"g:{name}"))
                if isinstance(found, types.ModuleType):
                    self._check_attributes(found, attributes.get(name, ()), path)
            elif name in vars(builtins):
                if name not in SAFE_BUILTINS and not _is_exception(vars(builtins)[name]):
                    raise Uncacheable("builtin", f"{_where(path)} calls {name}() (a side effect, or a result of "
                                                 "this process only)")
                self._emit("builtin", name)
            else:
                self._emit("unbound", name)

    def _global_names(self, code: types.CodeType, enclosing: frozenset[str], path: str
                      ) -> tuple[list[str], dict[str, set[str]]]:
        """Names ``code`` (nested code included) loads as globals or imports, in first-use order, and the
        attributes read straight off each; refuses code that assigns globals or variables of an enclosing scope."""
        names: dict[str, None] = {}
        attributes: dict[str, set[str]] = {}
        for current in code_objects(code):
            own_cells = set(current.co_cellvars)
            previous = None
            for ins in dis.get_instructions(current):
                if ins.opname in ATTRIBUTE_LOADS and previous is not None and previous.opname in NAMED_LOADS:
                    attributes.setdefault(previous.argval, set()).add(ins.argval)
                previous = ins
                if ins.opname in GLOBAL_LOADS:
                    names[ins.argval] = None
                elif ins.opname in GLOBAL_STORES:
                    raise Uncacheable("writes_state", f"{_where(path)} assigns the global {ins.argval!r}")
                elif ins.opname in CELL_STORES and ins.argval in enclosing and ins.argval not in own_cells:
                    raise Uncacheable("writes_state", f"{_where(path)} assigns {ins.argval!r} of an enclosing scope")
                elif ins.opname == "IMPORT_NAME":
                    self._imported(str(ins.argval), path)
        return list(names), attributes

    def _check_attributes(self, module: types.ModuleType, attributes: Any, path: str) -> None:
        for attribute in sorted(attributes):
            if f"{module.__name__}.{attribute}" in STATEFUL_ATTRIBUTES:
                raise Uncacheable("value", f"{_where(path)} reads {module.__name__}.{attribute} (process state)")

    def _imported(self, name: str, path: str) -> None:
        _check_stateful(name, path)
        if not is_library(name):
            raise Uncacheable("value", f"{_where(path)} imports the user module {name!r}")
        top = name.partition(".")[0]
        self.packages.add(top)
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
        membership = _membership_only(code)
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
                self._emit(kind.__name__, len(obj), xxhash.xxh3_128_hexdigest(data))
            else:
                self._emit(kind.__name__, repr(obj))
        elif kind in CONTAINERS:
            self._container(obj, path)
        elif isinstance(obj, tuple) and _is_plain_namedtuple(kind):
            self._emit("namedtuple", kind.__module__, kind.__qualname__, kind._fields, repr(kind._field_defaults))
            self._container(obj, path)
        elif isinstance(obj, types.FunctionType):
            self._reached_function(obj, path)
        elif isinstance(obj, types.ModuleType):
            if not is_library(obj.__name__):
                raise Uncacheable("value", f"{_where(path)} is the user module {obj.__name__!r} (its attributes "
                                           "are not followed)")
            _check_stateful(obj.__name__, path)
            self.packages.add(obj.__name__.partition(".")[0])
            self._emit("module", obj.__name__)
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
        self._emit(type(obj).__name__, len(obj))
        for index, item in enumerate(obj):  # sets in their iteration order: a trace iterates them so too
            self.value(item, f"{path}[{index}]")

    def _reached_function(self, fn: types.FunctionType, path: str) -> None:
        module = getattr(fn, "__module__", None) or ""
        if is_library(module):
            _check_stateful(module, path)
            self.packages.add(module.partition(".")[0])
            self._emit("library function", module, fn.__qualname__)
        else:
            self.function(fn, path)

    def _class(self, cls: type, path: str) -> None:
        if is_library(cls.__module__):
            self.packages.add(cls.__module__.partition(".")[0])
            self._emit("library class", cls.__module__, cls.__qualname__)
            return
        if not self.once(cls, path):
            return
        self._emit("class", cls.__qualname__, len(cls.__bases__))
        for index, base in enumerate(cls.__bases__):
            self._class(base, _join(path, f"b{index}"))
        for name, attr in vars(cls).items():
            if name in SKIPPED_CLASS_ATTRS or (name.startswith("__") and name.endswith("__")
                                               and not isinstance(attr, types.FunctionType)):
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
        if isinstance(obj, dtypes.DType):
            self._emit("dtype", obj.name)
        elif isinstance(obj, tensor_shape.TensorShape):
            self._emit("shape", repr(obj))
        elif type(obj) is tensor_lib.TensorSpec:
            self._emit("spec", repr(obj))
        elif isinstance(obj, (np.generic, np.dtype)):
            self._emit("numpy", type(obj).__name__, repr(obj))
        elif isinstance(obj, np.ndarray):
            self._array(obj, path)
        elif isinstance(obj, enum.Enum):
            self._emit("enum", type(obj).__module__, type(obj).__qualname__, obj.name)
        elif isinstance(obj, resource_variable_ops.BaseResourceVariable) and _is_tf_type(obj):
            self._variable(obj, path)
        elif isinstance(obj, ops.EagerTensor):
            self._eager_tensor(obj, path)
        elif isinstance(obj, polymorphic_function.Function):
            self._tf_function(obj, path)
        elif isinstance(obj, (types.BuiltinFunctionType, np.ufunc)) and _module_of(obj) \
                and is_library(_module_of(obj)) and isinstance(getattr(obj, "__self__", None), (type(None),
                                                                                               types.ModuleType)):
            _check_stateful(_module_of(obj), path)
            if _module_of(obj) == "builtins" and obj.__name__ not in SAFE_BUILTINS:
                raise Uncacheable("builtin", f"{_where(path)} is the builtin {obj.__name__}()")
            self.packages.add(_module_of(obj).partition(".")[0])
            self._emit("library builtin", _module_of(obj), getattr(obj, "__qualname__", obj.__name__))
        elif isinstance(obj, types.MethodType):
            raise Uncacheable("value", f"{_where(path)} is a bound method of a {type(obj.__self__).__name__}")
        else:
            raise Uncacheable("value", f"{_where(path)} is a {type(obj).__module__}.{type(obj).__qualname__} "
                                       "(not a plain value)")

    def _array(self, array: np.ndarray, path: str) -> None:
        if array.dtype.hasobject or array.nbytes > MAX_VALUE_BYTES:
            raise Uncacheable("value", f"{_where(path)} is a NumPy array of {array.dtype} ({array.nbytes} bytes)")
        self._emit("ndarray", array.dtype.str, array.shape, xxhash.xxh3_128_hexdigest(np.ascontiguousarray(array)))

    def _variable(self, variable: Any, path: str) -> None:
        if not self.once(variable, path):
            return
        self.bindings[path] = variable
        self._emit("variable", type(variable).__name__, variable.dtype.name, repr(variable.shape), variable.device,
                   variable.trainable)

    def _eager_tensor(self, value: Any, path: str) -> None:
        if not self.once(value, path):
            return
        if value.dtype in (dtypes.resource, dtypes.variant) or value.dtype.size * max(
                1, value.shape.num_elements() or 0) > MAX_VALUE_BYTES:
            raise Uncacheable("value", f"{_where(path)} is an eager tensor of {value.dtype.name} {value.shape}")
        data = value.numpy()
        digest = xxhash.xxh3_128_hexdigest(np.ascontiguousarray(data).tobytes()) if data.dtype != object else \
            xxhash.xxh3_128_hexdigest(repr(data.tolist()).encode())
        self.bindings[path] = value
        self._emit("eager tensor", value.dtype.name, repr(value.shape), value.device, digest)

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
    top = module_name.partition(".")[0].lstrip("_")  # _random, _thread, _io: the C halves
    if top in STATEFUL_MODULES or any(module_name == name or module_name.startswith(name + ".")
                                      for name in STATEFUL_ATTRIBUTES):
        raise Uncacheable("value", f"{_where(path)} reaches {module_name} (process state: the environment, the "
                                   "clock, random numbers, files)")


def code_objects(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in its constants (functions, comprehensions, classes)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(code_objects(const))
    return found


def _membership_only(code: types.CodeType) -> set[int]:
    """Indexes of the frozenset constants of ``code`` that are only tested for membership (``x in {...}``):
    their iteration order (a str's hash is seeded per process) cannot reach a trace."""
    used: dict[int, bool] = {}
    instructions = list(dis.get_instructions(code))
    for ins, after in zip(instructions, [*instructions[1:], None], strict=True):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, frozenset):
            only = after is not None and after.opname == "CONTAINS_OP"
            used[ins.arg] = used.get(ins.arg, True) and only
    return {index for index, only in used.items() if only}


NAMEDTUPLE_MEMBERS = frozenset({"__doc__", "__getnewargs__", "__match_args__", "__module__", "__new__", "__repr__",
                                "__slots__", "_asdict", "_field_defaults", "_fields", "_make", "_replace"})


def _is_plain_namedtuple(kind: type) -> bool:
    """A class made by collections.namedtuple and nothing more (its fields and defaults say all it does)."""
    fields = getattr(kind, "_fields", None)
    return kind.__bases__ == (tuple,) and isinstance(fields, tuple) and \
        set(vars(kind)) <= NAMEDTUPLE_MEMBERS | set(fields)


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
