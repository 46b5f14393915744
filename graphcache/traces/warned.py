"""Python warnings a trace gives: recorded while a miss traces, stored with its entry, given again on a hit.

Plain TensorFlow runs the function's Python at every first call of a process, so the warnings that Python
gives (Keras' "the structure of `inputs` doesn't match the expected structure", a user's own
``warnings.warn``) reach the user in every process. A hit runs no Python; without this, the warnings of a
trace would be given once, in the process that stored it, and never again.

While a miss traces, ``warnings.catch_warnings(record=True)`` collects them (every one: the filter decides
later); right after the trace each is given again through ``warnings.warn_explicit`` with its category,
text, file and line, so the user's filters (ignore, error, once) apply as they would have. The same list is
stored in the entry's header (``extra["warnings"]``) and given the same way after a hit.

What this leaves out: warnings of other threads given while the trace runs are given again from this one
(the module is process-wide); the logging warnings of TensorFlow and Keras (``logging``, not ``warnings``);
and ``once`` / ``default`` filters count the location of the re-given warning, not the original call's.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

MAX_WARNINGS = 64  # a trace that warns more than this keeps its first ones
MAX_TEXT = 2000


@contextlib.contextmanager
def recorded() -> Iterator[list[list[Any]]]:
    """Record the warnings given inside (as ``[category module, category qualname, text, filename, lineno]``);
    they are given again, through the filters, when the block ends."""
    found: list[list[Any]] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield found
            finally:
                found.extend(_described(item) for item in caught[:MAX_WARNINGS])
    finally:  # also when the trace failed: plain TensorFlow gave them before it did
        give(found)


def _described(item: warnings.WarningMessage) -> list[Any]:
    category = item.category
    return [category.__module__, category.__qualname__, str(item.message)[:MAX_TEXT], str(item.filename),
            int(item.lineno or 0)]


def give(stored: list[list[Any]]) -> None:
    """Give warnings recorded by ``recorded`` (a stored entry's) in this process, through its filters."""
    for module, qualname, text, filename, lineno in stored:
        warnings.warn_explicit(text, _category(module, qualname), filename, lineno)


def _category(module: str, qualname: str) -> type[Warning]:
    """The warning class by name: it is loaded already where the code that gives it ran in this process."""
    owner: Any = builtins if module == "builtins" else sys.modules.get(module)
    for part in qualname.split("."):
        owner = getattr(owner, part, None)
    return owner if isinstance(owner, type) and issubclass(owner, Warning) else UserWarning


__all__ = ["give", "recorded"]
