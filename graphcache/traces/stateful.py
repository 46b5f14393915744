"""Process state a trace must not read: the library modules and functions walk.py refuses to reach.

A trace that reaches the environment, the clock, random generators or files could bake a value of the tracing
process only; a key cannot hold it. walk.py refuses code that reaches these (reason ``value``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

# Library modules whose functions read or change process state (the environment, the clock, random
# generators, files, threads): a trace that reaches them could bake a value of this process only.
STATEFUL_MODULES = frozenset({
    "os", "sys", "random", "time", "datetime", "uuid", "secrets", "socket", "subprocess", "threading",
    "multiprocessing", "io", "importlib", "inspect", "gc", "ctypes", "logging", "warnings", "pickle", "shutil",
    "tempfile", "glob", "pathlib", "platform", "getpass", "signal", "select", "traceback", "locale", "thread",
    # the C halves and neighbours of those: posix.environ is the start-up environment as a plain dict
    "posix", "nt", "pwd", "grp", "resource", "fcntl", "mmap", "sysconfig", "site", "faulthandler", "tracemalloc",
    "zoneinfo", "asyncio", "concurrent", "queue", "sched", "selectors", "urllib", "http", "ssl", "sqlite3", "dbm",
    "shelve", "atexit",
})
# Attributes of library modules that are such state too, when the code reads them off the module.
STATEFUL_ATTRIBUTES = frozenset({"numpy.random"})
# Modules of trusted packages whose functions read or write files: what they read is not in the key.
STATEFUL_SUBMODULES = frozenset({
    "tensorflow.python.lib.io", "tensorflow.python.platform.gfile", "tensorflow.python.saved_model.load",
    "tensorflow.python.saved_model.loader_impl", "tensorflow.python.training.py_checkpoint_reader",
    "tensorflow.python.training.checkpoint_utils", "keras.src.saving", "keras.src.legacy.saving",
    "keras.src.utils.file_utils", "numpy.lib._npyio_impl", "numpy.lib.npyio", "numpy.lib.format",
    "numpy.lib._datasource",
})
# Trusted functions that read files but carry their package's top-level name as __module__ (NumPy's).
STATE_READERS = {"numpy": ("load", "loadtxt", "genfromtxt", "fromfile", "fromregex", "memmap", "save", "savez",
                           "savez_compressed", "savetxt", "DataSource")}


@functools.cache  # by module name: a walk asks for each function it reaches
def is_stateful(module_name: str) -> bool:
    """Whether code of ``module_name`` reads or changes process state (or reads files)."""
    top = module_name.partition(".")[0].lstrip("_")  # _random, _thread, _io: the C halves
    return top in STATEFUL_MODULES or any(module_name == name or module_name.startswith(name + ".")
                                          for name in STATEFUL_ATTRIBUTES | STATEFUL_SUBMODULES)


@functools.cache
def state_reader_ids() -> frozenset[int]:
    """The objects of ``STATE_READERS`` (trusted functions whose ``__module__`` is their package's top, as
    NumPy's are: the module rule cannot tell them)."""
    found = set()
    for module_name, names in STATE_READERS.items():
        module = sys.modules.get(module_name)
        for name in names:
            obj = getattr(module, name, None)
            if obj is not None:
                found.add(id(obj))
    return frozenset(found)


def is_state_reader(obj: Any) -> bool:
    """Whether ``obj`` is one of ``STATE_READERS`` (a trusted function that reads files)."""
    return id(obj) in state_reader_ids()


__all__ = ["STATEFUL_ATTRIBUTES", "STATEFUL_MODULES", "STATEFUL_SUBMODULES", "STATE_READERS", "is_state_reader",
           "is_stateful", "state_reader_ids"]
