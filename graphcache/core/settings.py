"""Settings: an explicit argument beats its environment variable, which beats the default.

Every environment variable graphcache reads is listed here (the README's settings table mirrors it).
``GRAPHCACHE_DISABLE=1`` always wins and bypasses the cache completely.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import CacheDirError
from .units import parse_duration, parse_size

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
# Redis (store/redis.py, core/flight.py): leases in a Redis beside another remote, when a slow compile elsewhere
# lets one waiter compile too, and the password of a redis:// URL that carries none (never logged).
ENV_COORDINATOR = "GRAPHCACHE_COORDINATOR"
ENV_FLEET_HEDGE = "GRAPHCACHE_FLEET_HEDGE"
ENV_REDIS_PASSWORD = "GRAPHCACHE_REDIS_PASSWORD"
# The fleet (core/fleetlog.py, core/budget.py): the name a host's counters and misses go under in Redis (default:
# the host name), and the remote's size budget (LRU across the fleet beyond it; unset or 0: none).
ENV_HOST = "GRAPHCACHE_HOST"
ENV_REMOTE_MAX_SIZE = "GRAPHCACHE_REMOTE_MAX_SIZE"
ENV_FUNCTIONS = "GRAPHCACHE_FUNCTIONS"  # TF2 functions' optimized graphs (functions/)
ENV_XLA = "GRAPHCACHE_XLA"  # TensorFlow's XLA executables (xla/)
ENV_TRACES = "GRAPHCACHE_TRACES"  # TF2 tf.function traces (traces/)
ENV_TRACE_VERIFY = "GRAPHCACHE_TRACE_VERIFY"  # after a trace hit, trace anyway and compare (traces/)
ENV_EXPLAIN = "GRAPHCACHE_EXPLAIN"  # log every miss's explanation as a warning (graphcache/explain/)
ENV_INSTALL = "GRAPHCACHE_INSTALL"  # install() in processes started by `graphcache run` (adoption.py)
ENV_ACCELERATE = "GRAPHCACHE_ACCELERATE_TRAIN_MODE"  # the accelerate_train_mode those processes get
ENV_MIN_NODES = "GRAPHCACHE_MIN_NODES"  # graphcache.Session runs smaller graphs the plain way (min_nodes())

DEFAULT_LOCK_TIMEOUT = 600.0  # seconds; a compile of a large graph can take minutes
DEFAULT_MAX_SIZE = 10 * 2**30  # 10 GiB
DEFAULT_STALE_AFTER = 86400.0  # seconds: a version unused for a day is purged by the next other version
DEFAULT_REMOTE_TIMEOUT = 5.0  # seconds one remote lookup may take before it counts as a failure
DEFAULT_REMOTE_RETRY_AFTER = 60.0  # seconds a failed remote is skipped (circuit breaker) before it is tried again
# Seconds a machine waits for another one's compile of the same key before one waiter compiles it too (a compile
# of a large graph takes minutes; a holder that died is noticed within seconds, through its lease's expiry).
DEFAULT_FLEET_HEDGE = 300.0
# A session graph under this many nodes (and SMALL_GRAPH_BYTES) compiles in a few milliseconds: the cache's own
# fixed costs (opening the index, the key, the write, the import) would make its first run slower than plain
# TensorFlow's and save little on a hit (benchmarks/tf1_train.py measures both; JAX's min_compile_time idea).
DEFAULT_MIN_NODES = 300
SMALL_GRAPH_BYTES = 2**20  # a graph with big constants is worth caching however few its nodes

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


def explain_misses() -> bool:
    """``GRAPHCACHE_EXPLAIN=1``: explain every miss in a warning-level log line (a value that does not
    parse counts as on: whoever set it wants explanations)."""
    try:
        return bool(env_flag(ENV_EXPLAIN))
    except ValueError:
        return True


def trace_verify() -> bool:
    """``GRAPHCACHE_TRACE_VERIFY=1``: after a trace hit, trace anyway and compare (traces/); a value that does not
    parse counts as on: whoever set it wants the check."""
    try:
        return bool(env_flag(ENV_TRACE_VERIFY))
    except ValueError:
        return True


def min_nodes() -> int:
    """``GRAPHCACHE_MIN_NODES``: graphcache.Session runs graphs with fewer nodes (and under a MiB) as plain
    TensorFlow does; 0 caches every graph."""
    raw = os.environ.get(ENV_MIN_NODES, "").strip()
    if not raw:
        return DEFAULT_MIN_NODES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_MIN_NODES}={raw!r} is not a number of nodes (0 caches every graph)") from None
    if value < 0:
        raise ValueError(f"{ENV_MIN_NODES}={raw!r} is negative (0 caches every graph)")
    return value


def disabled() -> bool:
    """``GRAPHCACHE_DISABLE=1``: bypass the cache completely, whatever the arguments say."""
    return bool(env_flag(ENV_DISABLE))


def resolve_duration(explicit: str | float | int | timedelta | None, env_name: str, default: float) -> float:
    value = resolve_optional_duration(explicit, env_name)
    return default if value is None else value


def resolve_size(explicit: int | str | None, env_name: str, default: int) -> int:
    """Bytes from an int, or a string with a unit (``500MB``, ``10GiB``), argument > environment > default."""
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


def create_cache_dir(path: Path) -> Path:
    """``path`` made a cache dir (created with mode 0700 when missing) for the entry points that create one
    (install(), graphcache run, warm, import); a CacheDirError that names ``path`` when it cannot be."""
    try:
        make_private_dir(path)
    except OSError as exc:  # name the dir the user gave, not the parent that was missing
        raise CacheDirError(f"cannot create cache dir {str(path)!r}: {exc.strerror or exc}", str(path)) from None
    if not path.is_dir():
        raise CacheDirError(f"cache dir {str(path)!r} is not a directory", str(path))
    return path


def default_cache_dir() -> Path:
    """``$GRAPHCACHE_DIR``, else the user cache dir (``~/.cache/graphcache`` on Linux)."""
    from_env = os.environ.get(ENV_DIR)
    if from_env:
        return Path(from_env).expanduser()
    import platformdirs  # only when no dir is given

    return Path(platformdirs.user_cache_dir("graphcache", appauthor=False))


class CacheSettings(NamedTuple):
    """Every setting of one cache, resolved once (argument > environment > default; see the README's table).

    ``disabled`` is GRAPHCACHE_DISABLE, which always wins. ``signing_key`` (HMAC-SHA256 of every entry,
    codec.py) and ``redis_password`` come from the environment only and are never logged (nor are the
    remote's options, which may hold credentials: all are left out of the repr, and URLs are redacted).
    """

    strict: bool = False
    read_only: bool = False
    disabled: bool = False
    identity_salt: str = ""
    on_version_change: str = "purge"
    stale_after: float = DEFAULT_STALE_AFTER
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    max_size: int = DEFAULT_MAX_SIZE
    max_age: float | None = None
    signing_key: bytes | None = None
    remote: str = ""
    remote_read_only: bool = False
    remote_timeout: float = DEFAULT_REMOTE_TIMEOUT
    remote_retry_after: float = DEFAULT_REMOTE_RETRY_AFTER
    remote_options: dict[str, Any] | None = None  # resolve() always gives a dict
    coordinator: str = ""
    fleet_hedge: float = DEFAULT_FLEET_HEDGE
    redis_password: str | None = None
    remote_max_size: int | None = None  # bytes; None: the remote has no budget

    def __repr__(self) -> str:
        from ..store.urls import redact

        shown = ", ".join(f"{name}={redact(value) if name in ('remote', 'coordinator') else value!r}"
                          for name, value in zip(self._fields, self, strict=True)
                          if name not in ("signing_key", "remote_options", "redis_password"))
        return f"CacheSettings({shown})"

    def store_options(self, url: str) -> dict[str, Any]:
        """The options of the store ``url`` opens: the remote's options, and for a Redis URL the password
        from GRAPHCACHE_REDIS_PASSWORD unless the URL or the options carry one."""
        from ..store.urls import is_redis

        options = dict(self.remote_options or {}) if url == self.remote else {}
        if is_redis(url) and self.redis_password:  # redis-py: a password in the URL wins over this one
            options.setdefault("password", self.redis_password)
        return options

    @classmethod
    def resolve(cls, *, strict: bool | None = None, read_only: bool | None = None,
                identity_salt: str | None = None, on_version_change: str = "purge",
                stale_after: float | timedelta | str | None = None, lock_timeout: float | str | None = None,
                max_size: int | str | None = None, max_age: float | timedelta | str | None = None,
                remote: str | None = None, remote_read_only: bool | None = None,
                remote_timeout: float | str | None = None, remote_retry_after: float | str | None = None,
                remote_options: dict[str, Any] | None = None, coordinator: str | None = None,
                fleet_hedge: float | str | None = None, remote_max_size: int | str | None = None) -> CacheSettings:
        if on_version_change not in ("purge", "keep"):
            raise ValueError(f"on_version_change={on_version_change!r}: use 'purge' or 'keep'")
        return cls(
            strict=resolve_flag(strict, ENV_STRICT),
            read_only=resolve_flag(read_only, ENV_READ_ONLY),
            disabled=disabled(),
            identity_salt=resolve_str(identity_salt, ENV_IDENTITY_SALT),
            on_version_change=on_version_change,
            stale_after=resolve_duration(stale_after, ENV_STALE_AFTER, DEFAULT_STALE_AFTER),
            lock_timeout=resolve_duration(lock_timeout, ENV_LOCK_TIMEOUT, DEFAULT_LOCK_TIMEOUT),
            max_size=resolve_size(max_size, ENV_MAX_SIZE, DEFAULT_MAX_SIZE),
            max_age=resolve_optional_duration(max_age, ENV_MAX_AGE),
            signing_key=resolve_str(None, ENV_SIGNING_KEY).encode() or None,
            remote=resolve_str(remote, ENV_REMOTE).strip(),
            remote_read_only=resolve_flag(remote_read_only, ENV_REMOTE_READ_ONLY),
            remote_timeout=resolve_duration(remote_timeout, ENV_REMOTE_TIMEOUT, DEFAULT_REMOTE_TIMEOUT),
            remote_retry_after=resolve_duration(remote_retry_after, ENV_REMOTE_RETRY_AFTER,
                                                DEFAULT_REMOTE_RETRY_AFTER),
            remote_options=dict(remote_options or {}),
            coordinator=resolve_str(coordinator, ENV_COORDINATOR).strip(),
            fleet_hedge=resolve_duration(fleet_hedge, ENV_FLEET_HEDGE, DEFAULT_FLEET_HEDGE),
            redis_password=os.environ.get(ENV_REDIS_PASSWORD) or None,
            remote_max_size=resolve_size(remote_max_size, ENV_REMOTE_MAX_SIZE, 0) or None,
        )


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """An explicit cache dir (it must exist: a typo must not silently create a new cache), else the default
    one ($GRAPHCACHE_DIR or the user cache dir), created with mode 0700."""
    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
        if not path.is_dir():
            raise CacheDirError(
                f"cache dir {str(path)!r} does not exist or is not a directory: create it, or pass "
                f"cache_dir=None to use ${ENV_DIR} or the user cache dir", str(path))
        return path
    return create_cache_dir(default_cache_dir())
