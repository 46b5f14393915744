"""Giving freed heap memory back to the OS between the phases of a miss.

A miss on a frozen model allocates and frees several transient copies of its weights: the GraphDefs the key
is read from, the Grappler input, Grappler's own working graphs (inside TensorFlow's C++: several times its
input), the import into a run graph and the first run's executor. glibc keeps most of what is freed in its
heap (blocks under its dynamic mmap threshold, which grows as big blocks are freed, stay there), and the
next phase, partly on other threads and so in other malloc arenas, faults fresh memory on top of it.

Where it pays (the peak memory of a Session with several fetch signatures of a frozen model on an empty cache
dir: benchmarks/session_memory.py, in the session-memory section of benchmarks/results/RESULTS*.md):
- right after a Session's miss compiled (session/drop_in.py), before it imports and runs the result next to
  the signatures it holds: it lowers that peak. Not after every miss (compile/pipeline.py): a lone compile
  peaks inside Grappler, which a later trim does not lower, and the import and first run would fault afresh
  what the freed heap would have served;
- after a new signature's first run (session/drop_in.py), so the Session's RSS is what it keeps.
Not right before Grappler: that gave no lower peak and made the miss slower, Grappler faulting its working
memory afresh instead of reusing the freed heap. ``malloc_trim`` itself takes a while when it returns a lot
of memory; elsewhere than glibc this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


def release_freed_memory() -> None:
    """Give the heap memory freed since the last call back to the OS (glibc's ``malloc_trim``; elsewhere a
    no-op)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
