"""CPython's dict version tags, read through ctypes: whether a dict was written since it was last looked at.

CPython gives every dict a version tag that changes on each write that changes what it holds (PEP 509's
``ma_version_tag``, kept in the dict object right after its size in 3.11 to 3.13). It is not exposed to Python;
``ctypes`` reads it at its address. Where this interpreter is not one whose dict layout is known, or a self-test on a
dict made for it fails (the tag must move on each write, stay on reads, and the size beside it must be the dict's),
``tag_reader()`` gives None and callers do without.

Used by libwrites.py: comparing ~2,100 module dicts with copies of them at each trace key would take milliseconds;
reading their tags takes ~0.2 ms.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any

KNOWN_LAYOUT = ((3, 11), (3, 12), (3, 13))  # PyDictObject: the object head, ma_used, ma_version_tag, ...

TagCell = Any  # a ctypes.c_uint64 over a dict's tag: ``.value`` reads it now


def tag_reader() -> Callable[[dict[Any, Any]], TagCell] | None:
    """A function giving a live view of a dict's version tag (the dict must stay alive while the view is read:
    hold a reference to it), or None where the tag cannot be read here (see the module docstring)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in KNOWN_LAYOUT:
        return None
    used_at = object.__basicsize__
    tag_at = used_at + ctypes.sizeof(ctypes.c_ssize_t)

    def cell(entries: dict[Any, Any]) -> TagCell:
        return ctypes.c_uint64.from_address(id(entries) + tag_at)

    return cell if _self_test(cell, used_at) else None


def _self_test(cell: Callable[[dict[Any, Any]], TagCell], used_at: int) -> bool:
    probe: dict[str, int] = {"a": 1}
    size = ctypes.c_ssize_t.from_address(id(probe) + used_at)
    tag = cell(probe)
    seen = [tag.value]
    writes: list[Callable[[], Any]] = [lambda: probe.__setitem__("b", 2), lambda: probe.__setitem__("a", 3),
                                       lambda: probe.pop("b"), lambda: probe.update(c=4)]
    for write in writes:
        _ = probe.get("a"), "a" in probe, list(probe.items())  # reads leave it
        if tag.value != seen[-1]:
            return False
        write()
        seen.append(tag.value)
    return size.value == len(probe) and len(set(seen)) == len(seen)


__all__ = ["TagCell", "tag_reader"]
