"""GraphCache: the path of one compile.

    graph in -> load + signature (InvalidGraphError) -> resource scan (UnsupportedGraphError)
      -> fingerprint -> store.read(key) -> decode (format, checksum, key)
           hit  -> CompiledGraph(hit=True)
           miss -> striped key lock (single flight) -> read again -> fleet lease (Redis: core/flight.py)
                   -> read again -> validate (import) -> Grappler -> encode -> atomic write -> index row
                   + counters -> upload -> release the lease

A node-heavy graph is first looked up by its fast key (the exact bytes' hash, an alias of the canonical
key). On a first-ever run (an empty store, no remote tier) a miss computes neither key on the caller's path,
since neither can find anything there: a thread computes them while the graph compiles, for the entry's
write after the caller's first run (``_compile_first_ever``).

Fail open: any cache failure (I/O, corrupt entry, lock timeout, index trouble) warns once per process
and kind of failure, is counted, and the graph is compiled normally. ``strict=True`` raises instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .compile import identity
from .core import plugins
from .core.service import EntryService
from .core.settings import ENV_FUNCTIONS, ENV_TRACES, ENV_XLA, CacheSettings, resolve_flag
from .entry import codec, kinds
from .entry.keyparts import version_id
from .entry.keyshape import is_key
from .errors import CorruptEntryError, InvalidGraphError, UnsupportedGraphError

# The compile path (compile/: graphs, keys, canonical, importing, safety, the compiler) is imported by the
# methods that use it, at the first compile(): opening a cache does not load it.
if TYPE_CHECKING:
    from .compile import graphs, keys
    from .compile.compiled import CompiledGraph, PendingKey
    from .compile.compilers import Compiler
    from .compile.graphs import GraphView, Signature
    from .core.flight import Guard

log = logging.getLogger("graphcache")

# A miss whose entry is at least this big is written in the background (core/background.py); smaller ones
# are written before compile() returns (milliseconds).
BACKGROUND_WRITE_BYTES = 8 * 1024 * 1024
# At most this long a background write waits for the caller to say its first run is over
# (CompiledGraph.first_run_done) before it starts anyway (core/background.py).
WRITE_GRACE = 2.0


class GraphCache(EntryService):
    """A content-addressed cache of compiled TensorFlow graphs in one directory.

    Safe to share between threads and between processes. The entries, counters and the fail-open policy
    are the EntryService's (core/service.py); this class adds the compiler: its identity, ``compile`` and
    the single-flight miss.
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
        coordinator: str | None = None,
        fleet_hedge: float | str | None = None,
        remote_max_size: int | str | None = None,
        xla: bool | None = None,
        functions: bool | None = None,
        traces: bool | None = None,
    ) -> None:
        settings = CacheSettings.resolve(
            strict=strict, read_only=read_only, identity_salt=identity_salt, on_version_change=on_version_change,
            stale_after=stale_after, lock_timeout=lock_timeout, max_size=max_size, max_age=max_age,
            remote=remote, remote_read_only=remote_read_only, remote_timeout=remote_timeout,
            remote_retry_after=remote_retry_after, remote_options=remote_options, coordinator=coordinator,
            fleet_hedge=fleet_hedge, remote_max_size=remote_max_size)
        self._compiler = compiler  # the default one is created at first use (self.compiler)
        self._identity: dict[str, Any] | None = None
        self._identity_lock = threading.Lock()
        version_info = identity.compiler_version(settings.identity_salt)
        super().__init__(cache_dir, settings, version=version_id(version_info), version_info=version_info)
        if self.disabled:
            return
        self.hooks.want("explain")  # misses explain themselves (explain/), enabled at the first miss
        if resolve_flag(xla, ENV_XLA):  # XLA executables under this cache (xla/)
            plugins.enable(self, "xla")
        if resolve_flag(functions, ENV_FUNCTIONS):  # TF2 functions' first calls (functions/)
            plugins.enable(self, "functions")
        if resolve_flag(traces, ENV_TRACES):  # TF2 tf.functions' traces (traces/)
            plugins.enable(self, "traces")

    @property
    def compiler(self) -> Compiler:
        """The compiler backend: the one given, else Grappler's."""
        with self._identity_lock:
            if self._compiler is None:
                from .compile.compilers import GrapplerCompiler

                self._compiler = GrapplerCompiler()
            return self._compiler

    @property
    def identity(self) -> dict[str, Any]:
        """The full compiler identity (computing the device kind needs TensorFlow's device list)."""
        compiler = self.compiler
        with self._identity_lock:
            if self._identity is None:
                self._identity = identity.compiler_identity(self.identity_salt, compiler.name, compiler.options())
            return self._identity

    # -- compile -------------------------------------------------------------------------------------------
    def compile(self, graph: Any, fetches: Any, feeds: Any = (), targets: Any = (), *, options: Any = None,
                name: str | None = None) -> CompiledGraph:
        """Compile ``graph`` for the given signature through the cache.

        ``graph``: a GraphDef, a tf.Graph, serialized bytes or a .pb/.pbtxt path. ``options``: a
        tf.compat.v1.ConfigProto whose graph_options (rewriter options) are passed to Grappler.
        """
        source, view, label = self._inputs(graph, fetches, feeds, targets, options, name)
        return self._through_cache(view, options, label, lambda: self._compile_now(source, view.signature, options))

    def compile_by_running(self, graph: Any, fetches: Any, feeds: Any = (), targets: Any = (), *,
                           run: Callable[[], bytes], options: Any = None, name: str | None = None) -> CompiledGraph:
        """``compile``, where a miss compiles by running: ``run()`` runs the signature the plain TensorFlow way
        and returns the serialized graph TensorFlow compiled for it (compile/collected.py), stored as the
        entry. A graphcache.Session's miss: no offline Grappler call and its copies of the graph. ``run``
        is not called on a hit; its exceptions reach the caller, the key's lock released. Given the graph as a
        ``graphs.Handover``, the cache lets go of it once the key is known: before ``run()``, or on a first-ever
        miss (keyed in a thread during the run) when that thread is done. A frozen model's weights are then
        not held through the run."""
        from .compile import pipeline

        view, label = self._inputs(graph, fetches, feeds, targets, options, name)[1:]  # not the source: see above

        def compile_now() -> tuple[Any, bytes, float]:
            start = time.perf_counter()
            graph_def, data = pipeline.content_named(run())
            return graph_def, data, time.perf_counter() - start

        return self._through_cache(view, options, label, compile_now, releases_graph=True)

    def _through_cache(self, view: GraphView, options: Any, label: str,
                       compile_now: Callable[[], tuple[Any, bytes, float]], *,
                       releases_graph: bool = False) -> CompiledGraph:
        """Look the signature up; on a miss, ``compile_now()`` under its key's lock and store the result.
        ``releases_graph``: compile_now needs no source graph, so the view lets go of it once keyed."""
        from .compile.compiled import CompiledGraph

        start = time.perf_counter()
        if self.disabled:
            self.count_uncacheable("disabled")
            graph_def, data, seconds = compile_now()
            return CompiledGraph("", False, graph_def, seconds, label, view.signature, serialized=data)
        compiled = None
        if not self.read_only and self.fleet is None and self.holds_nothing():
            compiled = self._compile_first_ever(view, options, label, compile_now, releases_graph)
        if compiled is None:
            compiled = self._look_up(view, options, label, compile_now, releases_graph)
        log.info("graphcache %s %s key=%s %.3fs", "hit" if compiled.hit else "miss", label, compiled.key_source,
                 time.perf_counter() - start)
        return compiled

    def _look_up(self, view: GraphView, options: Any, label: str,
                 compile_now: Callable[[], tuple[Any, bytes, float]], releases_graph: bool) -> CompiledGraph:
        """A hit by the fast key's alias or the canonical key, else the miss compiled under single flight."""
        from .compile import keys

        fast = keys.exact_key(view, options, self.identity)  # node-heavy graphs: exact bytes, then an alias
        compiled = self._load_alias(fast, view, label) if fast is not None else None
        if compiled is not None:
            return compiled
        fp = keys.compute(view, options, self.identity, name=label)
        compiled = self._load(fp.key, view, label)
        if compiled is None:
            if releases_graph:
                _ = fp.details  # the miss hook's node table (explain/), taken while the graph is here
                view.release()
            return self._compile_single_flight(fp, view, label, compile_now, fast)
        if fast is not None and not self.read_only:  # found by its canonical key: later processes by the fast
            self.start_write(self._write_alias, fast, fp.key, label)  # one (written off the caller's path)
        return compiled

    def _inputs(self, graph: Any, fetches: Any, feeds: Any, targets: Any, options: Any, name: str | None
                ) -> tuple[graphs.Source, GraphView, str]:
        """Load and check what compile() was given: (source, view, label). Raises InvalidGraphError or
        UnsupportedGraphError (counted)."""
        from .compile import graphs, keys
        from .compile.graphs import GraphView, Signature

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
        from .compile import graphs
        from .compile.compiled import CompiledGraph
        from .compile.graphs import GraphView, Signature

        source = graphs.load(graph)
        signature = Signature.create(fetches, feeds, targets)
        GraphView(source.graph_def, signature)  # validates the signature's names
        graph_def, data, seconds = self._compile_now(source, signature, options)
        return CompiledGraph("", False, graph_def, seconds, name or ",".join(signature.fetches), signature,
                             serialized=data)

    def _compile_single_flight(self, fp: keys.Fingerprint, view: GraphView, label: str,
                               compile_now: Callable[[], tuple[Any, bytes, float]],
                               fast: str | None = None) -> CompiledGraph:
        from .compile.compiled import CompiledGraph

        signature = view.signature
        if self.read_only:
            self.count_lookup(kinds.GRAPH, misses=1)
            self.count_uncacheable("read_only")
            graph_def, data, seconds = compile_now()
            return CompiledGraph(fp.key, False, graph_def, seconds, label, signature, serialized=data)
        guard: Guard | None = self.compile_guard(fp.key)  # this host's lock (guard.local: None if that failed)
        try:
            if guard.local is not None:
                compiled = self._load(fp.key, view, label)  # another process may have compiled it
                if compiled is not None:
                    return compiled
            if self.join_fleet(guard):  # another machine's lease: it may have published the entry meanwhile
                compiled = self._load(fp.key, view, label)
                if compiled is not None:
                    return compiled
            self.count_lookup(kinds.GRAPH, misses=1)
            graph_def, data, seconds = compile_now()
            compiled, guard = self._store_compiled(guard, fp.key, fp, graph_def, data, seconds, signature, label,
                                                   fast)
            return compiled
        finally:
            if guard is not None:
                guard.release()  # the local lock now, the lease once the entry is uploaded (core/flight.py)

    def _compile_first_ever(self, view: GraphView, options: Any, label: str,
                            compile_now: Callable[[], tuple[Any, bytes, float]],
                            releases_graph: bool = False) -> CompiledGraph | None:
        """The miss of a graph on an empty store with no remote tier (a first-ever run): no key can find anything
        there, so none is computed on the caller's path. The canonical key, and a node-heavy graph's fast key
        for its alias, are computed by the entry's write after the caller's first run, or by a caller reading
        ``compiled.key`` (compiled.PendingKey); with ``releases_graph`` in a thread while TensorFlow's own run
        compiles, so that the graph can go before that run. That takes their passes over every node off the
        miss (on a weight-heavy graph with no fast key, its exact bytes tried and then its canonical key too);
        a short process pays them in its exit's wait for the write. Single flight holds under a lock named
        by the fan-in's node names (keys.flight_key); a process that waited for it finds the store filled and
        returns None: the caller then looks the graph up as any process does.
        ``releases_graph``: the thread lets go of the source graph once the keys are known (as _look_up)."""
        from .compile import keys
        from .compile.compiled import PendingKey

        guard: Guard | None = self.compile_guard(keys.flight_key(view, options, self.identity))
        try:
            if guard.local is not None and not self.holds_nothing():
                return None  # another process wrote while this one waited (this graph's entry, maybe)

            def keys_then_release() -> keys.Fingerprint:
                fingerprint = keys.compute(view, options, self.identity, name=label, with_fast=True)
                if releases_graph:
                    _ = fingerprint.details  # the miss hook's node table (explain/)
                    view.release()  # compile_now does not read it: only view.signature is read after it
                return fingerprint

            pending = PendingKey(keys_then_release)
            if releases_graph:  # computed while the compile runs, so that the source graph goes before the run
                pending.start()
            # else the entry's write computes it after the caller's first run: in a thread beside Grappler it
            # slowed the miss on a 2-core machine more than it saved (benchmarks/first_ever_ab.py; docs/benchmarks.md)
            self.count_lookup(kinds.GRAPH, misses=1)
            graph_def, data, seconds = compile_now()
            compiled, guard = self._store_compiled(guard, pending, pending, graph_def, data, seconds,
                                                   view.signature, label, None)
            return compiled
        finally:
            if guard is not None:
                guard.release()

    def _store_compiled(self, guard: Guard, key: str | PendingKey, fp: keys.Fingerprint | PendingKey,
                        graph_def: Any, data: bytes, seconds: float, signature: Signature, label: str,
                        fast: str | None) -> tuple[CompiledGraph, Guard | None]:
        """Count a miss's compile and store its entry: (the result, the guard if the caller still holds it)."""
        from .compile.compiled import CompiledGraph
        from .core import priority

        self.count_lookup(kinds.GRAPH, compiles=1, compile_seconds=seconds)
        if guard.local is not None:
            if len(data) >= BACKGROUND_WRITE_BYTES and not self.strict:
                # Written once the caller's first run is over (the gate) or after a grace; the locks go with
                # the write, so other processes wait for the entry instead of compiling it again.
                gate = threading.Event()
                self.start_write(priority.in_background(self._save), fp, data, seconds, signature, label,
                                 fast, lock=guard, gate=gate, grace=WRITE_GRACE)
                return CompiledGraph(key, False, graph_def, seconds, label, signature, serialized=data,
                                     write_gate=gate), None
            self._save(fp, data, seconds, signature, label, fast)
        return CompiledGraph(key, False, graph_def, seconds, label, signature, serialized=data), guard

    def _compile_now(self, source: graphs.Source, signature: Signature, options: Any
                     ) -> tuple[Any, bytes, float]:
        from .compile import pipeline  # the miss path: a process that only hits never loads it

        return pipeline.compile_now(self.compiler, source, signature, options)

    # -- graph entries ---------------------------------------------------------------------------------------
    def read_graph(self, key: str, source_ops: set[str]) -> tuple[codec.EntryHeader, bytes] | None:
        """A verified graph entry (header, serialized GraphDef) that passes the poisoning check against its
        source's op types (safety.py), or None: missing, corrupt or untrusted entries are handled (fail
        open) and missed. The op types are read from the bytes (importing.wire_op_types): the weights are
        not parsed here, TensorFlow's importer parses them once."""
        from .compile import importing, safety

        entry = self.read_entry(key, kind=kinds.GRAPH)
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
        from .compile.compiled import CompiledGraph

        found = self.read_graph(key, view.op_types())
        if found is None:
            return None
        header, data = found
        self.count_lookup(kinds.GRAPH, hits=1, saved_seconds=header.compile_seconds)
        # The hit's use and count are written once the caller's first run is over (core/usage.py)
        return CompiledGraph(key, True, None, header.compile_seconds, header.name or label, view.signature,
                             serialized=data, write_gate=self.usage.gate)

    def _save(self, fp: keys.Fingerprint | PendingKey, data: bytes, seconds: float, signature: Signature,
              label: str, fast: str | None = None) -> None:
        from .compile.compiled import PendingKey

        if isinstance(fp, PendingKey):
            fp = fp.take_fingerprint()  # a first-ever miss's key, computed here if the caller has not read it
            fast = fp.fast
        extra = self.hooks.miss(self, plugins.MissEvent(fp, label, signature))  # e.g. explain/: a node table
        header = codec.EntryHeader(
            key=fp.key, version=self.version, identity=self.identity, name=label, kind=kinds.GRAPH,
            created=time.time(), compile_seconds=seconds, key_parts=fp.parts,
            extra={**signature.as_dict(), **extra})
        if self.write_entry(header, data) and fast is not None:
            self._write_alias(fast, fp.key, label)

    # -- fast keys (keys.exact_key) -------------------------------------------------------------------------
    def _load_alias(self, fast: str, view: GraphView, label: str) -> CompiledGraph | None:
        """The graph entry a fast key's alias names, checked as any hit is; None: no alias, or its target is
        gone (the canonical key then decides, and the alias is written again)."""
        alias = self.read_entry(fast, kind=kinds.GRAPH_ALIAS)
        if alias is None:
            return None
        header, payload = alias
        target = bytes(payload).decode("ascii", "replace")
        if not is_key(target) or target != header.extra.get("target"):
            self.discard_corrupt(fast, CorruptEntryError("a graph alias whose target is not a key"))
            return None
        return self._load(target, view, label)

    def _write_alias(self, fast: str, target: str, label: str) -> None:
        header = codec.EntryHeader(key=fast, version=self.version, identity=self.identity, name=label,
                                   kind=kinds.GRAPH_ALIAS, created=time.time(), extra={"target": target})
        self.write_entry(header, target.encode("ascii"))

    def __repr__(self) -> str:
        return f"GraphCache({str(self.cache_dir)!r}, version={self.version!r})"
