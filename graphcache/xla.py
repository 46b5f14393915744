"""XLA executables as graphcache entries: TensorFlow's XLA persistent cache, managed.

TensorFlow can persist the executables it builds for XLA clusters (``jit_compile=True`` functions and
auto-clustered graphs) in a directory (``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR``, one
``<prefix>__<signature>__<cluster>__<device type>.pb`` file per cluster). That directory has no compiler
version in its keys, no eviction, no stats and no checks: a bit flip or a truncated file fails the user's
call (InternalError, OutOfRangeError), and some flips load silently. ``enable_xla(cache)`` makes it part of
the cache:

Layout. TensorFlow is pointed at ``<cache_dir>/xla/<cache.version>/<xla identity id>/``. The XLA identity
is the compiler version (TensorFlow + git version, entry format, identity salt), the device kind (GPU
names and compute capabilities, or ``cpu``), the host's CPU architecture and instruction-set flags (XLA
CPU executables are built for the host's ISA), every ``TF_XLA_FLAGS`` flag except the persistent cache's
own (directory, read-only, prefix, device types) and ``XLA_FLAGS``. An upgrade or a flag change therefore
never loads a stale executable: it reads and writes another directory.

Entries. Every executable TensorFlow writes becomes an entry of ``kind="xla"`` in the normal store
(``key = xxh3-128("<xla identity id>/<file name>")``, ``extra = {"file", "xla_dir", "xla_identity",
"xxh3", "device_type"}``, payload = the file's bytes), written through ``GraphCache.write_entry``, so
``ls``/``stats``/LRU and age eviction/``purge``/``verify``/bundles/the remote cover them. The XLA
directory is a materialized view of those entries, kept in sync:

- at enable, before TensorFlow can read anything, every file is hashed and checked against its entry's
  checksummed header (``extra["xxh3"]``; with a signing key, against the signed entry's payload). A file
  that does not match is renamed ``<file>.bad`` (and rewritten from its entry below); a file whose entry
  is gone (purged, evicted) is removed; a file with no entry and no sidecar was written by TensorFlow in a
  process that ended before it synced (killed, ``os._exit``) or that is still running: it is ingested when
  it is well formed (a protobuf spanning exactly the file whose key names this file's fingerprints and
  device type) and renamed ``.bad`` otherwise (with a signing key such files are never trusted). Then
  every entry of this identity whose file is missing is written (temp file + ``os.replace``): this is how
  entries from a bundle (``import_bundle``) reach TensorFlow;
- ingest: files TensorFlow wrote during the process become entries at ``sync()`` (the lead wires it to
  ``GraphCache.flush()``), at interpreter exit (``atexit``, which then waits for their uploads to the
  remote, if any), and at the next enable (above). A sidecar ``<file>.xxh3`` (hash and size) marks a file
  as ingested, which is how "entry purged" is told apart from "not ingested yet".

The remote. With a remote tier (``GraphCache(remote=...)``, store/tiered.py) new entries are uploaded in
the background like any other, and once an entry's upload succeeded a zero-byte marker
``PREFIX/v1/<version>/xla/<xla identity id>/<key>`` is published (layout: store/remote.py). TensorFlow asks
for executables by file name at compile time, too late to look their keys up; so at enable, after the
files are checked and before the missing ones are written, the identity's markers are listed (one
request, no entry read) and the entries the local store lacks are downloaded in parallel and verified like
any remote read: a corrupt or untrusted object is refused, counted in ``remote_errors`` and warned about,
never stored or written, and TensorFlow compiles that executable as usual. The rest are materialized with
the other entries, before TensorFlow's first compile. A remote that is down or hangs costs one remote
timeout and one warning and opens the circuit breaker; enable goes on with what is local. A marker whose
entry is gone (purged by key) is a remote miss. Executables pushed after this process's enable reach it at
its next enable.

Hits and last use (approximate: TensorFlow does not report persistent-cache loads to Python). At enable
every file's access time is re-armed (``os.utime`` with its own atime and mtime: the ctime moves past the
atime, so under Linux's default ``relatime`` the next read updates the atime; graphcache's own hashing
read is undone the same way). At sync, a file present since enable, not rewritten since (same inode, size
and mtime) and whose atime moved past its armed value was read by TensorFlow: its entry's ``last_used``
is updated and ``xla_hits`` counted, once per process. When the directory does not update access times
(``noatime``, probed at enable) every file present and not rewritten counts as used by every process
that enables this identity. Concurrent processes can see each other's reads (a hit may be counted by two
processes) and only a read racing another process's enable can go unseen. New files are counted as
``xla_compiles``; ``xla_materialized``, ``xla_bad_files`` and ``xla_removed`` count the repairs,
``xla_pulled`` the entries fetched from the remote. These counters live in the index's counters table
(``stats --json`` shows them). Compile time is unknown (``compile_seconds=0``).

Binding. TensorFlow parses ``TF_XLA_FLAGS`` once per process (``absl::call_once``), the first time any
XLA flag is read: on the first device listing (``tf.config.list_physical_devices``), the first eager op or
the first ``tf.function`` call, not merely on the first XLA compile. A change after that is silently
ignored. enable_xla detects it reliably: it sets ``TF_XLA_FLAGS`` (the user's flags kept, the directory
flag replaced) plus a sentinel value of ``--tf_xla_disable_constant_folding`` and reads that flag back
through TensorFlow's own getter, which parses the flags if they were not parsed yet. Seeing the sentinel
means TensorFlow parsed our string now: the real constant-folding setting is restored through the setter
and ``TF_XLA_FLAGS`` is restored to the user's value (child processes enable their own cache; they must
not inherit a directory keyed for this process's TensorFlow). Not seeing it means the flags were parsed
earlier: one warning, and XLA compiles as before, uncached. (The device kind is computed before binding
without parsing the flags: ``TF_GetDeviceDetails`` per GPU index, as ``tf.config`` does, and checked
against ``identity.device_kind()`` afterwards.) One process has one XLA directory: a second enable with
another identity warns and keeps the first. Two more flags are set at binding: graphcache adds
``--tf_xla_deterministic_cluster_names`` unless the user set it (auto-clustering otherwise names clusters
with a process-wide counter, so the same graph compiled after other auto-clustered graphs gets another
fingerprint and misses), and ``enable_xla(cache, cpu_jit=True)`` / ``jit_config`` switch on
``tf_xla_cpu_global_jit`` (TensorFlow reads it once, before its first op; without it ``global_jit_level``
clusters GPU ops only).

Stale versions. ``purge_stale_versions`` (versioning.py) removes ``xla/<version>/`` with the version's
entries; an enable also removes ``xla/<version>`` dirs of versions the manifest no longer lists. Entries
evicted or purged by other means lose their files at the next enable of their identity.

Fail open. Any failure (I/O, index, a file that cannot be verified or moved aside) warns once and leaves
TensorFlow unbound or the entry unsynced; XLA then compiles as it would without graphcache. Known limits:
TensorFlow fails a call when it cannot write a new executable (disk full mid-run): enable checks that the
directory is writable but cannot prevent that. A read-only cache is not bound. The directory holds a
second copy of each executable (the entry is the first): the size cap counts entries. A file that was
never synced is checked for its framing only (see ``well_formed``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from . import wire
from .core import codec, exits, settings
from .core.index import IndexRow
from .core.stats import XLA_COUNTERS
from .errors import CacheIOError, CorruptEntryError
from .store.local import LocalStore, atomic_writer
from .store.remote import XLA_KIND
from .store.tiered import TieredStore

if TYPE_CHECKING:
    from .cache import GraphCache

log = logging.getLogger("graphcache")

ENV_XLA = "GRAPHCACHE_XLA"
TF_XLA_FLAGS = "TF_XLA_FLAGS"
XLA_DIR = "xla"
KIND = XLA_KIND  # the remote tier publishes a marker for every uploaded entry of this kind (store/remote.py)
SIDECAR_SUFFIX = ".xxh3"
BAD_SUFFIX = ".bad"
BAD_GRACE_SECONDS = 7 * 86400.0  # files moved aside are kept this long for inspection
TMP_GRACE_SECONDS = 3600.0  # a temp file older than this belongs to a writer that died
DIR_FLAG = "tf_xla_persistent_cache_directory"
# The persistent cache's own flags: where and whether executables are stored, not what they are.
OWN_FLAGS = frozenset({DIR_FLAG, "tf_xla_persistent_cache_read_only", "tf_xla_persistent_cache_prefix",
                       "tf_xla_persistent_cache_device_types"})
SENTINEL_FLAG = "tf_xla_disable_constant_folding"
# Flags graphcache adds unless the user set them. Auto-clustering names clusters with a process-wide
# counter by default, so the same graph compiled after other auto-clustered graphs gets another cluster
# name, another fingerprint and a persistent-cache miss; deterministic names make it hit.
DEFAULT_FLAGS = (("tf_xla_deterministic_cluster_names", "true"),)
# TensorFlow's file name: XlaSerializedCacheKeyToFileName (device_executable_persistor.cc).
_FILE_RE = re.compile(r"^(?:(?P<prefix>[^/\\]*?)__)?(?P<sig>\d+)__(?P<cluster>\d+)__"
                      r"(?P<device>[A-Za-z0-9_]+?)(?P<pjrt>__pjrt)?\.pb$")
# CPU flags that decide which instructions an executable may use (compared as a set, hashed).
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "popcnt", "abm", "lzcnt", "movbe", "adx", "aes",
                 "pclmul", "sha", "vpclmul", "gfni", "vaes", "amx", "xsave", "rdrnd", "rdseed", "cx16",
                 "prfchw", "clflushopt", "clwb", "fp", "asimd", "sve", "neon", "crc32", "atomics", "vsx",
                 "altivec")
_STORAGE_ERRORS = (OSError, sqlite3.Error)
# The counters this module adds to the index's counters table (for the CLI's stats to list).
COUNTERS = XLA_COUNTERS

# Process-wide state: TensorFlow reads TF_XLA_FLAGS once, so one XLA directory per process.
_lock = threading.RLock()
_active: XlaCache | None = None


# -- the public API ------------------------------------------------------------------------------------------
def requested(explicit: bool | None = None) -> bool:
    """Whether XLA caching is asked for: the argument, else ``GRAPHCACHE_XLA``, else False."""
    return settings.resolve_flag(explicit, ENV_XLA)


def active() -> XlaCache | None:
    """The XLA cache this process's TensorFlow is bound to (None when none is)."""
    return _active


def enable_xla(cache: GraphCache, *, cpu_jit: bool = False) -> XlaCache | None:
    """Point TensorFlow's XLA persistent cache at ``cache`` (see the module docstring); None when not bound.

    Call it before TensorFlow lists devices or runs anything (``GraphCache(..., xla=True)`` does). Idempotent
    for the same cache and identity. Never raises for cache trouble (``strict`` caches do).

    ``cpu_jit``: also let sessions whose config asks for auto-clustering (``global_jit_level``, see
    ``jit_config``) cluster CPU ops (TensorFlow's ``tf_xla_cpu_global_jit``). TensorFlow reads that switch
    once, before its first op, so it is set here, together with the directory.
    """
    xc = _enable(cache)
    if cpu_jit:  # after binding: setting it makes TensorFlow parse TF_XLA_FLAGS
        _cpu_jit_on()
    return xc


def _enable(cache: GraphCache) -> XlaCache | None:
    global _active
    if cache.disabled:
        return None
    try:
        with _lock:
            if _active is not None:
                return _second_enable(cache)
            if cache.read_only:
                _warn("xla_read_only", f"graphcache: the cache dir {cache.cache_dir} is read-only; TensorFlow's "
                                       "XLA executables are not cached in this process")
                return None
            tokens = process_flags()
            device = _device_kind_before_binding()
            xc = XlaCache(cache, xla_identity(cache.version, device, tokens))
            if not xc.prepare():
                return None
            outcome = _bind(xc.directory, tokens)
            if outcome == "too_late":
                _warn("xla_too_late",
                      "graphcache: TensorFlow had already read TF_XLA_FLAGS in this process (it does on the first "
                      "device listing, eager op or tf.function call), so its XLA persistent cache cannot be "
                      f"pointed at {xc.directory}. Enable XLA caching (GraphCache(xla=True), GRAPHCACHE_XLA=1 or "
                      "graphcache.enable_xla) before running any TensorFlow op; XLA compiles uncached in this "
                      "process.")
                return None
            xc.bound = True
            xc.check_device_kind(device)
            _active = xc
            _register_atexit()
            log.info("graphcache: XLA executables cached in %s (%s)", xc.directory, xc.last_report)
            return xc
    except CacheIOError:
        raise
    except Exception as exc:  # never break the user's run for the cache's sake
        if cache.strict:
            raise CacheIOError(f"graphcache: enabling the XLA cache failed: {type(exc).__name__}: {exc}") from exc
        _warn("xla_error", f"graphcache: enabling the XLA cache in {cache.cache_dir} failed "
                           f"({type(exc).__name__}: {exc}); XLA compiles uncached")
        return None


def sync(cache: GraphCache | None = None) -> XlaReport | None:
    """Store the executables TensorFlow wrote since the last sync as entries and record hits.

    ``cache``: sync only when the bound XLA directory belongs to this cache (``GraphCache.flush`` passes
    itself). Returns what was done, or None when nothing is bound.
    """
    xc = _active
    if xc is None or (cache is not None and not _same_dir(cache.cache_dir, xc.cache.cache_dir)):
        return None
    try:
        with _lock:
            return xc.sync()
    except CacheIOError:
        raise
    except Exception as exc:
        if xc.cache.strict:
            raise CacheIOError(f"graphcache: syncing the XLA cache failed: {type(exc).__name__}: {exc}") from exc
        _warn("xla_error", f"graphcache: syncing the XLA cache in {xc.cache.cache_dir} failed "
                           f"({type(exc).__name__}: {exc})")
        return None


def jit_config(config: Any = None, *, cache: GraphCache | None = None, cpu: bool = True) -> Any:
    """A copy of ``config`` (a tf.compat.v1.ConfigProto) with XLA auto-clustering on (``global_jit_level=ON_1``).

    ``cache``: enable XLA caching into it first (``enable_xla(cache, cpu_jit=cpu)``). ``cpu``: also cluster
    CPU ops (TensorFlow's ``tf_xla_cpu_global_jit``, process-wide; without it ON_1 clusters GPU ops only).
    TensorFlow reads both the XLA flags and that switch before its first op: call this (or ``enable_xla``)
    before running anything, e.g. first thing in ``Session(jit=True)``; a late call warns once.
    """
    from tensorflow.core.protobuf import config_pb2

    if cache is not None:
        enable_xla(cache, cpu_jit=cpu)
    elif cpu:
        _cpu_jit_on()
    out = config_pb2.ConfigProto()
    if config is not None:
        out.CopyFrom(config)
    out.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.ON_1
    return out


def _cpu_jit_on() -> None:
    """Switch on TensorFlow's ``tf_xla_cpu_global_jit``; warn once when TensorFlow may have read it already."""
    from tensorflow.python import pywrap_tfe

    setter = getattr(pywrap_tfe, "TF_SetTfXlaCpuGlobalJit", None)
    if setter is None:  # pragma: no cover - a TensorFlow without the setter
        _warn("xla_cpu_jit", "graphcache: this TensorFlow cannot switch on CPU auto-clustering at run time; "
                             "set TF_XLA_FLAGS=--tf_xla_cpu_global_jit before starting the process")
        return
    was_on = bool(setter(True))
    if not was_on and _eager_started():
        _warn("xla_cpu_jit", "graphcache: CPU auto-clustering was switched on after TensorFlow ran its first op; "
                             "TensorFlow reads that switch once, so CPU ops may not be clustered in this "
                             "process. Ask for jit (jit_config, Session(jit=True)) before running anything.")


def _eager_started() -> bool:
    """Whether TensorFlow's eager context exists (it does after the first eager op; a TF1 session alone
    does not create it, so this can miss a session that already ran)."""
    try:
        from tensorflow.python.eager import context

        return context.context()._context_handle is not None
    except Exception:  # pragma: no cover
        return False


def xla_root(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir) / XLA_DIR


def remove_version_dir(cache_dir: str | os.PathLike[str], version: str) -> int:
    """Remove ``<cache_dir>/xla/<version>/`` (a stale version's executables); returns the bytes freed."""
    if not version or version in (".", "..") or "/" in version or "\\" in version:
        return 0
    path = xla_root(cache_dir) / version
    if not path.is_dir():
        return 0
    freed = sum(size for size in _file_sizes(path))
    shutil.rmtree(path, ignore_errors=True)
    return freed


def entry_key(xla_id: str, file_name: str) -> str:
    return xxhash.xxh3_128_hexdigest(f"{xla_id}/{file_name}".encode())


# -- TF_XLA_FLAGS ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Flag:
    """One token of TF_XLA_FLAGS: its text as given, its name and value (``None``: a bare ``--name``)."""

    text: str
    name: str
    value: str | None


def parse_flags(text: str) -> list[Flag]:
    """Split a TF_XLA_FLAGS string the way TensorFlow does (xla/parse_flags_from_env.cc).

    Flags start with ``-``; ``--name="value"`` or ``--name='value'`` may hold spaces; parsing stops at
    the first token that is not a flag.
    """
    flags: list[Flag] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n or text[i] != "-":
            return flags
        start = i
        while i < n and (text[i] in "-_" or (text[i].isascii() and text[i].isalnum())):
            i += 1
        name = text[start:i].lstrip("-")
        if i + 1 < n and text[i] == "=" and text[i + 1] in "'\"":
            quote = text[i + 1]
            i += 2
            value = []
            while i < n and text[i] != quote:
                if quote == '"' and text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            i = min(i + 1, n)
            flags.append(Flag(text[start:i], name, "".join(value)))
        else:
            end = i
            while end < n and text[end] not in " \t\r\n":
                end += 1
            rest = text[i:end]
            flags.append(Flag(text[start:end], name, rest[1:] if rest.startswith("=") else None))
            i = end


def with_defaults(flags: list[Flag]) -> list[Flag]:
    """The flags plus graphcache's DEFAULT_FLAGS the user did not set."""
    names = {flag.name for flag in flags}
    return [*flags, *(Flag(f"--{name}={value}", name, value) for name, value in DEFAULT_FLAGS if name not in names)]


def process_flags() -> list[Flag]:
    """TF_XLA_FLAGS as this process would hand it to TensorFlow (the directory flag aside)."""
    return with_defaults(parse_flags(_current_flags_text()))


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _flag_bool(flags: list[Flag], name: str) -> bool:
    value: bool = False
    for flag in flags:
        if flag.name == name:
            value = flag.value is None or flag.value.strip().lower() in ("1", "true", "t", "yes")
    return value


def _current_flags_text() -> str:
    """TF_XLA_FLAGS as TensorFlow reads it: the flags, or (when it names a file) the file's contents."""
    raw = os.environ.get(TF_XLA_FLAGS, "")
    if not raw.strip() or raw.lstrip(" \t\r\n").startswith("-"):
        return raw
    try:
        return Path(raw).read_text()
    except OSError:
        return raw  # TensorFlow will complain about it itself


def relevant_flags(flags: list[Flag]) -> dict[str, str]:
    """The flags that can change what XLA builds: every flag but the persistent cache's own (last one wins)."""
    out: dict[str, str] = {}
    for flag in flags:
        if flag.name not in OWN_FLAGS:
            out[flag.name] = "true" if flag.value is None else flag.value
    return dict(sorted(out.items()))


def flags_with_directory(flags: list[Flag], directory: Path) -> str:
    """The user's TF_XLA_FLAGS with the persistent-cache directory flag replaced by ours."""
    kept = [flag.text for flag in flags if flag.name != DIR_FLAG]
    return " ".join([*kept, f"--{DIR_FLAG}={_quote(str(directory))}"])


# -- the identity --------------------------------------------------------------------------------------------
def _host_isa() -> str:
    """The host's architecture and a hash of its instruction-set flags (executables use the host's ISA)."""
    machine = platform.machine() or "unknown"
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    flags.update(f for f in value.split() if f.startswith(_ISA_PREFIXES))
                    break
    except OSError:
        flags.add(platform.processor() or "")
    return f"{machine}:{xxhash.xxh3_64_hexdigest(' '.join(sorted(flags)).encode())[:12]}"


def xla_identity(version: str, device: str, flags: list[Flag]) -> dict[str, Any]:
    return {
        "version": version,
        "backend": "xla",
        "device": device,
        "host": _host_isa(),
        "tf_xla_flags": relevant_flags(flags),
        "xla_flags": os.environ.get("XLA_FLAGS", "").strip(),
    }


def _identity_id(xla_ident: dict[str, Any]) -> str:
    from .core.keyparts import identity_id

    return identity_id(xla_ident)


def _device_kind_before_binding() -> str:
    """identity.device_kind(), computed without making TensorFlow parse TF_XLA_FLAGS.

    ``tf.config.list_physical_devices`` creates every device factory, XLA's included, which parses the
    flags; ``TF_GetDeviceDetails(index)`` (what ``tf.config.experimental.get_device_details`` calls) asks
    the GPU factory alone.
    """
    from . import identity

    if identity.device_kind.cache_info().currsize:  # already computed: the flags are parsed anyway
        return identity.device_kind()
    import tensorflow as tf

    if not tf.test.is_built_with_gpu_support():
        return "cpu"
    from tensorflow.python import pywrap_tfe

    details_of = getattr(pywrap_tfe, "TF_GetDeviceDetails", None)
    if details_of is None:  # pragma: no cover
        return identity.device_kind()
    gpus = []
    for index in range(256):
        try:
            details = details_of(index)
        except Exception:  # no device at this index
            break
        if not details:
            break
        cc = str(details.get("compute_capability", "") or "")
        gpus.append(f"gpu:{details.get('device_name', 'unknown')}:cc{cc or '?'}")
    return ",".join(gpus) if gpus else "cpu"


# -- binding TensorFlow ----------------------------------------------------------------------------------------
def _bind(directory: Path, flags: list[Flag]) -> str:
    """Make TensorFlow parse TF_XLA_FLAGS with our directory now: ``bound``, ``assumed`` or ``too_late``."""
    from tensorflow.python import pywrap_tfe

    original = os.environ.get(TF_XLA_FLAGS)
    text = flags_with_directory(flags, directory)
    getter = getattr(pywrap_tfe, "TF_GetXlaConstantFoldingDisabled", None)
    setter = getattr(pywrap_tfe, "TF_SetXlaConstantFoldingDisabled", None)
    if getter is None or setter is None:  # pragma: no cover - a TensorFlow without the getter
        if _flags_probably_parsed():
            return "too_late"
        os.environ[TF_XLA_FLAGS] = text  # left in place: TensorFlow reads it later
        return "assumed"
    wanted = _flag_bool(flags, SENTINEL_FLAG)
    sentinel = not wanted
    os.environ[TF_XLA_FLAGS] = f"{text} --{SENTINEL_FLAG}={'true' if sentinel else 'false'}"
    try:
        parsed_now = bool(getter()) == sentinel
    finally:
        if original is None:
            os.environ.pop(TF_XLA_FLAGS, None)
        else:
            os.environ[TF_XLA_FLAGS] = original
    if not parsed_now:
        return "too_late"
    setter(wanted)
    return "bound"


def _flags_probably_parsed() -> bool:  # pragma: no cover - only without TensorFlow's flag getter
    from . import identity

    return bool(identity.device_kind.cache_info().currsize) or _eager_started()


def _second_enable(cache: GraphCache) -> XlaCache | None:
    assert _active is not None
    try:
        tokens = process_flags()
        wanted = XlaCache(cache, xla_identity(cache.version, _active.identity["device"], tokens)).directory
    except Exception:
        wanted = None
    if wanted is not None and _same_dir(wanted, _active.directory):
        return _active
    _warn("xla_second_identity",
          f"graphcache: this process's TensorFlow already caches XLA executables in {_active.directory}; "
          f"TensorFlow reads its flags once per process, so {wanted or cache.cache_dir} is not used. Keeping the "
          "first.")
    return _active


def _register_atexit() -> None:
    # New executables become entries at exit, before the exit drain waits for the uploads they queue.
    exits.at_exit(exits.XLA_SYNC, _sync_at_exit)


def _sync_at_exit() -> None:
    xc = _active
    if xc is not None:
        with _lock:
            xc.sync()


# -- the managed directory -------------------------------------------------------------------------------------
@dataclass
class XlaReport:
    """What one enable (``prepare``) or ``sync`` did."""

    verified: int = 0
    materialized: int = 0
    ingested: int = 0
    moved_aside: int = 0
    removed: int = 0
    hits: int = 0
    pulled: int = 0
    bad_files: list[str] = field(default_factory=list)


@dataclass
class _Seen:
    """A file's state when graphcache last looked (and re-armed its access time)."""

    ino: int
    size: int
    mtime_ns: int
    atime_ns: int
    armed: bool

    def same_file(self, st: os.stat_result) -> bool:
        return (st.st_ino, st.st_size, st.st_mtime_ns) == (self.ino, self.size, self.mtime_ns)


class XlaCache:
    """One XLA directory (one identity) of one cache dir, kept in sync with the store's ``xla`` entries."""

    def __init__(self, cache: GraphCache, identity: dict[str, Any]) -> None:
        self.cache = cache
        self.identity = identity
        self.id = _identity_id(identity)
        self.rel_dir = f"{XLA_DIR}/{cache.version}/{self.id}"
        self.directory = Path(cache.cache_dir) / XLA_DIR / cache.version / self.id
        self.local = LocalStore(cache.cache_dir, read_only=True)  # paths and headers, never the remote
        self.bound = False
        self.ingest = True  # off when the device kind could not be confirmed
        self.atime_works = False
        self.last_report = XlaReport()
        self._seen: dict[str, _Seen] = {}
        self._counted: set[str] = set()

    def __repr__(self) -> str:
        return f"XlaCache({str(self.directory)!r}, bound={self.bound})"

    @property
    def signing_key(self) -> bytes | None:
        return self.cache.signing_key

    def files(self) -> list[str]:
        """The executables in the directory (TensorFlow's file names; temp files, sidecars and .bad skipped)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(name for name in names if _FILE_RE.match(name))

    def entries(self) -> list[IndexRow]:
        """The index rows of this identity's entries."""
        index = self.cache.index
        if index is None:
            return []
        return index.rows("kind = ? AND identity = ?", (KIND, self.id))

    # -- enable --------------------------------------------------------------------------------------------
    def prepare(self) -> bool:
        """Make the directory safe for TensorFlow to read: True when it may be bound."""
        report = XlaReport()
        self.last_report = report
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.atime_works = self._probe(self.directory)  # also proves the directory writable
        except _STORAGE_ERRORS as exc:
            self._failure(f"preparing the XLA dir {self.directory}", exc)
            return False
        with contextlib.suppress(*_STORAGE_ERRORS):  # housekeeping: never a reason not to bind
            self._remove_orphan_versions()
            self._remove_leftovers()
        present: set[str] = set()
        for name in self.files():
            try:
                outcome = self._check(name, report)
            except _STORAGE_ERRORS as exc:
                outcome = self._move_aside(name, report, f"unreadable ({exc})")
            if outcome is None:
                self._failure(f"checking {self.directory / name}", OSError("could not verify or move it aside"))
                return False
            if outcome:
                present.add(name)
        try:
            self._pull(report)
        except Exception as exc:  # an optional step: never a reason not to bind
            self._failure(f"pulling XLA executables from {self.cache.remote}", exc)
        try:
            self._materialize(present, report)
        except _STORAGE_ERRORS as exc:
            self._failure(f"writing executables into {self.directory}", exc)  # what is there is verified
        self.cache.count(xla_materialized=report.materialized, xla_bad_files=report.moved_aside,
                          xla_removed=report.removed, xla_compiles=report.ingested, xla_pulled=report.pulled)
        if report.moved_aside:
            _warn("xla_bad_file", f"graphcache: {report.moved_aside} XLA executable(s) in {self.directory} failed "
                                  f"their check ({', '.join(report.bad_files[:3])}); moved aside as *{BAD_SUFFIX} "
                                  "so TensorFlow never reads them, and rewritten from their entries when those "
                                  "are intact")
        return True

    def _check(self, name: str, report: XlaReport) -> bool | None:
        """Verify one file: True (kept), False (removed or moved aside), None (bad and could not be moved)."""
        path = self.directory / name
        key = entry_key(self.id, name)
        data, st = self._read(path)
        digest = xxhash.xxh3_128_hexdigest(data)
        expected = self._expected_digest(key)
        if expected is not None:
            if expected != digest:
                return self._move_aside(name, report, "does not match its entry")
            report.verified += 1
        elif self._read_sidecar(path) is not None:  # ingested once; the entry was purged or evicted since
            self._remove(name)
            report.removed += 1
            return False
        elif self.signing_key is not None or not well_formed(data, name):
            return self._move_aside(name, report, "not an entry, and not a well-formed XLA cache file")
        elif not self._ingest(name, data, st, digest):
            self._remember(name, st)  # well formed but not stored (no sidecar: the next enable tries again)
            return True
        else:
            report.ingested += 1
        self._write_sidecar(path, digest, len(data))
        self._remember(name, st)
        return True

    def _expected_digest(self, key: str) -> str | None:
        """The xxh3-128 the file must have according to its entry (None: no usable entry)."""
        if self.signing_key is not None:  # only a signed payload is trusted: read and check the whole entry
            entry = self.cache.read_entry(key)
            if entry is None:
                return None
            header, payload = entry
            return xxhash.xxh3_128_hexdigest(payload) if header.kind == KIND else None
        try:
            header = codec.read_header(str(self.local.path_for(key)))
        except FileNotFoundError:
            return None
        except CorruptEntryError as exc:
            self.cache.discard_corrupt(key, exc)
            return None
        if header.key != key or header.kind != KIND:
            return None
        value = header.extra.get("xxh3")
        return value if isinstance(value, str) else None

    def _pull(self, report: XlaReport) -> None:
        """Copy this identity's entries that only the remote has into the local store (``_materialize``
        then writes their files): one listing of the identity's markers, then parallel verified downloads.
        The tiered store fails open (breaker, timeout, one warning) and refuses corrupt or untrusted objects."""
        store = self.cache.store
        if self.cache.read_only or not isinstance(store, TieredStore):
            return
        keys = store.marked_keys(self.id)
        if keys:
            report.pulled = len(store.prefetch(keys))

    def _materialize(self, present: set[str], report: XlaReport) -> None:
        """Write every entry of this identity whose file is missing (entries from a bundle, moved-aside files)."""
        if self.cache.read_only:
            return
        present_keys = {entry_key(self.id, name) for name in present}
        for row in self.entries():
            if row.key in present_keys:
                continue
            entry = self.cache.read_entry(row.key)
            if entry is None:
                continue
            header, payload = entry
            name = header.extra.get("file")
            if (header.kind != KIND or header.extra.get("xla_dir") != self.rel_dir or not isinstance(name, str)
                    or not _FILE_RE.match(name) or entry_key(self.id, name) != row.key):
                continue  # not ours, or a file name that could escape the directory
            digest = xxhash.xxh3_128_hexdigest(payload)
            if header.extra.get("xxh3") != digest:
                self.cache.discard_corrupt(row.key, CorruptEntryError("payload does not match its xxh3"))
                continue
            path = self.directory / name
            _atomic_write(path, payload)
            self._write_sidecar(path, digest, len(payload))
            self._arm(path, os.stat(path))
            self._remember(name, os.stat(path))
            present.add(name)
            report.materialized += 1

    def _remove_orphan_versions(self) -> None:
        """Remove ``xla/<version>`` dirs of versions the manifest no longer knows (purged while offline)."""
        index = self.cache.index
        if index is None:
            return
        known = set(index.versions()) | {self.cache.version}
        for child in self.directory.parent.parent.iterdir():
            if child.is_dir() and child.name not in known:
                remove_version_dir(self.cache.cache_dir, child.name)

    def _remove_leftovers(self) -> None:
        """Old temp files (ours and TensorFlow's) and old moved-aside files."""
        now = time.time()
        for item in os.scandir(self.directory):
            name = item.name
            grace = (TMP_GRACE_SECONDS if name.endswith(".tmp")
                     else BAD_GRACE_SECONDS if name.endswith(BAD_SUFFIX) else None)
            if grace is None:
                if name.endswith(SIDECAR_SUFFIX) and not (self.directory / name[: -len(SIDECAR_SUFFIX)]).exists():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(item.path)
                continue
            with contextlib.suppress(FileNotFoundError):
                if now - item.stat().st_mtime > grace:
                    os.unlink(item.path)

    # -- sync ----------------------------------------------------------------------------------------------
    def sync(self) -> XlaReport:
        """Ingest new files, record hits (see the module docstring)."""
        report = XlaReport()
        if self.cache.read_only or self.cache.disabled:
            return report
        for name in self.files():
            path = self.directory / name
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            seen = self._seen.get(name)
            if seen is not None and seen.same_file(st):
                if name not in self._counted and self._was_read(st, seen):
                    self._counted.add(name)
                    self._touch(entry_key(self.id, name))
                    report.hits += 1
                continue
            if not self.ingest:
                continue
            try:
                data, st = self._read(path)
            except FileNotFoundError:
                continue
            if not well_formed(data, name):
                continue  # not TensorFlow's (complete) file; the next enable checks it
            digest = xxhash.xxh3_128_hexdigest(data)
            key = entry_key(self.id, name)
            if self._expected_digest(key) != digest:
                if not self._ingest(name, data, st, digest):
                    continue
                report.ingested += 1
            self._write_sidecar(path, digest, len(data))
            self._remember(name, st)
            self._counted.add(name)
        self.cache.count(xla_hits=report.hits, xla_compiles=report.ingested)
        return report

    def _was_read(self, st: os.stat_result, seen: _Seen) -> bool:
        if self.atime_works and seen.armed:
            return st.st_atime_ns > seen.atime_ns
        return True  # no access times: present and not rewritten counts as used

    def _touch(self, key: str) -> None:
        index = self.cache.index
        if index is None or self.cache.read_only:
            return
        try:
            index.touch(key)
        except _STORAGE_ERRORS as exc:
            _warn("index", f"graphcache: could not update the index in {self.cache.cache_dir}: {exc}")

    def _ingest(self, name: str, data: bytes, st: os.stat_result, digest: str) -> bool:
        match = _FILE_RE.match(name)
        assert match is not None
        header = codec.EntryHeader(
            key=entry_key(self.id, name), version=self.cache.version, identity=self.identity,
            name=f"xla:{match['device']}:{match['sig']}", kind=KIND, created=st.st_mtime, compile_seconds=0.0,
            key_parts={"identity": self.id, "file": xxhash.xxh3_128_hexdigest(name.encode())},
            extra={"file": name, "xla_dir": self.rel_dir, "xla_identity": self.id, "xxh3": digest,
                   "device_type": match["device"]})
        return self.cache.write_entry(header, data)

    # -- files ---------------------------------------------------------------------------------------------
    def _read(self, path: Path) -> tuple[bytes, os.stat_result]:
        """A file's bytes, leaving its access time as it was (and re-armed: see the module docstring)."""
        st = os.stat(path)
        with open(path, "rb") as fh:
            data = fh.read()
        self._arm(path, st)
        return data, os.stat(path)

    @staticmethod
    def _arm(path: Path, st: os.stat_result) -> bool:
        try:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            return True
        except OSError:  # not our file: access times stay as they are
            return False

    def _remember(self, name: str, st: os.stat_result) -> None:
        self._seen[name] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns, st.st_atime_ns, armed=True)

    @staticmethod
    def _probe(directory: Path) -> bool:
        """Whether reads update access times here (after an ``os.utime`` re-arm); also checks writability."""
        probe = directory / f".probe.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            probe.write_bytes(b"graphcache")
            st = os.stat(probe)
            old = st.st_mtime_ns - 10**9
            os.utime(probe, ns=(old, st.st_mtime_ns))
            with open(probe, "rb") as fh:
                fh.read()
            return os.stat(probe).st_atime_ns != old
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def _move_aside(self, name: str, report: XlaReport, why: str) -> bool | None:
        path = self.directory / name
        log.warning("graphcache: XLA executable %s %s; moving it aside", path, why)
        report.moved_aside += 1
        report.bad_files.append(name)
        try:
            os.replace(path, path.with_name(name + BAD_SUFFIX))
        except FileNotFoundError:
            pass
        except OSError:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                return None
        with contextlib.suppress(OSError):
            path.with_name(name + SIDECAR_SUFFIX).unlink()
        return False

    def _remove(self, name: str) -> None:
        for victim in (name, name + SIDECAR_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / victim).unlink()
        self._seen.pop(name, None)

    @staticmethod
    def _read_sidecar(path: Path) -> tuple[str, int] | None:
        try:
            digest, size = path.with_name(path.name + SIDECAR_SUFFIX).read_text().split()
            return digest, int(size)
        except (OSError, ValueError):
            return None

    @staticmethod
    def _write_sidecar(path: Path, digest: str, size: int) -> None:
        sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
        if XlaCache._read_sidecar(path) == (digest, size):
            return
        with contextlib.suppress(OSError):
            _atomic_write(sidecar, f"{digest} {size}\n".encode())

    # -- device kind -----------------------------------------------------------------------------------------
    def check_device_kind(self, guessed: str) -> None:
        """Confirm the device kind computed before binding with identity.device_kind() (GPU builds only)."""
        import tensorflow as tf

        if not tf.test.is_built_with_gpu_support():
            return
        from . import identity

        actual = identity.device_kind()
        if actual != guessed:
            self.ingest = False
            _warn("xla_device_kind", f"graphcache: the device kind seen before TensorFlow started ({guessed!r}) "
                                     f"differs from TensorFlow's ({actual!r}); new XLA executables of this "
                                     "process are not stored")

    def _failure(self, what: str, exc: BaseException) -> None:
        if self.cache.strict:
            raise CacheIOError(f"graphcache: {what} failed: {type(exc).__name__}: {exc}") from exc
        _warn("xla_io_error", f"graphcache: {what} failed ({type(exc).__name__}: {exc}); XLA compiles without "
                              "the cache where it must")
        self.cache.count(errors=1)


# -- TensorFlow's file format --------------------------------------------------------------------------------
def well_formed(data: bytes | memoryview, name: str) -> bool:
    """Whether ``data`` is TensorFlow's XlaSerializedCacheEntry for the file ``name``.

    The message must span exactly the file (a truncated file fails), its key must hold the signature and
    cluster fingerprints, device type, prefix and PjRt flag the file name states, and the HLO module and
    the executable must be present. A flipped bit inside the executable's bytes is not caught: only the
    checksum recorded when a file is ingested catches that.
    """
    match = _FILE_RE.match(name)
    if match is None or not data:
        return False
    data = memoryview(data)  # no copies of the executable's bytes
    try:
        top: dict[int, Any] = {}
        for number, wire_type, value in wire.fields(data):
            if number in (1, 2, 3) and wire_type != 2:
                return False
            top[number] = value
        if not top.get(2) or not top.get(3) or 1 not in top:
            return False
        key: dict[int, Any] = {1: 0, 2: 0, 3: b"", 4: b"", 5: 0}
        for number, _wire_type, value in wire.fields(top[1]):
            key[number] = value
    except ValueError:
        return False
    return (key[1] == int(match["sig"]) and key[2] == int(match["cluster"])
            and key[3] == match["device"].encode() and key[4] == (match["prefix"] or "").encode()
            and bool(key[5]) == bool(match["pjrt"]))


# -- helpers -------------------------------------------------------------------------------------------------
def _atomic_write(path: Path, data: bytes) -> None:
    with atomic_writer(path) as fh:
        fh.write(data)


def _file_sizes(root: Path) -> Iterator[int]:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                yield os.stat(os.path.join(dirpath, name)).st_size


def _same_dir(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _warn(kind: str, message: str) -> None:
    from .core.failures import warn_once

    warn_once(kind, message)

