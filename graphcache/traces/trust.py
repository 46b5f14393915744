"""Which code a trace key may name instead of walking it: an allowlist, every entry with its reason.

A trace hit skips the function's Python, so the key must cover everything that Python read. Code the key
*walks* (walk.py: bytecode, the globals and closures it reads, attributes read off modules and objects)
is covered by what the walk saw. Code the key only *names* is covered by the name's identity, which holds
only where two processes with the same identity run the same code on the same inputs. That is trusted
here for a closed list of packages, never by location (a project folder without ``__init__.py``, a user
package installed with ``pip install .``, a third party's package in site-packages: all are walked as user
code):

- **the Python standard library** (``sys.stdlib_module_names``, and only where the module was loaded from
  the interpreter's own library or is built in): identity is the interpreter (``sys.version``, its cache
  tag). Its modules of process state (the environment, clocks, random generators, files: stateful.py's
  ``STATEFUL_MODULES``) are refused, not trusted;
- **TensorFlow, Keras, NumPy and the packages their tracing code passes through** (``TRUSTED``): identity
  is the installed distribution: its name, its version and a hash of its ``RECORD`` (the installed file
  list with each file's hash), so a same-version rebuild is another identity. A package's ``__version__``
  is never read. The settings these libraries read while tracing are one keyed snapshot (ambient.py);
  their functions that read files are refused by walk.py (stateful.py's ``STATE_READERS``);
- **graphcache** itself (the ``versions`` part carries its version).

A module counts as a trusted package's only when it was loaded from that distribution's install folder:
a local folder that shadows ``numpy`` is walked as user code.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
import types
from dataclasses import dataclass

import xxhash

OWN_PACKAGE = "graphcache"
STDLIB = "python"  # the standard library's entry in a key's trusted identities
FROZEN_PREFIX = "<frozen "  # the co_filename of code in a frozen standard module: "<frozen posixpath>"

# Import name (a top-level package, or a dotted prefix for a namespace package) -> its distribution, and why.
TRUSTED: dict[str, tuple[str, str]] = {
    "tensorflow": ("tensorflow", "the traced ops themselves; its settings are in ambient.py's snapshot"),
    "keras": ("keras", "layers, losses, optimizers; floatx, epsilon, dtype policy and backend are in the snapshot"),
    "numpy": ("numpy", "array math at trace time; its error state and print options are in the snapshot"),
    "ml_dtypes": ("ml-dtypes", "bfloat16 and float8 dtypes that TensorFlow, Keras and NumPy share"),
    "optree": ("optree", "Keras' tree utilities (nest), pure functions of their arguments"),
    "absl": ("absl-py", "TensorFlow's logging and flags; a flag a trace reads is keyed by value (walk.py)"),
    "google.protobuf": ("protobuf", "TensorFlow's attribute values and graph protos"),
    "wrapt": ("wrapt", "TensorFlow's object proxies (tracking wrappers)"),
    "gast": ("gast", "autograph's syntax trees"),
    "astunparse": ("astunparse", "autograph's source generation"),
    "opt_einsum": ("opt-einsum", "tf.einsum's contraction order"),
    "typing_extensions": ("typing-extensions", "type annotations TensorFlow and Keras evaluate"),
    "namex": ("namex", "Keras' API export decorators"),
}

# What the key trusts of these libraries beyond "the same code on the same inputs does the same", each with its
# reason and its test (tests/test_trace_trust.py).
LIBRARY_STEPS_KEEP_CONFIGS = (
    "Keras' own layers and models do not change their config (get_config, get_build_config) while a predict, "
    "train or test step is traced. The walk after a miss's trace (keying.same_reads) reuses their configs from "
    "the walk before (a model's get_config is most of a walk's time); a user layer's config is taken again. "
    "Test: test_library_layers_keep_their_config_while_traced.")


@dataclass(frozen=True)
class Trust:
    """Why a module is trusted: ``identity`` names it in a key (a distribution name, ``python``, graphcache)."""

    identity: str


@functools.cache
def _site_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({os.path.realpath(paths[name]) + os.sep for name in ("purelib", "platlib") if name in paths}))


@functools.cache
def _stdlib_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[name]) for name in ("stdlib", "platstdlib") if name in paths}
    return tuple(sorted(root + os.sep for root in roots))


def _site_of(import_name: str) -> str | None:
    """The folder a loaded module or package was imported from (``site`` for ``site/google/protobuf/__init__.py``
    and ``google.protobuf``; for ``site/six.py``), or None when it is not loaded or its folders disagree. Resolved
    once per module object (realpath stats every folder of the path; a first walk asks this of every trusted module it
    meets)."""
    module = sys.modules.get(import_name)
    return None if module is None else _site_of_module(import_name, module)


@functools.cache  # by the module object: a loaded module does not move
def _site_of_module(import_name: str, module: types.ModuleType) -> str | None:
    file = getattr(module, "__file__", None)
    if file:  # site/six.py, site/google/protobuf/__init__.py (a package's __path__ may be extended: TensorFlow's is)
        levels = import_name.count(".") + (2 if hasattr(module, "__path__") else 1)
        return os.path.realpath(file).rsplit(os.sep, levels)[0]
    # A namespace package: each folder of its __path__ is site/<its name's folders>.
    sites = {os.path.realpath(str(path)).rsplit(os.sep, import_name.count(".") + 1)[0]
             for path in getattr(module, "__path__", None) or ()}
    return sites.pop() if len(sites) == 1 else None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def _dist_info(site: str, distribution: str) -> str | None:
    """The ``*.dist-info`` folder of ``distribution`` in ``site`` (PEP 427/491 name it ``<name>-<version>``, the name
    normalized), or None. A listing of one folder: importlib.metadata's search of every path entry cost more than the
    rest of a trace key together."""
    wanted = _normalized(distribution)
    try:
        names = os.listdir(site)
    except OSError:
        return None
    found = [name for name in names if name.endswith(".dist-info") and _normalized(name.partition("-")[0]) == wanted]
    return os.path.join(site, found[0]) if len(found) == 1 else None  # two versions side by side: trust neither


def _files(module: object) -> list[str]:
    """Where a module was loaded from: its file, else (a namespace package) the folders of its ``__path__``."""
    path = getattr(module, "__file__", None)
    if path:
        return [path]
    return [str(entry) for entry in getattr(module, "__path__", None) or ()]


def _loaded_under(module_name: str, root: str) -> bool:
    module = sys.modules.get(module_name)
    files = _files(module) if module is not None else []
    return bool(files) and all(os.path.realpath(path).startswith(root) for path in files)


def _trusted_prefix(module_name: str) -> str | None:
    for prefix in TRUSTED:
        if module_name == prefix or module_name.startswith(prefix + "."):
            return prefix
    return None


@functools.cache
def trust_of(module_name: str) -> Trust | None:
    """The trust a module (by name, as ``__module__`` spells it) is named by, or None: walk its code."""
    if not module_name:
        return None
    top = module_name.partition(".")[0]
    if top == OWN_PACKAGE:
        return Trust(OWN_PACKAGE)
    if top in sys.builtin_module_names or module_name in sys.builtin_module_names:
        return Trust(STDLIB)
    if top in sys.stdlib_module_names:
        module = sys.modules.get(top)
        if module is None:  # named, not loaded (a class's __module__ after a reload): nothing proves where from
            return None
        files = _files(module)
        if not files and getattr(module, "__spec__", None) is not None and module.__spec__.origin == "frozen":
            return Trust(STDLIB)
        return Trust(STDLIB) if any(_loaded_under(top, root) for root in _stdlib_roots()) else None
    prefix = _trusted_prefix(module_name)
    if prefix is None:
        return None
    distribution = TRUSTED[prefix][0]
    # The package's folder must be its distribution's: installed (a dist-info beside it) in the folder it was loaded
    # from. A project folder that shadows the name has no dist-info of that distribution beside it.
    site = _site_of(prefix)
    return Trust(distribution) if site is not None and _dist_info(site, distribution) is not None else None


def is_trusted(module_name: str) -> bool:
    return trust_of(module_name) is not None


@functools.cache  # as trust_of: a loaded module does not move; a walk asks this for every trusted function it reaches
def defines(module_name: str, filename: str) -> bool:
    """Whether code compiled from ``filename`` is the trusted ``module_name``'s own: the file lies in the folder
    its package was loaded from (the interpreter's library, for the standard library). A ``__module__`` is only
    a name: a class made by calling ``abc.ABCMeta(...)`` from user code is named ``abc``'s, and ``exec`` with a
    borrowed ``__name__`` names a library; such code is walked, not trusted."""
    trust = trust_of(module_name)
    if trust is None or not filename:
        return False
    if trust.identity == STDLIB and filename.startswith(FROZEN_PREFIX) and filename.endswith(">"):
        name = filename[len(FROZEN_PREFIX):-1]  # "<frozen posixpath>": a module built in the interpreter
        spec = getattr(sys.modules.get(name), "__spec__", None)  # (abc, codecs, os, _collections_abc, ...)
        return spec is not None and spec.origin == "frozen" and name in sys.stdlib_module_names
    real = os.path.realpath(filename)
    if trust.identity == STDLIB:  # the library's folders (a virtual environment's holds site-packages too)
        return any(real.startswith(root) for root in _stdlib_roots()) and \
            not any(real.startswith(root) for root in _site_roots())
    top = OWN_PACKAGE if trust.identity == OWN_PACKAGE else _trusted_prefix(module_name)
    module = sys.modules.get(top or "")
    return module is not None and any(real.startswith(folder) for folder in _real_folders(module))


@functools.cache  # by the package object: ``defines`` asks for each trusted file it meets (a folder added to a
# package's __path__ later is not seen here: its files are then walked, not trusted)
def _real_folders(package: types.ModuleType) -> tuple[str, ...]:
    """The real folders a loaded package's files lie in, each ending in a separator."""
    folders = [os.path.dirname(path) if path.endswith(".py") else path for path in _files(package)]
    return tuple(os.path.realpath(folder) + os.sep for folder in folders)


def class_defines(cls: type) -> bool:
    """``defines`` for a class: each function in its namespace compiled from its module's files; a class without
    functions of its own must be what its module holds under its qualified name."""
    codes = [attr.__code__ for attr in vars(cls).values() if isinstance(attr, types.FunctionType)]
    if codes:
        return all(defines(cls.__module__, code.co_filename) for code in codes)
    owner: object = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        owner = getattr(owner, part, None)
    return owner is cls


def library_own(value: object) -> bool:
    """A module, or a function or class whose code a trusted package's files define: what the library itself puts
    in its modules and registries (libwrites.py, libhooks.py)."""
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, types.FunctionType):
        return defines(value.__module__ or "", value.__code__.co_filename)
    if isinstance(value, type):
        return is_trusted(value.__module__) and value.__module__ in sys.modules and defines(
            value.__module__, getattr(sys.modules[value.__module__], "__file__", None) or "")
    return False


@functools.cache
def identity(name: str) -> str:
    """What a trusted identity stands for in a key: the interpreter, graphcache's version, or a distribution's
    name, version and the xxh3 of its ``RECORD`` (so a rebuild with the same version is another identity)."""
    if name == STDLIB:
        return f"{sys.version}|{sys.implementation.cache_tag}"
    if name == OWN_PACKAGE:
        from ..version import package_version

        return package_version()
    info = _installed_info(name)
    if info is None:
        return "not installed"
    try:
        with open(os.path.join(info, "RECORD"), "rb") as record:
            digest = xxhash.xxh3_128_hexdigest(record.read())
    except OSError:
        digest = "no RECORD"
    return f"{os.path.basename(info).removesuffix('.dist-info')}|{digest}"


def _installed_info(distribution: str) -> str | None:
    """The dist-info folder of a distribution: beside its trusted package where this process loaded one, else the
    first on ``sys.path``."""
    for prefix, (name, _why) in TRUSTED.items():
        site = _site_of(prefix) if name == distribution and trust_of(prefix) is not None else None
        if site is not None:
            return _dist_info(site, distribution)
    for path in sys.path:
        info = _dist_info(path, distribution) if os.path.isdir(path) else None
        if info is not None:
            return info
    return None


__all__ = ["STDLIB", "TRUSTED", "Trust", "identity", "is_trusted", "library_own", "trust_of"]
