"""Reading a byte range of a file into a new ``bytes`` object, with as few passes over memory as possible.

An entry's payload (hundreds of MB for a big frozen model) is read once per hit and handed to TensorFlow's
importer as ``bytes``. How it is read decides what a hit's read costs:

- ``BufferedReader.read()`` after a short read of the prefix (what ``open(path, "rb")`` gives) returns
  what it had buffered joined with the rest: the whole payload is copied a second time, which doubles
  the read;
- ``os.pread(fd, n, offset)`` allocates a ``bytes`` of exactly ``n`` bytes and the kernel copies the page
  cache into it: one copy, no join. Most of its cost is the page faults of that new, untouched memory
  (one per 4 KiB page, each zeroing its page);
- the same read into a ``bytes`` whose memory was populated first in one call
  (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+): the kernel maps all its pages at once instead of
  trapping once per page. Less CPU than ``os.pread`` (the store table of benchmarks/results/RESULTS.md,
  written by ``benchmarks/store_vs_diskcache.py``).

The last one needs the new ``bytes`` object's address before it is filled: the C API's own idiom for
building a ``bytes`` (``PyBytes_FromStringAndSize(NULL, n)`` returns one whose contents the caller
writes before anyone else sees it), called through ``ctypes``, then ``pread`` into it. Where any piece is
missing (not CPython, not Linux, an old kernel), reads fall back to ``os.pread``: the same bytes, a
little slower. The data is copied out of the file before anyone checks it, so a file changed after
the read cannot change what was checked (a memory map would allow that).
"""

from __future__ import annotations

import os
import sys
from typing import Any

POPULATE_FROM = 1 << 20  # reads at least this big go through the populated buffer
_CHUNK = 1 << 30  # one pread at most this much (Linux caps a read at about 2 GiB)
HASH_CHUNK = 1 << 20  # read this much at a time when hashing while reading: hashed while in the CPU's cache
_MADV_POPULATE_WRITE = 23
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _native() -> Any:
    """(new_bytes, address_of, pread, madvise) through ctypes, or None where unavailable."""
    if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
        new_bytes.restype, new_bytes.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_ssize_t)
        address_of = ctypes.pythonapi.PyBytes_AsString
        address_of.restype, address_of.argtypes = ctypes.c_void_p, (ctypes.py_object,)
        libc = ctypes.CDLL(None, use_errno=True)
        pread, madvise = libc.pread, libc.madvise
        pread.restype, pread.argtypes = ctypes.c_ssize_t, (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                                           ctypes.c_int64)
        madvise.restype, madvise.argtypes = ctypes.c_int, (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return new_bytes, address_of, pread, madvise, ctypes.get_errno
    except (ImportError, AttributeError, OSError):
        return None


_NATIVE = _native()


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes of ``fd`` from ``offset`` (fewer only at the end of the file), ``os.pread``'s way."""
    first = os.pread(fd, size, offset)
    if len(first) == size or not first:
        return first
    parts = [first]
    done = len(first)
    while done < size:
        part = os.pread(fd, size - done, offset + done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def read_range(fd: int, size: int, offset: int, hasher: Any = None) -> bytes:
    """``size`` bytes of the open file ``fd`` from ``offset`` as a new ``bytes`` (shorter when the file
    ends first), read with one copy into memory populated in one call (see the module docstring).

    ``hasher`` (anything with ``update``, e.g. an xxh3 object), when given, is fed exactly the bytes
    returned, each ``HASH_CHUNK`` right after it is read, while it is still in the CPU's cache: a
    checksum of a big payload then costs less than a second pass over memory.
    """
    if size < POPULATE_FROM or _NATIVE is None:
        data = pread_all(fd, size, offset)
        if hasher is not None:
            hasher.update(data)
        return data
    new_bytes, address_of, pread, madvise, get_errno = _NATIVE
    buffer = new_bytes(None, size)  # contents uninitialized; this function is its only holder until filled
    address = address_of(buffer)
    start = -(-address // _PAGE) * _PAGE
    if size > start - address + _PAGE:
        madvise(start, (address + size - start) // _PAGE * _PAGE, _MADV_POPULATE_WRITE)  # a hint: errors ignored
    view = memoryview(buffer) if hasher is not None else None
    step = HASH_CHUNK if hasher is not None else _CHUNK
    done = 0
    try:
        while done < size:
            got = pread(fd, address + done, min(step, size - done), offset + done)
            if got < 0:
                error = get_errno()
                if error == 4:  # EINTR
                    continue
                raise OSError(error, os.strerror(error))
            if got == 0:
                return buffer[:done]  # the file is shorter than it said: the caller's length check reports it
            if view is not None:
                hasher.update(view[done:done + got])
            done += got
    finally:
        if view is not None:
            view.release()
    return buffer
