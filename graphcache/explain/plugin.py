"""The explain plugin: every graph miss is recorded in the index with the entry nearest it, and its entry
keeps the node table a later ``explain`` compares against (core/plugins.py's miss hook)."""

from __future__ import annotations

from typing import Any

from ..core.plugins import MissEvent
from ..core.service import EntryService
from . import report

NAME = "explain"


def enable(cache: EntryService) -> Any:
    """Register the miss hook on ``cache`` once (GraphCache wants this plugin: it is enabled at the first
    miss); returns the hook."""
    if NAME in cache.hooks.enabled:
        return cache.hooks.enabled[NAME]

    def on_miss(event: MissEvent) -> dict[str, Any]:
        report.note_miss(cache, event.fingerprint, event.name, event.signature)
        return report.table_extra(event.fingerprint)

    cache.hooks.on_miss(on_miss)
    return on_miss
