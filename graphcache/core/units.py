"""Sizes and durations as people write them: ``500MB``, ``10GiB``, ``90s``, ``7d``.

The lowest layer of the small languages graphcache reads (settings, ``ls``/``purge`` filters, CLI
options): pure functions, no graphcache imports, so settings and filters can both build on it.
"""

from __future__ import annotations

import re
from datetime import timedelta


class UnitError(ValueError):
    """A size or duration that does not parse; the message quotes it and shows the accepted forms."""


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
# Compiled (re's cache) at the first parse, not at import: every process imports this, few parse a size.
_SIZE_PATTERN = r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$"
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$"


def parse_size(text: str) -> int:
    """Bytes from ``"4096"``, ``"10MB"`` (10**7), ``"1.5GiB"`` (1.5 * 2**30), ``"512 kB"``..."""
    match = re.match(_SIZE_PATTERN, str(text), re.IGNORECASE)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise UnitError(f"not a size: {text!r} (use bytes or a unit: 500kB, 10MB, 1.5GiB)")
    return round(float(match.group(1)) * _SIZE_UNITS[unit])


def format_size(size: float) -> str:
    """A human size in binary units: ``512 B``, ``1.5 KiB``, ``23.4 MiB``."""
    if abs(size) < 1024:
        return f"{int(size)} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def parse_duration(value: str | float | int | timedelta) -> float:
    """Seconds from ``90``, ``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` or a timedelta."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise UnitError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise UnitError(f"a duration cannot be negative: {value!r}")
        return float(value)
    match = re.match(_DURATION_PATTERN, str(value), re.IGNORECASE)
    if not match:
        raise UnitError(f"not a duration: {value!r} (use seconds or a unit: 90s, 30m, 12h, 7d, 2w)")
    return float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]
