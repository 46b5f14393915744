"""GraphCache: the path of one compile.

    graph in -> load + signature (InvalidGraphError) -> resource scan (UnsupportedGraphError)
      -> fingerprint -> store.read(key) -> decode (format, checksum, key)
           hit  -> CompiledGraph(hit=True)
           miss -> striped key lock (single flight) -> read again -> validate (import) -> Grappler
                   -> encode -> atomic write -> index row + counters

Fail open: any cache failure (I/O, corrupt entry, lock timeout, index trouble) warns once per process
and kind of failure, is counted, and the graph is compiled normally. ``strict=True`` raises instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import filelock
from tensorflow.core.framework import graph_pb2

from . import codec, graphs, identity, importing, keys, safety, settings
from . import xla as _xla
from .background import BackgroundWrites
from .cachedir import CacheDir, row_from_header
from .compiled import CompiledGraph
from .compilers import Compiler, GrapplerCompiler
from .core.failures import STORAGE_ERRORS, warn_once
from .errors import (
    CacheDirError,
    CacheIOError,
    CorruptEntryError,
    InvalidGraphError,
    UnsupportedGraphError,
    UntrustedEntryError,
)
from .graphs import GraphView, Signature
from .index import CacheIndex, IndexRow
from .stats import UNCACHEABLE_PREFIX, Stats
from .store import LocalStore, RemoteStore, TieredStore
from .versioning import PurgeResult, purge_stale_versions

log = logging.getLogger("graphcache")

CACHEDIR_TAG = "CACHEDIR.TAG"
_CACHEDIR_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by graphcache.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)

# A miss whose entry is at least this big is written in the background (background.py); smaller ones are
# written before compile() returns (milliseconds).
BACKGROUND_WRITE_BYTES = 8 * 1024 * 1024



def _warn_if_shared_writable(path: Path) -> None:
    """Anyone who can write the cache dir can plant entries other users will run: say so."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & 0o022:
        who = "other users" if mode & 0o002 else "its group"
        warn_once("shared_writable", f"graphcache: cache dir {path} is writable by {who} (mode "
                                     f"{stat.S_IMODE(mode):o}): anyone who can write it can plant entries this "
                                     "process will run; use chmod 700, or set GRAPHCACHE_SIGNING_KEY")


def _is_read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
        if not path.is_dir():
            raise CacheDirError(
                f"cache dir {str(path)!r} does not exist or is not a directory: create it, or pass "
                f"cache_dir=None to use ${settings.ENV_DIR} or the user cache dir", str(path))
        return path
    path = settings.default_cache_dir()
    try:
        settings.make_private_dir(path)
    except OSError as exc:
        raise CacheDirError(f"cannot create cache dir {str(path)!r}: {exc.strerror or exc}", str(path)) from None
    return path


class GraphCache:
    """A content-addressed cache of compiled TensorFlow graphs in one directory.

    Safe to share between threads and between processes.
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike[str] | None = None,
        *,
        strict: bool | None = None,
        read_only: bool | None = None,
        identity_salt: str | None = None,
        on_version_change: str = "purge",
        stale_after: float | timedelta | str | None = None,
        lock_timeout: float | str | None = None,
        max_size: int | str | None = None,
        max_age: float | timedelta | str | None = None,
        compiler: Compiler | None = None,
        remote: str | None = None,
        remote_read_only: bool | None = None,
        remote_timeout: float | str | None = None,
        remote_retry_after: float | str | None = None,
        remote_options: dict[str, Any] | None = None,
        xla: bool | None = None,
        functions: bool | None = None,
    ) -> None:
        if on_version_change not in ("purge", "keep"):
            raise ValueError(f"on_version_change={on_version_change!r}: use 'purge' or 'keep'")
        self.strict = settings.resolve_flag(strict, settings.ENV_STRICT)
        self.read_only = settings.resolve_flag(read_only, settings.ENV_READ_ONLY)
        self.disabled = settings.disabled()
        self.identity_salt = settings.resolve_str(identity_salt, settings.ENV_IDENTITY_SALT)
        self.on_version_change = on_version_change
        self.stale_after = settings.resolve_duration(stale_after, settings.ENV_STALE_AFTER,
                                                     settings.DEFAULT_STALE_AFTER)
        self.lock_timeout = settings.resolve_duration(lock_timeout, settings.ENV_LOCK_TIMEOUT,
                                                      settings.DEFAULT_LOCK_TIMEOUT)
        self.max_size = settings.resolve_size(max_size, settings.ENV_MAX_SIZE, settings.DEFAULT_MAX_SIZE)
        self.max_age = settings.resolve_optional_duration(max_age, settings.ENV_MAX_AGE)
        self.compiler = compiler or GrapplerCompiler()
        # entries are signed and checked with this key when set (HMAC-SHA256, codec.py); never logged
        self.signing_key = settings.resolve_str(None, settings.ENV_SIGNING_KEY).encode() or None
        self.cache_dir = _resolve_cache_dir(cache_dir)
        self.dir: CacheDir | None = None
        self.store = LocalStore(self.cache_dir, read_only=self.read_only)
        self._identity: dict[str, Any] | None = None
        self._identity_lock = threading.Lock()
        self.version = identity.version_id(identity.compiler_version(self.identity_salt))
        # The remote tier (store/tiered.py): read-through, background write-through, fail open.
        remote_url = settings.resolve_str(remote, settings.ENV_REMOTE).strip()
        self.remote: RemoteStore | None = None
        if remote_url and not self.disabled:
            self.remote = RemoteStore(
                remote_url, version=self.version, options=remote_options,
                timeout=settings.resolve_duration(remote_timeout, settings.ENV_REMOTE_TIMEOUT,
                                                  settings.DEFAULT_REMOTE_TIMEOUT),
                read_only=settings.resolve_flag(remote_read_only, settings.ENV_REMOTE_READ_ONLY))
            self.store = TieredStore(
                self.store, self.remote, store_fetched=self.write_entry, count=self.count, warn=warn_once,
                verify=lambda data, key: codec.decode(data, key, signing_key=self.signing_key),
                retry_after=settings.resolve_duration(remote_retry_after, settings.ENV_REMOTE_RETRY_AFTER,
                                                      settings.DEFAULT_REMOTE_RETRY_AFTER))
        self.index: CacheIndex | None = None
        self._writes = BackgroundWrites()
        self.last_purge = PurgeResult(0, 0, ())
        _warn_if_shared_writable(self.cache_dir)
        if not self.disabled and not self.read_only and not os.access(self.cache_dir, os.W_OK):
            # A read-only mount (or someone else's dir): serve hits, store nothing, say so once.
            reason = "read-only file system" if _is_read_only_fs(self.cache_dir) else "permission denied"
            warn_once("read_only", f"graphcache: cache dir {self.cache_dir} is not writable ({reason}): serving "
                                   "hits only, nothing is stored; pass read_only=True (GRAPHCACHE_READ_ONLY=1) "
                                   "to say so and silence this")
            self.read_only = True
            self.store.read_only = True
        if not self.disabled and not self.read_only:
            # read-only: the hit path needs no index (no last-use updates, no counters); management
            # calls open it lazily, so a read-only mount is never written, not even SQLite's -shm file
            self._open()
        if not self.disabled and _xla.requested(xla):  # XLA executables under this cache (xla.py)
            _xla.enable_xla(self)
        if not self.disabled and settings.resolve_flag(functions, settings.ENV_FUNCTIONS):
            from . import functions as _functions  # TF2 functions' first calls (functions/)
            _functions.enable(self)

    # -- opening -------------------------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            self.dir = CacheDir(self.cache_dir, read_only=self.read_only)
            self.index = self.dir.index
            if self.read_only or self.index is None:
                return
            tag = self.cache_dir / CACHEDIR_TAG
            if not tag.exists():
                tag.write_text(_CACHEDIR_TAG_TEXT)
            if self.index.created_now:
                self.dir.reconcile()
            self.index.record_version(self.version, identity.compiler_version(self.identity_salt))
            if self.on_version_change == "purge":
                self.last_purge = purge_stale_versions(self.index, self.store, self.version, self.stale_after)
            self.store.remove_stray_temp_files()
            if self.max_age is not None:
                self.dir.evict(max_age=self.max_age)
        except STORAGE_ERRORS as exc:
            self.failure("io_error", "opening the cache", exc)

    @property
    def identity(self) -> dict[str, Any]:
        """The full compiler identity (computing the device kind needs TensorFlow's device list)."""
        with self._identity_lock:
            if self._identity is None:
                self._identity = identity.compiler_identity(self.identity_salt, self.compiler.name,
                                                            self.compiler.options())
            return self._identity

    # -- failure handling ----------------------------------------------------------------------------------
    def count(self, **deltas: float) -> None:
        if self.index is None or self.read_only:
            return
        try:
            self.index.add_counters(deltas)
        except STORAGE_ERRORS as exc:
            warn_once("stats", f"graphcache: could not update stats in {self.cache_dir}: {exc}")

    def count_uncacheable(self, reason: str, errors: int = 0) -> None:
        self.count(**{UNCACHEABLE_PREFIX + reason: 1, "errors": errors})

    def failure(self, reason: str, what: str, exc: BaseException, *,
                consequence: str = "compiling without the cache", uncacheable: bool = True) -> None:
        """A cache failure: raise in strict mode, else warn once (``reason`` is the warning's kind), count
        it (``errors``, and ``uncacheable.<reason>`` when ``uncacheable``) and carry on; ``consequence``
        says in the warning what happens instead."""
        if self.strict:
            raise CacheIOError(f"graphcache: {what} failed: {type(exc).__name__}: {exc}") from exc
        warn_once(reason, f"graphcache: {what} failed in {self.cache_dir} ({type(exc).__name__}: {exc}); "
                          f"{consequence}")
        if uncacheable:
            self.count_uncacheable(reason, errors=1)
        else:
            self.count(errors=1)

    # -- compile -------------------------------------------------------------------------------------------
    def compile(self, graph: Any, fetches: Any, feeds: Any = (), targets: Any = (), *, options: Any = None,
                name: str | None = None) -> CompiledGraph:
        """Compile ``graph`` for the given signature through the cache.

        ``graph``: a GraphDef, a tf.Graph, serialized bytes or a .pb/.pbtxt path. ``options``: a
        tf.compat.v1.ConfigProto whose graph_options (rewriter options) are passed to Grappler.
        """
        start = time.perf_counter()
        source, view, label = self._inputs(graph, fetches, feeds, targets, options, name)
        if self.disabled:
            self.count_uncacheable("disabled")
            graph_def, data, seconds = self._compile_now(source, view.signature, options)
            return CompiledGraph("", False, graph_def, seconds, label, view.signature, serialized=data)
        fp = keys.compute(view, options, self.identity, name=label)
        compiled = self._load(fp.key, view, label)
        if compiled is None:
            compiled = self._compile_single_flight(fp, source, view, options, label)
        log.info("graphcache %s %s key=%s %.3fs", "hit" if compiled.hit else "miss", label, fp.key,
                 time.perf_counter() - start)
        return compiled

    def _inputs(self, graph: Any, fetches: Any, feeds: Any, targets: Any, options: Any, name: str | None
                ) -> tuple[graphs.Source, GraphView, str]:
        """Load and check what compile() was given: (source, view, label). Raises InvalidGraphError or
        UnsupportedGraphError (counted)."""
        try:
            source = graphs.load(graph)
            signature = Signature.create(fetches, feeds, targets)
            view = GraphView(source.graph_def, signature)
            keys.options_bytes(options)  # type-check options early
        except (InvalidGraphError, TypeError) as exc:
            self.count_uncacheable("invalid_graph")
            if isinstance(exc, TypeError):
                raise InvalidGraphError(str(exc)) from None
            raise
        label = name or ",".join(signature.fetches + signature.targets)[:120]
        try:
            view.check_supported()
        except UnsupportedGraphError:
            self.count_uncacheable("resource_ops")
            raise
        return source, view, label

    def compile_without_cache(self, graph: Any, fetches: Any, feeds: Any = (), targets: Any = (), *,
                              options: Any = None, name: str | None = None) -> CompiledGraph:
        """Compile with the same backend, bypassing the store (no key, nothing read or written)."""
        source = graphs.load(graph)
        signature = Signature.create(fetches, feeds, targets)
        GraphView(source.graph_def, signature)  # validates the signature's names
        graph_def, data, seconds = self._compile_now(source, signature, options)
        return CompiledGraph("", False, graph_def, seconds, name or ",".join(signature.fetches), signature,
                             serialized=data)

    def _compile_single_flight(self, fp: keys.Fingerprint, source: graphs.Source, view: GraphView,
                               options: Any, label: str) -> CompiledGraph:
        signature = view.signature
        if self.read_only:
            self.count(misses=1)
            self.count_uncacheable("read_only")
            graph_def, data, seconds = self._compile_now(source, signature, options)
            return CompiledGraph(fp.key, False, graph_def, seconds, label, signature, serialized=data)
        try:
            lock = self.store.lock_for(fp.key, self.lock_timeout)
            lock.acquire()
        except filelock.Timeout as exc:
            self.failure("lock_timeout", f"waiting {self.lock_timeout:.0f}s for the compile lock", exc)
            lock = None
        except STORAGE_ERRORS as exc:
            self.failure("io_error", "taking the compile lock", exc)
            lock = None
        try:
            if lock is not None:
                compiled = self._load(fp.key, view, label)  # another process may have compiled it
                if compiled is not None:
                    return compiled
            self.count(misses=1)
            graph_def, data, seconds = self._compile_now(source, signature, options)
            self.count(compiles=1, compile_seconds=seconds)
            if lock is not None:
                if len(data) >= BACKGROUND_WRITE_BYTES and not self.strict:
                    # Write while the caller imports and runs the graph; the lock goes with the write,
                    # so other processes wait for the entry instead of compiling it again.
                    self._writes.start(self._save, fp, data, seconds, signature, label, lock=lock)
                    lock = None
                else:
                    self._save(fp, data, seconds, signature, label)
            return CompiledGraph(fp.key, False, graph_def, seconds, label, signature, serialized=data)
        finally:
            if lock is not None:
                lock.release()

    def _compile_now(self, source: graphs.Source, signature: Signature, options: Any
                     ) -> tuple[graph_pb2.GraphDef | None, bytes, float]:
        """Validate and compile: (the GraphDef when it had to be parsed, its bytes, seconds)."""
        start = time.perf_counter()
        tf_graph = source.tf_graph if source.tf_graph is not None else graphs.validate(source.graph_def, signature)
        data = self.compiler.compile_serialized(source.graph_def, tf_graph, signature, options)
        graph_def = None
        if importing.library_bytes(data):  # library functions get content-derived names (keys.py)
            graph_def = graph_pb2.GraphDef.FromString(data)
            keys.canonical_function_names(graph_def)
            data = graph_def.SerializeToString()
        return graph_def, data, time.perf_counter() - start

    # -- store access --------------------------------------------------------------------------------------
    # read_entry / write_entry are the one path to the store for every kind of entry (graphs, and the
    # kinds later features add): checks, fail-open handling, index rows and counters live here only.
    def read_entry(self, key: str) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        """A verified entry's header and payload, or None (missing, unreadable or corrupt: fail open).

        Records the use (LRU) but no hit: the caller counts a hit once the payload proved usable.
        """
        try:
            parts = self._read_parts(key)
            if parts is None:
                return None
            head, stored = parts
            header, payload = codec.decode_parts(head, stored, key, signing_key=self.signing_key)
        except STORAGE_ERRORS as exc:
            self.failure("io_error", f"reading entry {key}", exc)
            return None
        except UntrustedEntryError as exc:
            self.discard_untrusted(key, str(exc))
            return None
        except CorruptEntryError as exc:
            self.discard_corrupt(key, exc)
            return None
        self.touch(key, header, len(head) + len(stored))
        return header, payload

    def _read_parts(self, key: str) -> tuple[bytes | memoryview, bytes | memoryview] | None:
        """The entry as (prefix + header, stored payload): the local file read in two pieces (the payload
        in its own bytes, see LocalStore.read_parts), else the remote's copy split in place."""
        local = self.store.local if isinstance(self.store, TieredStore) else self.store
        parts = local.read_parts(key)
        if parts is not None or not isinstance(self.store, TieredStore):
            return parts
        data = self.store.read(key)
        return None if data is None else codec.split(data)

    def write_entry(self, header: codec.EntryHeader, payload: bytes) -> bool:
        """Store an entry atomically, index it and enforce the size cap; False when it could not be stored."""
        if self.read_only or self.disabled:
            return False
        try:
            parts = codec.encode_parts(header, payload, signing_key=self.signing_key)
            self.store.write_parts(header.key, parts)
        except STORAGE_ERRORS as exc:
            self.failure("io_error", f"writing entry {header.key}", exc)
            return False
        size = sum(len(part) for part in parts)
        self.count(bytes_written=size)
        if self.index is not None and self.dir is not None:
            try:
                self.index.upsert(row_from_header(header, size, header.created))
                self.dir.evict(max_size=self.max_size, max_age=self.max_age, keep=header.key)
            except STORAGE_ERRORS as exc:
                warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")
        return True

    def discard_corrupt(self, key: str, exc: BaseException) -> None:
        """An entry failed a check: raise (strict) or warn once, count, and remove it so it is rebuilt."""
        self._discard(key, "corrupt_entry", f"is corrupt ({exc});", f"is corrupt: {exc}", cause=exc)

    def discard_untrusted(self, key: str, why: str) -> None:
        """An entry that decodes but must not be used (poisoned, unsigned): warn once, count, remove, rebuild."""
        self._discard(key, "untrusted_entry", f"rejected: {why};", f"rejected: {why}")

    def _discard(self, key: str, reason: str, warning: str, strict_message: str,
                 cause: BaseException | None = None) -> None:
        if self.strict:
            raise CacheIOError(f"graphcache: entry {key} {strict_message}") from cause
        warn_once(reason, f"graphcache: entry {key} in {self.cache_dir} {warning} removed it and compiling again")
        self.count_uncacheable(reason, errors=1)
        if not self.read_only:
            with contextlib.suppress(*STORAGE_ERRORS):
                self.store.quarantine(key)
                if self.index is not None:
                    self.index.remove([key])

    def touch(self, key: str, header: codec.EntryHeader | None = None, size: int = 0) -> None:
        """Record a use of ``key`` (its LRU position); a row the index lacks is re-added from ``header``.
        Best effort: an index failure warns once and is otherwise ignored."""
        if self.index is None or self.read_only:
            return
        try:
            if not self.index.touch(key) and header is not None:
                self.index.upsert(row_from_header(header, size, time.time()))
        except STORAGE_ERRORS as exc:
            warn_once("index", f"graphcache: could not update the index in {self.cache_dir}: {exc}")

    def read_graph(self, key: str, source_ops: set[str]) -> tuple[codec.EntryHeader, bytes] | None:
        """A verified graph entry (header, serialized GraphDef) that passes the poisoning check against its
        source's op types (safety.py), or None: missing, corrupt or untrusted entries are handled (fail
        open) and missed. The op types are read from the bytes (importing.wire_op_types): the weights are
        not parsed here, TensorFlow's importer parses them once."""
        entry = self.read_entry(key)
        if entry is None:
            return None
        header, payload = entry
        data = payload if isinstance(payload, bytes) else bytes(payload)
        try:
            ops = importing.wire_op_types(data)
        except (ValueError, UnicodeDecodeError) as exc:
            self.discard_corrupt(key, CorruptEntryError(f"payload is not a GraphDef: {exc}"))
            return None
        introduced = safety.introduced_ops(source_ops, ops)
        if introduced:
            self.discard_untrusted(key, f"it adds ops its source graph does not have: {', '.join(introduced)}")
            return None
        return header, data

    def _load(self, key: str, view: GraphView, label: str) -> CompiledGraph | None:
        found = self.read_graph(key, view.op_types())
        if found is None:
            return None
        header, data = found
        self.count(hits=1, saved_seconds=header.compile_seconds)
        return CompiledGraph(key, True, None, header.compile_seconds, header.name or label, view.signature,
                             serialized=data)

    def _save(self, fp: keys.Fingerprint, data: bytes, seconds: float, signature: Signature, label: str) -> None:
        header = codec.EntryHeader(
            key=fp.key, version=self.version, identity=self.identity, name=label, kind="graph",
            created=time.time(), compile_seconds=seconds, key_parts=fp.parts, extra=signature.as_dict())
        self.write_entry(header, data)

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait for entries this cache is writing in the background (big misses, see background.py);
        True when none is left."""
        from . import functions as _functions  # entries of TF2 functions' first calls (functions/)
        functions_done = _functions.wait_for_writes(timeout)
        return self._writes.wait(timeout) and functions_done

    def flush(self, timeout: float | None = None) -> bool:
        """Store new XLA executables, then wait (at most ``timeout`` seconds) for background uploads to the
        remote; True when none is pending.

        Uploads are also waited for at interpreter exit (up to a minute); call this where a process must not
        end before its entries are shared, e.g. at the end of a CI job that warms the remote.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        written = self.wait_for_writes(timeout)
        _xla.sync(self)  # new XLA executables become entries first, so they are uploaded too
        if not isinstance(self.store, TieredStore):
            return written
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self.store.flush(left) and written

    # -- management (delegated to the TF-free CacheDir) ------------------------------------------------------
    def _management(self) -> CacheDir:
        self.wait_for_writes()  # what this cache just compiled is listed, counted and purgeable
        if self.dir is None:
            self.dir = CacheDir(self.cache_dir, read_only=self.read_only)
            self.index = self.dir.index
        return self.dir

    def stats(self) -> Stats:
        return self._management().stats(current_version=self.version, max_size=self.max_size)

    def entries(self) -> list[IndexRow]:
        return self._management().entries()

    def purge(self, keys: list[str] | None = None, *, all: bool = False, stale: bool = False,
              older_than: float | str | None = None, max_size: int | str | None = None,
              filters: list[str] | tuple[str, ...] = (), dry_run: bool = False) -> PurgeResult:
        """Remove entries, with the CLI's selections (see CacheDir.plan_purge); returns what was freed."""
        return self._management().purge(keys, all=all, stale=stale, older_than=older_than, max_size=max_size,
                                        filters=filters, current_version=self.version, dry_run=dry_run)

    def clear(self) -> PurgeResult:
        return self._management().purge(all=True)

    def verify(self, fix: bool = False) -> list[tuple[str, str]]:
        """Check every entry's format and checksum: a list of (key, problem). ``fix`` removes bad ones."""
        return self._management().verify(fix=fix)

    def close(self) -> None:
        """Release the index connection (a closed cache reopens it lazily for management calls)."""
        self.wait_for_writes()
        if self.index is not None:
            self.index.close()
        self.index = None
        self.dir = None

    def __repr__(self) -> str:
        return f"GraphCache({str(self.cache_dir)!r}, version={self.version!r})"
