"""Background work at a lower CPU priority than the caller's.

graphcache does some of its work in threads while the caller goes on: a big miss's entry write overlaps
the caller's import and first run, a SavedModel miss's build (seconds of freezing and compiling) overlaps
its next calls. On a machine with few cores that work competes with
the caller's own TensorFlow threads for them; it is never more urgent than the caller, so its thread runs
at a raised nice value (Linux: nice is per thread; elsewhere it is per process, so nothing is changed).
The work still gets the cores the caller leaves idle, and all of them once the caller waits.

Only the calling thread is changed, and only lowered: an unprivileged thread cannot raise it back, and
it needs not, as these threads end with their work. ``NICE_STEP`` is moderate so that such a thread,
briefly holding the GIL while busy cores make it wait, cannot hold the caller up for long.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

NICE_STEP = 10
_MAX_NICE = 19

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("graphcache")


def lower_this_thread(step: int = NICE_STEP) -> bool:
    """Raise the calling thread's nice value by ``step`` (Linux only); True when it was changed."""
    if not sys.platform.startswith("linux") or not hasattr(os, "setpriority"):
        return False
    try:
        thread = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, thread)
        if now >= _MAX_NICE:
            return False
        os.setpriority(os.PRIO_PROCESS, thread, min(_MAX_NICE, now + step))
    except (OSError, AttributeError):  # a sandbox that refuses it: run at the normal priority
        return False
    return True


def in_background(func: F) -> F:
    """``func`` run at the lowered priority by whichever (background) thread calls it."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        lower_this_thread()
        return func(*args, **kwargs)

    return run  # type: ignore[return-value]


def start_early(func: Callable[[], Any], name: str) -> threading.Thread:
    """Run ``func()`` now in a daemon thread at the lowered priority, for a result that is computed once under
    its own lock and needed later (a miss's canonical key, computed while TensorFlow optimizes in C++ with the
    GIL released). Whoever needs the result later waits for that lock, or computes it itself where this
    thread failed or was cut off at exit: so a failure here is only logged, and a daemon loses nothing."""

    def run() -> None:
        lower_this_thread()
        try:
            func()
        except Exception:  # raised again, and handled, by the caller that needs the result
            log.debug("graphcache: %s failed early; computed again when needed", name, exc_info=True)

    return start_thread(run, name, daemon=True)


def start_thread(target: Callable[[], Any], name: str, *, daemon: bool) -> threading.Thread:
    """``threading.Thread(target=target).start()`` without handing the new thread the caller's time.

    ``Thread.start()`` waits until the new thread runs; a thread that then goes straight to work keeps the GIL
    for a whole switch interval (5 ms) before the caller, waiting for it, gets it back (measured: 5.3 ms for
    each of a first-ever miss's two such threads, against 0.2-0.5 ms for those that first wait for their gate).
    So the new thread first waits until ``start()`` has returned: the caller goes on at once, and the thread
    runs when the caller next releases the GIL (TensorFlow's C++, which is what the thread is there to overlap)."""
    started = threading.Event()

    def run() -> None:
        started.wait()
        target()

    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    started.set()
    return thread
