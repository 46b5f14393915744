"""What one host tells the fleet through Redis: its counter deltas, the entries it used, its misses and the
key parts of the graph entries it published, so that ``graphcache stats --remote`` and ``misses --remote``
see every host, and the remote budget (core/budget.py) evicts what the whole fleet used least recently.

Everything is batched in memory and pushed in one round trip (store/redis.py ``push_fleet``):

- **never on the hot path**: a lookup only adds to a dict under a lock. A push starts in a daemon thread
  when ``PUSH_EVERY`` seconds have passed since the last one, and runs once more at ``flush()`` and at
  interpreter exit (exits.FLEET, after the uploads, whose counts it then carries);
- **never failing a run**: a push goes through the coordinator's tier (deadline, circuit breaker, one warning);
  a failed push keeps its deltas for the next one (bounded: ``MAX_KEYS`` used keys, ``MAX_MISSES`` misses,
  older ones dropped), and a process that dies unflushed loses only its last seconds of counts;
- **a read-only worker pushes too**: counters, uses and misses are bookkeeping, not entries.

Hosts are named by ``GRAPHCACHE_HOST`` (default: the host name): every process of a host adds to the same hash.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from .. import runtime
from . import exits
from .settings import ENV_HOST

if TYPE_CHECKING:
    from ..entry import codec
    from .tier import RemoteTier

log = logging.getLogger("graphcache")

PUSH_EVERY = 5.0  # seconds between two background pushes of one process
MAX_KEYS = 10_000  # used keys kept for the next push (beyond: dropped, their LRU position is only older)
MAX_MISSES = 200  # misses kept for the next push


def host_name() -> str:
    return os.environ.get(ENV_HOST, "").strip() or socket.gethostname()


class FleetLog:
    """This process's pending report to ``store`` (a RedisStore, behind ``tier``). ``uses``: record the keys
    this host used (the entries live in that same Redis, whose LRU order they keep)."""

    def __init__(self, store: Any, tier: RemoteTier, *, uses: bool, every: float = PUSH_EVERY) -> None:
        self.store, self.tier, self.uses, self.every = store, tier, uses, every
        self.host = host_name()
        self._lock = threading.Lock()
        self._counters: dict[str, float] = {}
        self._used: dict[str, None] = {}
        self._misses: list[str] = []
        self._parts: dict[str, str] = {}
        self._last = 0.0  # monotonic time of the last push started
        self._pushing = False
        self._push_lock = threading.Lock()  # one push at a time
        with runtime.state.pending_lock:
            runtime.state.fleet_logs.add(self)
        exits.at_exit(exits.FLEET, flush_fleet_logs)

    def __repr__(self) -> str:
        return f"FleetLog({self.host!r} -> {self.tier.name!r})"

    # -- what the entry service reports (cheap: no I/O here) -------------------------------------------------
    def count(self, deltas: dict[str, float]) -> None:
        with self._lock:
            for name, value in deltas.items():
                self._counters[name] = self._counters.get(name, 0) + value
        self._kick()

    def used(self, key: str) -> None:
        if self.uses:
            with self._lock:
                if len(self._used) < MAX_KEYS:
                    self._used[key] = None

    def missed(self, record: dict[str, Any]) -> None:
        line = json.dumps({"host": self.host, **record}, default=str, sort_keys=True)
        with self._lock:
            self._misses = [*self._misses, line][-MAX_MISSES:]
        self._kick()

    def published(self, header: codec.EntryHeader) -> None:
        """An entry this host uploads: a graph entry's key parts, for the fleet's nearest-entry search."""
        from .index.misses import graph_parts

        parts = graph_parts(header)
        if parts is None:
            return
        record = {"host": self.host, "name": header.name, "created": header.created, "parts": parts,
                  "identity": header.identity}
        with self._lock:
            if len(self._parts) < MAX_KEYS:
                self._parts[header.key] = json.dumps(record, default=str, sort_keys=True)

    # -- pushing -------------------------------------------------------------------------------------------
    def _kick(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._pushing or now - self._last < self.every:
                return
            self._pushing, self._last = True, now
        from . import priority  # (imported here: a cache without a fleet never loads it)

        priority.start_thread(self._push_in_background, "graphcache-fleet", daemon=True)  # no GIL handed to it

    def _push_in_background(self) -> None:
        try:
            self.push()
        finally:
            with self._lock:
                self._pushing = False

    def _take(self) -> tuple[dict[str, float], list[str], list[str], dict[str, str]]:
        with self._lock:
            taken = (self._counters, list(self._used), self._misses, self._parts)
            self._counters, self._used, self._misses, self._parts = {}, {}, [], {}
        return taken

    def _put_back(self, counters: dict[str, float], used: list[str], misses: list[str], parts: dict[str, str]) -> None:
        with self._lock:
            for name, value in counters.items():
                self._counters[name] = self._counters.get(name, 0) + value
            for key in used[:max(0, MAX_KEYS - len(self._used))]:
                self._used[key] = None
            self._misses = [*misses, *self._misses][-MAX_MISSES:]
            self._parts = {**parts, **self._parts}

    def push(self) -> bool:
        """Push what is pending now (one round trip, within the remote timeout); True when nothing is left
        unsent. A failure keeps it for the next push."""
        with self._push_lock:
            counters, used, misses, parts = self._take()
            if not (counters or used or misses or parts):
                return True
            ok, _ = self.tier.call(lambda: self._send(counters, used, misses, parts), "pushing this host's counters")
            if not ok:
                self._put_back(counters, used, misses, parts)
            return ok

    def _send(self, counters: dict[str, float], used: list[str], misses: list[str], parts: dict[str, str]) -> None:
        self.store.push_fleet(self.host, counters, misses, parts)
        if used:
            self.store.touch(used)


def flush_fleet_logs() -> None:
    """Push every fleet log's pending report (at exit: after the uploads, whose counts they carry)."""
    with runtime.state.pending_lock:
        logs = list(runtime.state.fleet_logs)
    for fleet_log in logs:
        fleet_log.push()
