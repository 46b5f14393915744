"""The one exit drain: what graphcache still owes at interpreter exit, done in order.

Four kinds of work can be pending when the process ends: XLA executables TensorFlow wrote that are not
entries yet (xla/), big entries still being written in the background (background.py), uploads to the
remote tier (core/tier.py) and the uses and counts lookups owe the index (core/usage.py). They depend on
each other in one direction only: syncing XLA writes entries, writing entries queues uploads, all of them
count. So they run as ordered stages of one exit hook.

The hook is registered lazily, when the first participant joins (nothing is registered in a process that
never needs it), and registered again each time a new participant joins: atexit runs the most recently
registered hook first, so the drain always runs before hooks registered before that moment. That matters
for the remote tier: its backend (s3fs) closes its sessions in exit hooks it registers at its first
request, which happens before the first upload joins the drain.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable

from .. import runtime

log = logging.getLogger("graphcache")

# The stages, in the order they run.
XLA_SYNC = "xla_sync"  # TensorFlow's new XLA files become entries
WRITES = "writes"  # entries written in the background are finished
UPLOADS = "uploads"  # queued uploads to the remote are waited for (bounded)
FUNCTIONS = "functions"  # new tf.function graphs become entries (before writes, like XLA)
INDEX = "index"  # what lookups owe the index (uses, counts) is written (core/usage.py), uploads' counts included
FLEET = "fleet"  # counters and misses are pushed to the fleet's Redis (core/fleetlog.py), uploads' counts included
STAGES = (XLA_SYNC, FUNCTIONS, WRITES, UPLOADS, INDEX, FLEET)


def at_exit(stage: str, drain: Callable[[], None]) -> None:
    """Run ``drain`` at interpreter exit in ``stage`` (see STAGES); the same callable joins once."""
    if stage not in STAGES:
        raise ValueError(f"unknown exit stage {stage!r}: one of {', '.join(STAGES)}")
    state = runtime.state
    with state.exit_lock:
        drains = state.exit_drains.setdefault(stage, [])
        if drain in drains:
            return
        drains.append(drain)
        # Re-registering moves the hook after everything registered so far: it runs before them.
        atexit.unregister(run_drain)
        atexit.register(run_drain)


def run_drain() -> None:
    """Run every stage's participants in order; one failing never stops the others."""
    for stage in STAGES:
        with runtime.state.exit_lock:
            drains = list(runtime.state.exit_drains.get(stage, ()))
        for drain in drains:
            try:
                drain()
            except Exception:  # at exit nothing can be raised to anyone: log and go on
                log.warning("graphcache: the %s step at exit failed", stage, exc_info=True)
