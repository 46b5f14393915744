"""Whole-graph placement, as a non-interactive tf.compat.v1.Session does it.

TensorFlow places the whole graph of a non-interactive session when it extends the session (before a run
whose graph grew), so a node pinned to a device that does not exist fails every run, even the runs that do
not need that node. A graphcache.Session never hands the user's graph to TensorFlow (its run graph only
holds compiled fan-ins), so that check is made here, on the user's graph, incrementally as it grows.
Interactive sessions (``place_pruned_graph``) and soft placement skip it, as TensorFlow does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import tensorflow as tf


class Placement:
    """Tracks the user's graph; ``misplaced()`` is TensorFlow's error message once a node cannot be placed."""

    def __init__(self, config: Any, graph: Any, list_devices: Callable[[], list]) -> None:
        self._enabled = not (config.allow_soft_placement or config.graph_options.place_pruned_graph)
        self._graph = graph
        self._list_devices = list_devices
        self._devices: list[tf.DeviceSpec] | None = None
        self._version = -1
        self._seen = 0
        self._message: str | None = None
        self._lock = threading.Lock()

    def misplaced(self) -> str | None:
        """None while every node can be placed; else the message TensorFlow gives (and keeps giving)."""
        if not self._enabled:
            return None
        graph = self._graph
        with self._lock:
            if self._message is None and graph.version != self._version:
                operations = graph.get_operations()
                for op in operations[self._seen:]:
                    if op.device and not self._exists(op.device):
                        self._message = self._error(op)
                        break
                self._seen, self._version = len(operations), graph.version
            return self._message

    def _exists(self, device: str) -> bool:
        if self._devices is None:
            self._devices = [tf.DeviceSpec.from_string(d.name) for d in self._list_devices()]
        wanted = tf.DeviceSpec.from_string(device)
        for have in self._devices:
            if all(getattr(wanted, part) in (None, getattr(have, part)) for part in ("job", "replica", "task")) \
                    and (wanted.device_type is None or wanted.device_type.upper() == have.device_type.upper()) \
                    and wanted.device_index in (None, have.device_index):
                return True
        return False

    def _error(self, op: Any) -> str:
        names = ", ".join(device.to_string() for device in self._devices or [])
        return (f"Cannot assign a device for operation {op.name}: {{{{node {op.name}}}}} was explicitly assigned "
                f"to {op.device} but available devices are [ {names} ]. Make sure the device specification "
                f"refers to a valid device.\n\t [[{op.name}]]")
