"""The hook: every eager function call passes here; a first call is served from the cache or stored.

Hook point. Every eager call of a tf.function, a ConcreteFunction, a Keras step function or a function
restored by ``tf.saved_model.load`` ends in ``AtomicFunction.call_flat(*tensors)``
(polymorphic_function/atomic_function.py), which runs the function's eager kernel through
``Context.call_function``; the kernel is instantiated, and the function optimized, inside the first such
call for a (name, device scope, call options) combination (TensorFlow's eager kernel cache keeps it
afterwards). graphcache wraps ``call_flat``: it has the FunctionDef TensorFlow just fetched for the call
(``cached_definition``, read from the eager context at the function's first use), so nothing is fetched or
parsed twice. Later calls cost a set lookup here (a few microseconds).

A first call:

1. describes the call (keying.py): the FunctionDef, the functions it reaches, the key parts, the fast key;
2. looks up the fast key's alias, else the canonical key (computing it), and verifies the entry
   (codec checksums, signature, then the payload: optimized.check_payload);
3. hit: the entry is handed to TensorFlow's own file cache through a private directory for this one call
   (tfdir.py); TensorFlow skips OptimizeFunctionGraph (placer, Grappler, the graph passes) and goes on
   with partitioning and the kernels' creation;
4. miss: the call runs with TensorFlow's graph collector on (the canonical key meanwhile computed in a
   thread: keying.FunctionCall.start_canonical); the optimized graph is taken from what it collected,
   turned into the entry (optimized.build) and stored with an alias for the fast key, in a background
   thread (background.py; joined at exit, by ``wait_for_writes`` and by GraphCache's).

Threads. First calls are handled one at a time (a process-wide lock held for the call: the variable
TensorFlow reads and the graph collector are process-wide). A first call that finds the lock taken (a
first call in another thread, or a call made from inside a running first call, e.g. by a py_function)
runs the normal TensorFlow way, uncached, rather than wait: waiting could deadlock. While a hit's call
runs, TensorFlow instantiations outside this hook in other threads (tf.data functions, TF1 sessions)
also see the directory; they could only read its one file if their function had the same name (tracing
counter aside) and node count as the function being loaded.

Fail open: anything failing here warns once (graphcache.core.failures), is counted, and the call runs the
normal way. Exceptions of the call itself reach the caller unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tensorflow.python.eager import context

from ..core import plugins
from ..core.counters import FUNCTION_UNCACHEABLE
from ..core.failures import STORAGE_ERRORS
from ..core.gcpause import collector_paused
from ..core.service import EntryService
from ..entry import codec, kinds
from ..errors import CacheIOError, CorruptEntryError, UntrustedEntryError
from . import keying, optimized, usercollect
from .tfdir import TFDir, take_over_variable

log = logging.getLogger("graphcache")

PLUGIN = "functions"  # this plugin's name: its FunctionCache is runtime.state.plugins[PLUGIN]

KIND = kinds.TF_FUNCTION
ALIAS_KIND = kinds.TF_FUNCTION_ALIAS
XLA_ATTR = "_XlaMustCompile"
# Ops every instantiated function graph has that its FunctionDef body does not (function_ops.cc).
INSTANTIATION_OPS = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})


class FunctionCache:
    """The first-call logic of one GraphCache (one per process: see __init__.enable)."""

    def __init__(self, cache: EntryService) -> None:
        self.cache = cache
        self.dir = TFDir()
        self._seen: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        self._identity_hash: str | None = None
        self._stored: set[str] = set()  # keys of the function entries this process stored
        take_over_variable()

    def release(self) -> None:
        """Stop serving this process's calls (uninstall(), runtime.reset): the wrapper passes them through."""
        plugins.release(PLUGIN, self)

    # -- the wrapper ---------------------------------------------------------------------------------------
    def call(self, original: Any, atomic: Any, args: tuple[Any, ...]) -> Any:
        """``AtomicFunction.call_flat(atomic, *args)`` through the cache (``original`` is TensorFlow's)."""
        ctx = context.context()
        if not ctx.executing_eagerly():  # a call op added to a graph being traced: nothing runs yet
            return original(atomic, *args)
        options = ctx.function_call_options
        seen = (atomic.name, ctx.device_name, options.config_proto_serialized, options.executor_type)
        if seen in self._seen:
            return original(atomic, *args)
        self._seen.add(seen)
        if not self._lock.acquire(blocking=False):  # another first call is running: never wait (see above)
            self._not_cached(atomic.name, optimized.NotStorable("busy", "first-called while another first call "
                                                                        "runs (another thread's, or its caller's)"))
            return original(atomic, *args)
        try:
            return self._first_call(original, ctx, atomic, args, options)
        finally:
            self._lock.release()

    def _first_call(self, original: Any, ctx: Any, atomic: Any, args: tuple[Any, ...], options: Any) -> Any:
        def run() -> Any:
            return original(atomic, *args)

        try:
            call = self._describe(ctx, atomic.cached_definition, args, options)
            found = None if call is None else self._lookup(call)
        except CacheIOError:
            raise
        except Exception as exc:  # a TensorFlow or protobuf surprise: never the user's problem
            self._failed("describing the function call", exc)
            return run()
        if call is None:
            return run()
        if found is not None:
            return self._hit(call, found, run)
        return self._miss(call, ctx, run)

    # -- describing and looking up -------------------------------------------------------------------------
    def _describe(self, ctx: Any, fdef: Any, tensor_inputs: tuple[Any, ...], options: Any
                  ) -> keying.FunctionCall | None:
        if XLA_ATTR in fdef.attr and fdef.attr[XLA_ATTR].b:  # XLA compiles them (their executables: xla=True)
            self._not_cached(fdef.signature.name, optimized.NotStorable(
                "jit_compile", "a jit_compile function: XLA compiles it (its executables are cached with xla=True)"))
            return None
        if self._identity_hash is None:
            self._identity_hash = keying.identity_hash(self.cache.identity)
        return keying.describe_call(ctx, fdef, tensor_inputs, options, self._identity_hash)

    def _lookup(self, call: keying.FunctionCall) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        alias = self.cache.read_entry(call.fast_key, kind=ALIAS_KIND)
        if alias is not None:
            header, payload = alias
            target = bytes(payload).decode("ascii", "replace")
            if target == header.extra.get("target"):
                found = self._read_function(target, call)
                if found is not None:
                    return found
        # Nothing to find but this process's own entries (whose fast keys it aliased): the canonical key is
        # left to the entry's write, off the caller's path (a first-ever run's functions after its first).
        if not self.cache.may_hold(KIND, besides=self._stored):
            return None
        fingerprint = call.canonical()
        found = self._read_function(fingerprint.key, call)
        if found is not None and alias is None:
            self._write_alias(call, fingerprint.key)
        return found

    def _read_function(self, key: str, call: keying.FunctionCall
                       ) -> tuple[codec.EntryHeader, bytes | memoryview] | None:
        entry = self.cache.read_entry(key, kind=KIND)
        if entry is None:
            return None
        header, payload = entry
        try:
            optimized.check_payload(payload, call.fdef, call.ops | INSTANTIATION_OPS)
        except UntrustedEntryError as exc:
            self.cache.discard_untrusted(key, str(exc))
            return None
        except CorruptEntryError as exc:
            self.cache.discard_corrupt(key, exc)
            return None
        return header, payload

    # -- hit -----------------------------------------------------------------------------------------------
    def _hit(self, call: keying.FunctionCall, found: tuple[codec.EntryHeader, bytes | memoryview], run: Any) -> Any:
        header, payload = found
        file_name = optimized.tf_file_name(call.name, len(call.fdef.node_def))
        if any(optimized.tf_file_name(name, len(fdef.node_def)) == file_name for name, fdef in call.library.items()):
            # a function this one calls has TensorFlow's file name too: were it instantiated while the file is
            # offered (a call that is not inlined), TensorFlow would load this graph for it
            self.cache.count_lookup(KIND, misses=1, compiles=1)
            self._not_cached(call.name, optimized.NotStorable(
                "file_name", "not served: a function it calls has the same TensorFlow file name"))
            return run()
        try:
            served = self.dir.place(file_name, optimized.tf_file_bytes(call.name, payload))
        except STORAGE_ERRORS as exc:
            self.cache.failure("io_error", "handing a function graph to TensorFlow", exc)
            return run()
        try:
            outputs = run()
        finally:
            self.dir.release(served)
        if served.read:
            self.cache.count_lookup(KIND, hits=1, saved_seconds=header.compile_seconds)
            log.info("graphcache function hit %s key=%s", call.name, header.key)
        else:  # its kernel existed already (called before graphcache was enabled), or TensorFlow changed
            log.debug("graphcache: TensorFlow did not read the cached graph of %s", call.name)
        return outputs

    # -- miss ----------------------------------------------------------------------------------------------
    def _miss(self, call: keying.FunctionCall, ctx: Any, run: Any) -> Any:
        if self.cache.read_only:
            self.cache.count_lookup(KIND, misses=1, compiles=1)
            self.cache.count_uncacheable("read_only")
            return run()
        if usercollect.program_collects():  # exporting would take the program's own metadata and graphs
            self.cache.count_lookup(KIND, misses=1, compiles=1)
            self._not_cached(call.name, optimized.NotStorable(
                "user_collection", "first-called while the program collects run metadata or graphs itself"))
            return run()
        call.start_canonical()  # the entry's key, computed while TensorFlow optimizes (keying.py)
        usercollect.collect_graphs(ctx, True)
        start = time.perf_counter()
        metadata = None
        try:
            outputs = run()
        finally:
            seconds = time.perf_counter() - start
            try:
                metadata = usercollect.export_run_metadata(ctx)
            finally:
                usercollect.collect_graphs(ctx, False)
        self.cache.count_lookup(KIND, misses=1, compiles=1, compile_seconds=seconds)
        if metadata is not None:
            if self.cache.strict:  # failures must reach the caller
                self._store(call, metadata, seconds)
            else:  # building and writing the entry (tens of ms: fsyncs) overlaps with what the caller does next
                self.cache.start_write(self._store_fail_open, call, metadata, seconds, key=call.fast_key)
        return outputs

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        """Wait for entries being stored in the background (the cache's own background writes, joined by
        GraphCache.wait_for_writes and at exit); True when none is left."""
        return self.cache.wait_for_writes(timeout)

    def _store_fail_open(self, call: keying.FunctionCall, metadata: bytes, seconds: float) -> None:
        try:
            with collector_paused():  # as the trace's write (traces/hook.py: "The collector")
                self._store(call, metadata, seconds)
        except Exception as exc:
            self._failed(f"storing the optimized graph of {call.name}", exc)

    def _store(self, call: keying.FunctionCall, metadata: bytes, seconds: float) -> None:
        graph = optimized.pick_collected(metadata, call.fdef)
        if graph is None:
            self._not_cached(call.name, optimized.NotStorable(
                "not_collected", "TensorFlow's graph collector handed out no optimized graph of it (its kernel "
                                 "existed already, or it was collected more than once)"))
            return
        try:
            payload = optimized.build(call.fdef, graph, seconds, call.ops | INSTANTIATION_OPS)
        except optimized.NotStorable as exc:
            self._not_cached(call.name, exc)
            return
        fingerprint = call.canonical()
        header = codec.EntryHeader(
            key=fingerprint.key, version=self.cache.version, identity=self.cache.identity, name=call.name,
            kind=KIND, created=time.time(), compile_seconds=seconds, key_parts=fingerprint.parts,
            extra={"nodes": len(call.fdef.node_def), "optimized_nodes": len(graph.node),
                   "inputs": len(call.fdef.signature.input_arg), "outputs": len(call.fdef.signature.output_arg),
                   "library": sorted(call.library)})
        if self.cache.write_entry(header, payload):
            self._stored.add(fingerprint.key)
            self._write_alias(call, fingerprint.key)
            log.info("graphcache function stored %s key=%s %.3fs", call.name, fingerprint.key, seconds)

    def _write_alias(self, call: keying.FunctionCall, target: str) -> None:
        if self.cache.read_only:
            return
        header = codec.EntryHeader(
            key=call.fast_key, version=self.cache.version, identity=self.cache.identity, name=call.name,
            kind=ALIAS_KIND, created=time.time(), extra={"target": target})
        self.cache.write_entry(header, target.encode("ascii"))

    def _not_cached(self, name: str, exc: optimized.NotStorable) -> None:
        """A function whose optimized graph is not stored or served: counted by reason, logged, and listed by
        ``graphcache misses`` (best effort: the index may be busy)."""
        log.info("graphcache: function %s is not cached (%s): %s", name, exc.reason, exc)
        self.cache.count(**{FUNCTION_UNCACHEABLE: 1, f"{FUNCTION_UNCACHEABLE}.{exc.reason}": 1})
        if self.cache.strict:
            self._record_not_cached(name, exc)
        else:  # off the caller's path: the record may open the index
            self.cache.start_write(self._record_not_cached, name, exc)

    def _record_not_cached(self, name: str, exc: optimized.NotStorable) -> None:
        if self.cache.index is None or self.cache.read_only:
            return
        try:
            from ..core.index import misses

            self.cache.record_miss(misses.Miss(time.time(), f"function {name}", "", None, (),
                                               f"function not cacheable ({exc.reason}): {exc}"))
        except Exception:  # an explanation is never worth a failed call
            log.debug("graphcache: recording the function miss of %s failed", name, exc_info=True)

    def _failed(self, what: str, exc: BaseException) -> None:
        """An unexpected failure of graphcache's own (not of the call): strict raises, else warn once, count."""
        self.cache.failure("function_error", what, exc, consequence="the function is compiled without the cache",
                           uncacheable=False)

