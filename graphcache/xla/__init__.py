"""XLA executables as graphcache entries: TensorFlow's XLA persistent cache, managed.

TensorFlow can persist the executables it builds for XLA clusters (``jit_compile=True`` functions and
auto-clustered graphs) in a directory (``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR``, one file
per cluster). That directory has no compiler version in its keys, no eviction, no stats and no checks: a
bit flip or a truncated file fails the user's call (InternalError, OutOfRangeError), and some flips load
silently. ``enable_xla(cache)`` makes it part of the cache:

- TensorFlow is pointed at ``<cache_dir>/xla/<cache.version>/<xla identity id>/`` (identity.py: compiler
  version, device kind, host ISA, XLA flags; files.py: the layout), so an upgrade or a flag change never
  loads a stale executable.
- Every executable is an entry of ``kind="xla"`` in the normal store, and the directory a materialized
  view of those entries, checked and repaired at enable before TensorFlow reads it, ingested at ``sync()``
  (``GraphCache.flush``) and at interpreter exit (directory.py). Hits are told from access times
  (hits.py).
- With a remote tier, uploaded executables are marked in their identity's group (entry/kinds.py) and a
  machine fetches its identity's group at enable, before TensorFlow's first compile.
- TensorFlow reads ``TF_XLA_FLAGS`` once per process, on its first device listing, eager op or
  ``tf.function`` call: enable must come first, and a late enable is detected and warned about
  (binding.py). One process has one XLA directory: a second enable with another identity warns and keeps
  the first. graphcache adds ``--tf_xla_deterministic_cluster_names`` unless the user set it (flags.py),
  and ``enable_xla(cache, cpu_jit=True)`` / ``jit_config`` switch on CPU auto-clustering.

Stale versions: ``purge_stale_versions`` (versioning.py) removes ``xla/<version>/`` with the version's
entries; an enable also removes ``xla/<version>`` dirs of versions the manifest no longer lists.

A plugin (core/plugins.py): ``GraphCache(xla=True)``, ``GRAPHCACHE_XLA=1`` and ``enable_xla`` all enable it
through ``plugins.enable(cache, "xla")``, which calls ``enable`` here; it registers the sync as the cache's
flush hook and the exit drain's first stage. The bound directory is process state (``runtime.state``).

Fail open: any failure warns once and leaves TensorFlow unbound or the entry unsynced; XLA then compiles
as it would without graphcache. Known limits: TensorFlow fails a call when it cannot write a new executable
(disk full mid-run): enable checks that the directory is writable but cannot prevent that. A read-only
cache is not bound. The directory holds a second copy of each executable (the entry is the first): the size
cap counts entries. A file that was never synced is checked for its framing only (files.well_formed).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

from .. import runtime
from ..compile.identity import device_kind
from ..core import exits, plugins, settings
from ..core.counters import XLA_COUNTERS
from ..core.failures import warn_once
from ..core.service import EntryService
from ..errors import CacheIOError
from .binding import auto_clustering, bind, cpu_jit_on
from .directory import XlaCache, XlaReport
from .files import KIND, XLA_DIR, entry_key, well_formed, xla_root
from .flags import (
    DEFAULT_FLAGS,
    OWN_FLAGS,
    TF_XLA_FLAGS,
    Flag,
    flags_with_directory,
    parse_flags,
    process_flags,
    relevant_flags,
    with_defaults,
)
from .identity import xla_identity

log = logging.getLogger("graphcache")

ENV_XLA = settings.ENV_XLA
# The counters this package adds to the index's counters table (for the CLI's stats to list).
COUNTERS = XLA_COUNTERS

NAME = "xla"  # the plugin's name (core/plugins.py) and its key in runtime.state.plugins
# TensorFlow reads TF_XLA_FLAGS once, so one XLA directory per process (runtime.state.plugins["xla"]).
_lock = threading.RLock()


def requested(explicit: bool | None = None) -> bool:
    """Whether XLA caching is asked for: the argument, else ``GRAPHCACHE_XLA``, else False."""
    return settings.resolve_flag(explicit, ENV_XLA)


def active() -> XlaCache | None:
    """The XLA cache this process's TensorFlow is bound to (None when none is)."""
    return runtime.state.plugins.get(NAME)


def enable_xla(cache: EntryService, *, cpu_jit: bool = False) -> XlaCache | None:
    """Point TensorFlow's XLA persistent cache at ``cache`` (see the module docstring); None when not bound.

    Call it before TensorFlow lists devices or runs anything (``GraphCache(..., xla=True)`` does). Idempotent
    for the same cache and identity. Never raises for cache trouble (``strict`` caches do).

    ``cpu_jit``: also let sessions whose config asks for auto-clustering (``global_jit_level``, see
    ``jit_config``) cluster CPU ops (TensorFlow's ``tf_xla_cpu_global_jit``). TensorFlow reads that switch
    once, before its first op, so it is set here, together with the directory.
    """
    return plugins.enable(cache, NAME, cpu_jit=cpu_jit)


def enable(cache: EntryService, *, cpu_jit: bool = False) -> XlaCache | None:
    """The plugin's entry point (core/plugins.py); ``enable_xla`` is the public spelling."""
    xc = _enable(cache)
    if cpu_jit:  # after binding: setting it makes TensorFlow parse TF_XLA_FLAGS
        cpu_jit_on()
    return xc


def _enable(cache: EntryService) -> XlaCache | None:
    if cache.disabled:
        return None
    try:
        with _lock:
            bound = active()
            if bound is not None:
                return _second_enable(cache, bound)
            if cache.read_only:
                warn_once("xla_read_only", f"graphcache: the cache dir {cache.cache_dir} is read-only; "
                                           "TensorFlow's XLA executables are not cached in this process")
                return None
            tokens = process_flags()
            xc = XlaCache(cache, xla_identity(cache.version, device_kind(), tokens))
            if not xc.prepare():
                return None
            if bind(xc.directory, tokens) == "too_late":
                warn_once("xla_too_late",
                          "graphcache: TensorFlow had already read TF_XLA_FLAGS in this process (it does on the "
                          "first device listing, eager op or tf.function call), so its XLA persistent cache "
                          f"cannot be pointed at {xc.directory}. Enable XLA caching (GraphCache(xla=True), "
                          "GRAPHCACHE_XLA=1 or graphcache.enable_xla) before running any TensorFlow op; XLA "
                          "compiles uncached in this process.")
                return None
            xc.bound = True
            runtime.state.plugins[NAME] = xc
            cache.hooks.on_flush(functools.partial(sync, cache))  # new executables become entries first
            exits.at_exit(exits.XLA_SYNC, _sync_at_exit)  # and at exit, before the drain waits for uploads
            log.info("graphcache: XLA executables cached in %s (%s)", xc.directory, xc.last_report)
            return xc
    except CacheIOError:
        raise
    except Exception as exc:  # never break the user's run for the cache's sake
        cache.failure("xla_error", "enabling the XLA cache", exc, consequence="XLA compiles uncached",
                      uncacheable=False)
        return None


def _second_enable(cache: EntryService, bound: XlaCache) -> XlaCache | None:
    try:
        tokens = process_flags()
        wanted = XlaCache(cache, xla_identity(cache.version, bound.identity["device"], tokens)).directory
    except Exception:
        wanted = None
    if wanted is not None and _same_dir(wanted, bound.directory):
        cache.hooks.on_flush(functools.partial(sync, cache))
        return bound
    warn_once("xla_second_identity",
              f"graphcache: this process's TensorFlow already caches XLA executables in {bound.directory}; "
              f"TensorFlow reads its flags once per process, so {wanted or cache.cache_dir} is not used. Keeping "
              "the first.")
    return bound


def sync(cache: EntryService | None = None) -> XlaReport | None:
    """Store the executables TensorFlow wrote since the last sync as entries and record hits.

    ``cache``: sync only when the bound XLA directory belongs to this cache (``GraphCache.flush`` passes
    itself). Returns what was done, or None when nothing is bound.
    """
    xc = active()
    if xc is None or (cache is not None and not _same_dir(cache.cache_dir, xc.cache.cache_dir)):
        return None
    try:
        with _lock:
            return xc.sync()
    except CacheIOError:
        raise
    except Exception as exc:
        xc.cache.failure("xla_error", "syncing the XLA cache", exc, consequence="new executables stay unsynced",
                         uncacheable=False)
        return None


def jit_config(config: Any = None, *, cache: EntryService | None = None, cpu: bool = True) -> Any:
    """A copy of ``config`` (a tf.compat.v1.ConfigProto) with XLA auto-clustering on (``global_jit_level=ON_1``).

    ``cache``: enable XLA caching into it first (``enable_xla(cache, cpu_jit=cpu)``). ``cpu``: also cluster
    CPU ops (TensorFlow's ``tf_xla_cpu_global_jit``, process-wide; without it ON_1 clusters GPU ops only).
    TensorFlow reads both the XLA flags and that switch before its first op: call this (or ``enable_xla``)
    before running anything, e.g. first thing in ``Session(jit=True)``; a late call warns once.
    """
    if cache is not None:
        enable_xla(cache, cpu_jit=cpu)
    elif cpu:
        cpu_jit_on()
    return auto_clustering(config)


# -- interpreter exit ----------------------------------------------------------------------------------------
def _sync_at_exit() -> None:
    """New executables become entries at exit, before the exit drain waits for the uploads they queue
    (core/exits.py runs the XLA sync first)."""
    xc = active()
    if xc is not None:
        with _lock:
            xc.sync()


def _same_dir(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


__all__ = [
    "COUNTERS",
    "DEFAULT_FLAGS",
    "ENV_XLA",
    "KIND",
    "OWN_FLAGS",
    "TF_XLA_FLAGS",
    "XLA_DIR",
    "Flag",
    "XlaCache",
    "XlaReport",
    "active",
    "enable_xla",
    "entry_key",
    "flags_with_directory",
    "enable",
    "jit_config",
    "parse_flags",
    "process_flags",
    "relevant_flags",
    "requested",
    "sync",
    "well_formed",
    "with_defaults",
    "xla_identity",
    "xla_root",
]
