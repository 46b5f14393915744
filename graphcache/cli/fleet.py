"""The fleet's view from the CLI: ``stats --remote`` and ``misses --remote``.

Both read what every host pushed to the fleet's Redis (core/fleetlog.py): the remote itself when it is a
Redis one, else the coordinator (``GRAPHCACHE_COORDINATOR``). With an fsspec remote and no coordinator there
are no fleet counters: ``stats --remote`` then shows what the remote itself holds (entries and bytes) and
says so; ``misses --remote`` says there is nothing to read.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Column

from ..core import settings
from ..core.index import misses as recorded
from ..core.stats import Stats
from ..store import open_remote as open_store
from ..store.urls import is_redis, redact
from .errors import CliError
from .output import Mode, ago, duration, emit, format_size, grid, iso, message, plural, spinner, table
from .remote import open_remote, remote_call

NO_COUNTERS = (f"fleet counters need a Redis remote or a coordinator ({settings.ENV_COORDINATOR}=redis://...): "
               "this remote shows entries and bytes only")
FIGURES = ("hits", "misses", "compiles", "compile_seconds", "saved_seconds")
TRAFFIC = ("remote_hits", "fetch_bytes", "uploads", "upload_bytes", "bytes_written", "remote_errors")


def fleet_store(entries: Any) -> Any | None:
    """The Redis the hosts report to: the remote when it is Redis, else the coordinator; None without one."""
    if hasattr(entries, "fleet_counters"):
        return entries
    url = settings.resolve_str(None, settings.ENV_COORDINATOR).strip()
    if not url or not is_redis(url):
        return None
    password = settings.resolve_str(None, settings.ENV_REDIS_PASSWORD) or None
    options = settings.CacheSettings(redis_password=password).store_options(url)
    timeout = settings.resolve_duration(None, settings.ENV_REMOTE_TIMEOUT, settings.DEFAULT_REMOTE_TIMEOUT)
    return open_store(url, timeout=timeout, options=options)


def host_figures(counters: dict[str, float]) -> dict[str, Any]:
    """One host's (or the fleet's) lookups over every kind of entry, and its remote traffic."""
    totals = Stats.from_counters(0, 0, counters).totals
    found: dict[str, Any] = {name: totals[name] for name in FIGURES}
    found["hit_rate"] = totals["hit_rate"]
    for name in TRAFFIC:
        found[name] = int(counters.get(name, 0))
    found["compile_seconds"], found["saved_seconds"] = (round(float(found[n]), 3) for n in
                                                         ("compile_seconds", "saved_seconds"))
    return found


def fleet_stats(entries: Any, store: Any | None) -> dict[str, Any]:
    files = remote_call(entries, "listing", lambda: list(entries.scan()))
    budget = settings.resolve_size(None, settings.ENV_REMOTE_MAX_SIZE, 0) or None
    data: dict[str, Any] = {"remote": entries.url, "coordinator": None if store in (None, entries) else store.url,
                            "entries": len(files), "bytes": sum(f.size for f in files), "max_size": budget,
                            "counters": store is not None, "note": None if store is not None else NO_COUNTERS}
    if store is None:
        return {**data, **dict.fromkeys((*FIGURES, "hit_rate", *TRAFFIC)), "hosts": []}
    pushed = remote_call(store, "reading the fleet's counters", store.fleet_counters)
    summed: dict[str, float] = {}
    hosts = []
    for host, (seen, counters) in pushed.items():
        for name, value in counters.items():
            summed[name] = summed.get(name, 0) + value
        hosts.append({"host": host, "last_push": iso(seen) if seen else None, **host_figures(counters)})
    return {**data, **host_figures(summed), "hosts": hosts}


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def fleet_stats_view(data: dict[str, Any], now: float) -> RenderableType:
    head = grid()
    head.add_row("Remote", data["remote"] + (f"  (counters in {data['coordinator']})" if data["coordinator"] else ""))
    head.add_row("Entries", f"{data['entries']} ({format_size(data['bytes'])})")
    head.add_row("Budget", format_size(data["max_size"]) + "  (GRAPHCACHE_REMOTE_MAX_SIZE; LRU beyond it)"
                 if data["max_size"] else f"none ({settings.ENV_REMOTE_MAX_SIZE} unset)")
    if not data["counters"]:
        head.add_row("Counters", data["note"])
        return head
    head.add_row("Hosts", str(len(data["hosts"])))
    head.add_row("Hit rate", _rate(data["hit_rate"]))
    head.add_row("Hits", f"{data['hits']}  ({data['remote_hits']} from the remote, "
                         f"{format_size(data['fetch_bytes'])} fetched)")
    head.add_row("Misses", str(data["misses"]))
    head.add_row("Compiles", str(data["compiles"]))
    head.add_row("Compile time", duration(data["compile_seconds"]))
    head.add_row("Time saved", duration(data["saved_seconds"]))
    head.add_row("Uploads", f"{data['uploads']} ({format_size(data['upload_bytes'])})")
    view = table(Column("HOST", no_wrap=True), *(Column(name, justify="right") for name in
                 ("HITS", "MISSES", "COMPILES", "COMPILE TIME", "SAVED", "FETCHED", "UPLOADED")),
                 Column("LAST PUSH", no_wrap=True))
    for host in data["hosts"]:
        pushed = host["last_push"]
        view.add_row(host["host"], str(host["hits"]), str(host["misses"]), str(host["compiles"]),
                     duration(host["compile_seconds"]), duration(host["saved_seconds"]),
                     format_size(host["fetch_bytes"]), format_size(host["upload_bytes"]),
                     ago(_epoch(pushed), now) if pushed else "-")
    return Group(head, "", view)


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def stats_remote(mode: Mode) -> None:
    """``stats --remote``: the fleet's counters, by host and summed, and what the remote holds."""
    entries = open_remote()
    store = fleet_store(entries)
    with spinner(f"Reading {entries.url}..."):
        data = fleet_stats(entries, store)
    if store is None:
        message(f"note: {NO_COUNTERS}", style="yellow")
    now = time.time()
    emit(mode, data=data, human=lambda: fleet_stats_view(data, now))


def zero_remote() -> None:
    """``zero-stats --remote``: forget every host's counters (entries, uses and misses are kept)."""
    entries = open_remote()
    store = fleet_store(entries)
    if store is None:
        raise CliError(f"no fleet counters to reset: {NO_COUNTERS.split(':')[0]}")
    count = remote_call(store, "resetting the fleet's counters", store.clear_fleet_counters)
    message(f"Reset the counters of {plural(count, 'host')} in {store.url}.")


# -- misses --------------------------------------------------------------------------------------------------
def _candidates(store: Any, entries: Any) -> dict[tuple[str, str], tuple[recorded.Candidate, dict[str, Any]]]:
    """The graph entries on the remote whose key parts a host published, with what it published."""
    parts = remote_call(store, "reading the entries' key parts", store.fleet_parts)
    present = {(f.version, f.key) for f in remote_call(entries, "listing", lambda: list(entries.scan()))}
    found = {}
    for (version, key), raw in parts.items():
        try:
            record = json.loads(raw)
            candidate = recorded.Candidate(key, str(record["name"]), version, "", float(record["created"]),
                                           {part: str(record["parts"][part]) for part in recorded.PARTS})
        except (ValueError, KeyError, TypeError):
            continue  # a record this version cannot read
        if (version, key) in present:
            found[(version, key)] = (candidate, record)
    return found


def fleet_misses(store: Any, entries: Any, limit: int) -> list[dict[str, Any]]:
    """The fleet's recent misses, newest first, each with its nearest entry among every host's (published
    before the miss), and the key parts that differ from it."""
    raw = remote_call(store, "reading the fleet's misses", lambda: store.fleet_misses(limit))
    candidates = _candidates(store, entries)
    found = []
    for line in raw:
        try:
            miss = json.loads(line)
            when, name, key, parts = float(miss["time"]), str(miss["name"]), str(miss["key"]), dict(miss["parts"])
        except (ValueError, KeyError, TypeError):
            continue
        shown = {"host": miss.get("host"), "time": iso(when), "name": name, "key": key, "version": miss.get("version"),
                 "nearest": miss.get("nearest"), "nearest_host": None, "differs": miss.get("differs", []),
                 "detail": miss.get("detail") or None}
        pool = [c for c, _ in candidates.values() if c.key != key and c.created <= when]
        best = recorded.rank(pool, name, parts)[:1] if parts else []
        if best:
            record = candidates[(best[0].version, best[0].key)][1]
            differs = best[0].differs(parts)
            detail = (recorded.identity_changes(record.get("identity") or {}, miss.get("identity") or {})
                      if "identity" in differs else "")
            shown.update(nearest=best[0].key, nearest_host=record.get("host"), differs=differs, detail=detail or None)
        found.append(shown)
    return found


def misses_remote(mode: Mode, limit: int, clear: bool) -> None:
    """``misses --remote``: every host's recent misses, with the nearest entry in the fleet."""
    entries = open_remote()
    store = fleet_store(entries)
    if store is None:
        raise CliError(f"the fleet's misses are kept in Redis: {NO_COUNTERS.split(':')[0]} "
                       f"({redact(entries.url)} is neither)")
    if clear:
        remote_call(store, "forgetting the fleet's misses", store.clear_fleet_misses)
        message("Forgot the fleet's recorded misses.")
        return
    found = fleet_misses(store, entries, limit)
    now = time.time()

    def human() -> RenderableType | None:
        if not found:
            message("No misses recorded by the fleet.")
            return None
        view = table(Column("WHEN", no_wrap=True), "HOST", "NAME", Column("KEY", no_wrap=True),
                     Column("NEAREST", no_wrap=True), "DIFFERS IN")
        for miss in found:
            differs = ", ".join(miss["differs"]) if miss["nearest"] else "(nothing cached to compare with)"
            nearest = miss["nearest"] or "-"
            if miss["nearest_host"]:
                nearest += f"\n(from {miss['nearest_host']})"
            view.add_row(ago(_epoch(miss["time"]), now), miss["host"] or "-", miss["name"] or "-", miss["key"],
                         nearest, differs + (f"\n{miss['detail']}" if miss["detail"] else ""))
        return Group(view, f"({plural(len(found), 'miss', 'misses')} from "
                           f"{plural(len({m['host'] for m in found}), 'host')})")

    emit(mode, data=found, human=human)
