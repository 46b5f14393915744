"""Settings: an explicit argument beats its environment variable, which beats the default.

Every environment variable graphcache reads is listed here (the README's settings table mirrors it).
``GRAPHCACHE_DISABLE=1`` always wins and bypasses the cache completely.
"""

from __future__ import annotations

import contextlib
import os
import re
from datetime import timedelta
from pathlib import Path

import platformdirs

ENV_DIR = "GRAPHCACHE_DIR"
ENV_DISABLE = "GRAPHCACHE_DISABLE"
ENV_STRICT = "GRAPHCACHE_STRICT"
ENV_READ_ONLY = "GRAPHCACHE_READ_ONLY"
ENV_IDENTITY_SALT = "GRAPHCACHE_IDENTITY_SALT"
ENV_LOCK_TIMEOUT = "GRAPHCACHE_LOCK_TIMEOUT"
ENV_STALE_AFTER = "GRAPHCACHE_STALE_AFTER"
ENV_DEBUG = "GRAPHCACHE_DEBUG"
ENV_SIGNING_KEY = "GRAPHCACHE_SIGNING_KEY"
ENV_MAX_SIZE = "GRAPHCACHE_MAX_SIZE"
ENV_MAX_AGE = "GRAPHCACHE_MAX_AGE"
ENV_REMOTE = "GRAPHCACHE_REMOTE"
ENV_REMOTE_READ_ONLY = "GRAPHCACHE_REMOTE_READ_ONLY"
ENV_REMOTE_TIMEOUT = "GRAPHCACHE_REMOTE_TIMEOUT"
ENV_REMOTE_RETRY_AFTER = "GRAPHCACHE_REMOTE_RETRY_AFTER"
ENV_FUNCTIONS = "GRAPHCACHE_FUNCTIONS"  # TF2 functions' optimized graphs (functions/)

DEFAULT_LOCK_TIMEOUT = 600.0  # seconds; a compile of a large graph can take minutes
DEFAULT_MAX_SIZE = 10 * 2**30  # 10 GiB
DEFAULT_STALE_AFTER = 86400.0  # seconds: a version unused for a day is purged by the next other version
DEFAULT_REMOTE_TIMEOUT = 5.0  # seconds one remote lookup may take before it counts as a failure
DEFAULT_REMOTE_RETRY_AFTER = 60.0  # seconds a failed remote is skipped (circuit breaker) before it is tried again

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def env_flag(name: str) -> bool | None:
    """The boolean value of an environment variable, or None when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def resolve_flag(explicit: bool | None, env_name: str, default: bool = False) -> bool:
    if explicit is not None:
        return bool(explicit)
    from_env = env_flag(env_name)
    return default if from_env is None else from_env


def disabled() -> bool:
    """``GRAPHCACHE_DISABLE=1``: bypass the cache completely, whatever the arguments say."""
    return bool(env_flag(ENV_DISABLE))


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(value: str | float | int | timedelta) -> float:
    """Seconds from ``90``, ``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` or a timedelta."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value!r}")
        return float(value)
    match = _DURATION_RE.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (use seconds or a unit: 90s, 30m, 12h, 7d, 2w)")
    return float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]


def resolve_duration(explicit: str | float | int | timedelta | None, env_name: str, default: float) -> float:
    value = resolve_optional_duration(explicit, env_name)
    return default if value is None else value


def resolve_size(explicit: int | str | None, env_name: str, default: int) -> int:
    """Bytes from an int, or a string with a unit (``500MB``, ``10GiB``), argument > environment > default."""
    from .filters import parse_size

    if explicit is not None:
        return explicit if isinstance(explicit, int) else parse_size(str(explicit))
    raw = os.environ.get(env_name)
    return default if raw in (None, "") else parse_size(raw)


def resolve_optional_duration(explicit: str | float | int | timedelta | None, env_name: str) -> float | None:
    """Like resolve_duration, but None (off) when neither the argument nor the environment sets it."""
    if explicit is not None:
        return parse_duration(explicit)
    raw = os.environ.get(env_name)
    return None if raw in (None, "") else parse_duration(raw)


def resolve_str(explicit: str | None, env_name: str, default: str = "") -> str:
    if explicit is not None:
        return str(explicit)
    return os.environ.get(env_name, default)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) with mode 0700 when it does not exist; a race with another creator is fine."""
    if not path.is_dir():
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True, mode=0o700)


def default_cache_dir() -> Path:
    """``$GRAPHCACHE_DIR``, else the user cache dir (``~/.cache/graphcache`` on Linux)."""
    from_env = os.environ.get(ENV_DIR)
    if from_env:
        return Path(from_env).expanduser()
    return Path(platformdirs.user_cache_dir("graphcache", appauthor=False))
