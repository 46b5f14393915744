"""The hook: a tf.function's trace served from the cache (no Python runs), or traced and stored.

Hook point. Every trace of a ``tf.function`` (polymorphic_function.Function) for an input signature its
in-process function cache does not have ends in ``tracing_compilation._create_concrete_function``
(function_type, type_context, func_graph, tracing_options), called by ``_maybe_define_function`` after
the cache lookup missed and before it adds the result to that cache. It is the narrowest point that sees
the Python function (inside ``tracing_options.python_function``'s TensorFlow decorators), the arguments'
TraceTypes (``function_type``, generalized already when reduce_retracing asks for it) and the options.
graphcache wraps it; what it returns TensorFlow caches and calls as its own trace, so later calls in
the process never come back here.

A trace (only a top-level one, in eager mode: traces nested inside another trace are that trace's):

1. finds the user's function: the target of the decorators tf.function puts around it (its variable-creator
   scope, autograph, and for a decorated method the bound-method wrapper of ``Function.__get__``). A method
   is keyed with its object (instance.py: the attributes its code reads); a partial, a callable object or
   library code (tf.data's own functions) is not cached; Keras' predict step is keyed by its model
   (kerasstep.py), its train and test steps by the model and its compile state, built first (kerasfit.py), the
   serving function ``tf.saved_model.save`` exports for it as its predict step (kerasserve.py);
2. computes the key (keying.py, walk.py) or refuses (``Uncacheable``: counted ``trace_uncacheable`` and
   by reason, logged at INFO) and traces as TensorFlow does;
3. hit: the stored trace is registered in the eager context and bound to this process's variables
   (stored.py; its FuncGraph is built only if something needs it: lazy.py) and returned; with
   ``GRAPHCACHE_TRACE_VERIFY=1`` the function is traced anyway and the two compared (canonical function
   libraries, captures, signatures): a difference is logged as an ERROR, warned about (raised in strict
   mode), the entry removed, and the fresh trace used;
4. miss: the function is traced under a variable creator that notes every variable created, and recorded
   (recording.py: files opened, modules imported, environment variables read); a trace that created
   variables, did what its key cannot see, changed a value it read (walked again afterwards, the ``_called``
   of the Keras layers it called and the optimizers it built without variables aside: noted, and done again on
   a hit), or that stored.py refuses, is not stored. A first trace whose new variables are its optimizers'
   builds leaves its build (building.py), stored under its key once the retrace is cached: a later process
   builds them before the trace, whose key is then the retrace's. Otherwise the entry is written in the background (the function library is read and checked
   there), off the caller's path.

The collector. A trace through the hook runs with Python's cyclic garbage collector paused
(core/gcpause.py), the key's walk, the trace and the check after it. Keras' tracing makes next to no
cyclic garbage (ResNet50V2's and EfficientNetV2B0's first ``predict``: 32 and 47 collections during the
trace, 0 objects freed, ad hoc), but each collection moves what lives at that moment into an older
generation, and what reaches the oldest counts toward the process's next full collection (0.15-0.2 s over the
~370k objects of a Keras process) even if it dies a moment later: a walk's thousands of containers, the
trace's own temporaries. Paused, these die young: on ResNet50V2's first-ever ``predict`` the process's
distance to its next full collection went from 9k to 22k objects (plain: 20k); unpaused, graphcache's miss
pulled that collection into the first result on EfficientNetV2B0. What the pause holds back (cycles made
while tracing) is looked at by the first collection after it, as ever: run right after the pause, in the
caller's thread (gcpause.collect_young), not by whichever thread allocates next. The entry's write in the background
(reading the library, the entry's bytes, the index's first open) is paused too: on DenseNet121's first-ever
``predict`` a full collection ran inside it in every process (0.2-0.45 s in that thread, which the exit
drain waited for; ad hoc), for what the first collection after it does anyway.

Fail open: a failure of graphcache's own warns once, is counted, and the function is traced normally.
Errors of the trace itself (the user's code) reach the caller unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from typing import Any

from tensorflow.python.eager.polymorphic_function import tracing_compilation
from tensorflow.python.framework import ops
from tensorflow.python.ops import variable_scope
from tensorflow.python.util import tf_decorator

from ..core import plugins, settings
from ..core.counters import TRACE_UNCACHEABLE
from ..core.gcpause import collect_young, collector_paused
from ..core.service import EntryService
from ..entry import codec, kinds
from ..entry.keyparts import hash_json
from ..errors import CacheIOError, CorruptEntryError
from . import (
    building,
    instance,
    kerasfit,
    kerasserve,
    kerasstep,
    keying,
    logged,
    nested,
    objects,
    recording,
    stored,
    warned,
)
from .walk import Uncacheable, is_library

log = logging.getLogger("graphcache")

PLUGIN = "traces"  # this plugin's name: its TraceCache is runtime.state.plugins[PLUGIN]
KIND = kinds.TF_TRACE
SCOPE_DECORATOR = "_generate_scoped_tracing_options"  # tf.function's variable-creator scope around the function
AUTOGRAPH_DECORATOR = "py_func_from_autograph"
METHOD_DECORATOR = "class_method_to_instance_method"  # polymorphic_function.Function.__get__'s, binding self
TRACED_SCOPES = (tracing_compilation.ScopeType.VARIABLE_CREATION, tracing_compilation.ScopeType.NO_VARIABLE_CREATION)
KerasStep = kerasstep.PredictStep | kerasfit.FitStep
KERAS_STEPS = (kerasstep.PredictStep, kerasfit.FitStep)  # never differentiated: custom gradients are harmless


def user_function(tracing_options: Any) -> types.FunctionType | KerasStep | instance.BoundMethod | None:
    """The user's Python function a tf.function traces, a method with its object (instance.py), or Keras' predict,
    train or test step (kerasstep.py, kerasfit.py); None for traces that are not a tf.function's (TensorFlow's
    own: variable initializers, control flow, ...). Raises Uncacheable for functions this slice leaves alone."""
    if tracing_options.scope_type == tracing_compilation.ScopeType.NO_SCOPE:
        return direct_function(tracing_options)
    if tracing_options.scope_type not in TRACED_SCOPES:
        return None
    decorators, target = tf_decorator.unwrap(tracing_options.python_function)
    names = [decorator.decorator_name for decorator in decorators]
    if not names or names[0] != SCOPE_DECORATOR:
        return None
    rest = names[1:]
    known = ([], [AUTOGRAPH_DECORATOR])
    if rest[:1] == [METHOD_DECORATOR]:  # tf.function's bound-method wrapper: a decorated method of an object
        rest = rest[1:]
        # After the first trace, autograph has swapped its conversion in as the wrapper's __wrapped__: a second one.
        known = (*known, [AUTOGRAPH_DECORATOR, AUTOGRAPH_DECORATOR])
    if rest not in known:
        raise Uncacheable("not_a_function", f"it is wrapped by {', '.join(rest)} (a decorator the key does not know)")
    if isinstance(target, types.MethodType):  # a decorated method, or tf.function(obj.method)
        return instance.bound_method(target)
    if not isinstance(target, types.FunctionType):
        raise Uncacheable("not_a_function", f"it traces a {type(target).__name__}, not a Python function")
    step: KerasStep | None = kerasstep.predict_step(target) or kerasfit.fit_step(target) or \
        kerasserve.serving_step(target)
    if step is not None:
        return step
    if is_library(getattr(target, "__module__", None) or ""):
        raise Uncacheable("library", f"{target.__module__}.{target.__qualname__} is library code (Keras, tf.data, ...)")
    return target


def direct_function(tracing_options: Any) -> types.FunctionType | instance.BoundMethod | None:
    """The function of a trace through ``tracing_compilation``'s own entry (``call_function``/``trace_function``
    with TracingOptions of no scope: no tf.function around it, so no autograph conversion and no variable-creator
    scope; keying.options_part keys that apart). TensorFlow's own such traces (control flow, forwardprop,
    initializers: library code) are left alone as before, uncounted; a user's Python function or method is keyed
    as a tf.function's is."""
    decorators, target = tf_decorator.unwrap(tracing_options.python_function)
    if is_library(getattr(target, "__module__", None) or ""):
        return None
    if decorators:
        names = ", ".join(decorator.decorator_name for decorator in decorators)
        raise Uncacheable("not_a_function", f"it is wrapped by {names} (a decorator the key does not know)")
    if isinstance(target, types.MethodType):
        return instance.bound_method(target)
    if not isinstance(target, types.FunctionType):
        raise Uncacheable("not_a_function", f"it traces a {type(target).__name__}, not a Python function")
    return target


class TraceCache:
    """The trace logic of one cache (one per process: see __init__.enable)."""

    def __init__(self, cache: EntryService) -> None:
        self.cache = cache
        self.verify = settings.trace_verify()
        self._identity_hash: str | None = None
        self._pending: dict[Any, building.Pending] = {}  # a first trace's build, until its retrace is cached

    def release(self) -> None:
        """Stop serving this process's traces (runtime.reset, a replacing enable): the wrapper passes them on."""
        plugins.release(PLUGIN, self)

    def identity_hash(self) -> str:
        if self._identity_hash is None:
            self._identity_hash = hash_json(self.cache.identity)
        return self._identity_hash

    def wait_for_writes(self, timeout: float | None = None) -> bool:
        return self.cache.wait_for_writes(timeout)

    # -- the wrapper -------------------------------------------------------------------------------------------
    def create(self, original: Any, function_type: Any, type_context: Any, func_graph: Any,
               tracing_options: Any) -> Any:
        """``_create_concrete_function`` through the cache (``original`` is TensorFlow's)."""
        def trace() -> Any:
            return original(function_type, type_context, func_graph, tracing_options)

        if ops.inside_function():  # a tf.function called while another is traced: part of that trace
            return self._nested(trace, function_type, tracing_options) if nested.frames() else trace()
        with collector_paused():  # see the module docstring: "The collector"
            created = self._create(trace, function_type, type_context, tracing_options)
        collect_young()
        return created

    def _create(self, trace: Any, function_type: Any, type_context: Any, tracing_options: Any) -> Any:
        # trace() runs outside every handler below: an error of the traced code is the program's, raised once (a
        # handler that traced again on it traced twice, and a RecursionError of a recursive tf.function nested in
        # its own trace was caught at every level and traced again: exponential, see _nested)
        keyed = self._keyed(function_type, tracing_options)
        if keyed is None:
            return trace()
        root, key, found, name = keyed
        if found is not None:
            served = self._hit(key, found, root, function_type, type_context, name, trace)
            if served is not None:
                return served
        return self._miss(key, root, trace, name)

    def _keyed(self, function_type: Any, tracing_options: Any) -> tuple[Any, keying.TraceKey, Any, str] | None:
        """The trace's root, key, stored entry (or None) and name; None when it is traced the plain way: not the
        program's function, refused (counted) or a failure to key it (warned)."""
        name = tracing_options.name
        try:
            root = user_function(tracing_options)
            if root is None:
                return None
            if isinstance(root, KERAS_STEPS):  # every model's step has the same name: ls tells them apart
                name = f"{name} ({root.model.name})"
            elif isinstance(root, instance.BoundMethod):  # so has every class's __call__
                name = f"{name} ({type(root.instance).__qualname__})"
            if isinstance(root, kerasfit.FitStep):  # its variables must exist before the key binds them
                kerasfit.build_state(root, function_type)
            root = keying.with_arguments(root, function_type)
            function_context_now = keying.check_context(tracing_options.scope_type)

            def compute() -> keying.TraceKey:
                return keying.compute(root, function_type, tracing_options, function_context_now, self.identity_hash())

            key, found = self._find(compute(), compute, name)
        except Uncacheable as exc:
            self._uncacheable(name, exc)
            return None
        except RecursionError:
            self._uncacheable(name, Uncacheable("value", "what it reads is nested too deeply to key"))
            return None
        except CacheIOError:
            raise
        except Exception as exc:  # a TensorFlow or Python surprise: never the user's problem
            self._failed(f"keying the trace of {name}", exc)
            return None
        return root, key, found, name

    # -- hit -----------------------------------------------------------------------------------------------
    def _hit(self, key: keying.TraceKey, found: tuple[codec.EntryHeader, stored.StoredTrace], root: Any,
             function_type: Any, type_context: Any, name: str, trace: Any) -> Any:
        """The stored trace restored, or None when it cannot be (then the function is traced)."""
        restored = self._restore(key, found, function_type, type_context, name, trace)
        if restored is None:
            return None
        concrete, seconds = restored
        stale = self._stale(key, found[1], trace, name) if self.verify else None
        if stale is not None:
            return stale
        # The optimizers its trace built (the fresh trace of GRAPHCACHE_TRACE_VERIFY built them already)
        if found[1].builds and not self.verify and not building.redo(key.walk, found[1].builds):
            return None
        # As its Python would have (a verified hit's fresh trace gave them itself; a replayed one's are its caller's)
        if not self.verify and not nested.replaying():
            warned.give(found[0].extra.get("warnings") or [])
            logged.give(found[0].extra.get("logged") or [])
        if found[0].extra.get("nested") and not self.verify:
            self._replay(found[0].extra["nested"], root, name)
        if isinstance(root, kerasserve.ServeStep):
            kerasserve.after_hit(root)
        elif isinstance(root, kerasstep.PredictStep):
            kerasstep.after_hit(root)
        elif isinstance(root, kerasfit.FitStep):
            kerasfit.after_hit(root)
        objects.after_hit(key.walk, found[1].called)  # the layers the trace called first (MultiHeadAttention's)
        self.cache.count_lookup(KIND, hits=1, saved_seconds=max(0.0, found[0].compile_seconds - seconds))
        log.info("graphcache trace hit %s key=%s %.3fs", name, key.key, seconds)
        self._flush(root)
        return concrete

    def _find(self, key: keying.TraceKey, compute: Any, name: str) -> tuple[keying.TraceKey, Any]:
        """The stored trace of ``key``. Where a first trace's build is stored there instead (building.py), the
        optimizers are built before the trace as it says, and the trace is keyed and looked up again."""
        found = self._lookup(key)
        if found is None or not isinstance(found[1], building.Recipe):
            return key, found
        try:
            applied = building.apply(key.walk, found[1])
        except ValueError as exc:  # built, but not as the entry says: a damaged entry; key what there is now
            self.cache.discard_corrupt(key.key, CorruptEntryError(f"the stored build of {name}: {exc}"))
            applied = True
        if not applied:
            return key, None
        log.info("graphcache trace %s: built %s before its first trace, as the stored one did", name,
                 ", ".join(build.optimizer for build in found[1].builds))
        key = compute()
        found = self._lookup(key)
        return key, None if found is None or isinstance(found[1], building.Recipe) else found

    def _lookup(self, key: keying.TraceKey) -> tuple[codec.EntryHeader, Any] | None:
        """The entry of ``key``: a stored trace, or a first trace's build (building.Recipe)."""
        entry = self.cache.read_entry(key.key, kind=KIND)
        if entry is None:
            return None
        header, payload = entry
        try:
            return header, building.decode(payload) if building.is_recipe(payload) else stored.decode(payload)
        except CorruptEntryError as exc:
            self.cache.discard_corrupt(key.key, exc)
            return None

    def _restore(self, key: keying.TraceKey, found: tuple[codec.EntryHeader, stored.StoredTrace], function_type: Any,
                 type_context: Any, name: str, fresh_trace: Any) -> tuple[Any, float] | None:
        trace = found[1]
        captures = stored.bind(trace, key.walk.bindings)
        if captures is None:  # the key covers every capture's dtype and shape: only a damaged entry gets here
            self.cache.discard_corrupt(key.key, CorruptEntryError("its captures do not fit this process's objects"))
            return None
        def graph_failed(exc: BaseException) -> Any:  # the lazy graph, built later, did not build: trace instead
            self._failed(f"building the graph of the cached trace of {name}", exc)
            self.cache.discard_corrupt(key.key, CorruptEntryError(
                f"the stored trace of {name} does not build a graph ({type(exc).__name__}: {exc})"))
            return fresh_trace()

        start = time.perf_counter()
        try:
            concrete = stored.restore(trace, captures, function_type, type_context, graph_failed)
        except CacheIOError:
            raise
        except Exception as exc:
            self.cache.discard_corrupt(key.key, CorruptEntryError(
                f"the stored trace of {name} does not restore ({type(exc).__name__}: {exc})"))
            return None
        return concrete, time.perf_counter() - start

    def _stale(self, key: keying.TraceKey, trace: stored.StoredTrace, fresh_trace: Any, name: str) -> Any:
        """GRAPHCACHE_TRACE_VERIFY: trace anyway and compare; the fresh trace when they differ, else None."""
        fresh = fresh_trace()
        problems = []
        if trace.canonical_hash() != stored.fresh_hash(fresh):
            problems.append("its function library differs")
        try:
            described = stored.describe(fresh, key.walk.bindings)
            if described.captures != trace.captures:
                problems.append(f"its captures differ ({trace.captures} stored, {described.captures} traced)")
            if (described.inputs, described.outputs) != (trace.inputs, trace.outputs):
                problems.append("its input or output signature differs")
        except Uncacheable as exc:
            problems.append(f"a fresh trace is not cacheable ({exc})")
        if not problems:
            log.info("graphcache: trace hit %s verified against a fresh trace", name)
            return None
        log.error("graphcache: the cached trace of %s (entry %s) differs from a fresh trace: %s; using the fresh "
                  "trace and removing the entry", name, key.key, "; ".join(problems))
        self.cache.discard_corrupt(key.key, CorruptEntryError(f"a stale trace of {name}: {'; '.join(problems)}"))
        return fresh

    def _replay(self, noted: list[dict[str, Any]], root: Any, name: str) -> None:
        """The tf.functions the stored trace traced inside itself, made as that trace made them (nested.py)."""
        try:
            nested.replay(noted, root)
        except CacheIOError:
            raise
        except Exception as exc:
            self._failed(f"tracing the tf.functions {name} calls", exc)

    def _nested(self, trace: Any, function_type: Any, tracing_options: Any) -> Any:
        """A tf.function traced inside a miss's trace: keyed as its top-level call would be, stored, and noted in
        the miss's entry (nested.py); else traced as part of that trace, as ever. Traced outside the handlers of
        ``_nested_keyed``: a recursive tf.function (TensorFlow's test_recursive_tf_function_with_cond) reaches the
        recursion limit in its trace, and a handler that traced again on that RecursionError did so at every
        level, twice each: plain TensorFlow raises it at once, graphcache never ended."""
        keyed = self._nested_keyed(function_type, tracing_options)
        if keyed is None:
            return trace()
        root, key, found, name = keyed
        return trace() if found is not None else self._miss(key, root, trace, name, counted=False)

    def _nested_keyed(self, function_type: Any, tracing_options: Any
                      ) -> tuple[Any, keying.TraceKey, Any, str] | None:
        """A nested trace's root, key, stored entry (or None) and name, noted in the outer trace's frame; None when
        it is traced as part of that trace only."""
        frame = nested.frames()[-1]
        try:
            root = user_function(tracing_options)
            if root is None or isinstance(root, KERAS_STEPS):
                return None
            where, args = nested.locate(frame.root, root), nested.arguments(function_type)
            if where is None or args is None:
                return None
            function = root.function if isinstance(root, instance.BoundMethod) else root
            name = f"{tracing_options.name} ({type(root.instance).__qualname__})" \
                if isinstance(root, instance.BoundMethod) else tracing_options.name
            # Keyed as its top-level call would be, in eager mode; graphcache's reads are not the outer trace's
            with ops.init_scope(), recording.paused():
                context_now = keying.check_context(tracing_options.scope_type, nested=True)
                key = keying.compute(root, function_type, tracing_options, context_now, self.identity_hash())
                found = self._lookup(key)
            nested.check_context(tracing_options.scope_type, context_now)
        except (Uncacheable, RecursionError) as exc:
            log.debug("graphcache: the nested trace of %s is not cached: %s", tracing_options.name, exc)
            return None
        except CacheIOError:
            raise
        except Exception as exc:
            self._failed(f"keying the nested trace of {tracing_options.name}", exc)
            return None
        frame.noted.append({"where": where, "qualname": function.__qualname__,
                            "args": nested.encode_arguments(args)})
        return root, key, found, name

    # -- miss ----------------------------------------------------------------------------------------------
    def _miss(self, key: keying.TraceKey, root: Any, trace: Any, name: str, counted: bool = True) -> Any:
        """Trace, and store what the key proves; ``counted``: False for a nested trace (nested.py), which is part of
        its caller's trace and is neither counted nor learned from."""
        created: list[Any] = []

        def note_creation(next_creator: Any, **kwargs: Any) -> Any:
            variable = next_creator(**kwargs)
            created.append(variable)
            return variable

        before = objects.before_trace(key.walk)
        optimizers = building.unbuilt(key.walk)
        start = time.perf_counter()
        with nested.tracing(nested.Frame(root)) as frame, variable_scope.variable_creator_scope(note_creation), \
                recording.record() as record, warned.recorded() as given, logged.recorded() as records:
            concrete = trace()
        seconds = time.perf_counter() - start
        try:
            if created:
                if counted:
                    self._learn(key, root, optimizers, created, objects.calls(key.walk, before), name, seconds)
                names = ", ".join(str(getattr(variable, "name", "variable")) for variable in created)
                raise Uncacheable("creates_variables", f"its trace creates variables ({names})")
            described = self._describe(key, root, concrete, record, before, optimizers)
            described.warnings, described.logged, described.nested = given, records, frame.noted
        except Uncacheable as exc:
            self._uncacheable(name, exc, counted)
            return concrete
        except CacheIOError:
            raise
        except Exception as exc:
            self._failed(f"describing the trace of {name}", exc)
            return concrete
        if counted:
            self.cache.count_lookup(KIND, misses=1, compiles=1, compile_seconds=seconds)
        if self.cache.read_only:
            if counted:
                self.cache.count_uncacheable("read_only")
            return concrete
        if counted:
            self._flush(root)
        if self.cache.strict:  # failures must reach the caller
            with recording.paused():  # a nested trace's entry is written inside the outer trace: not its doing
                self._store(key, described, concrete, seconds, name)
        else:  # reading the library and writing the entry overlap with the caller's first call
            handed_over = threading.Lock()
            handed_over.acquire()
            self.cache.start_write(self._store_fail_open, key, described, concrete, seconds, name, lock=handed_over,
                                   key=key.key)
        return concrete

    def _describe(self, key: keying.TraceKey, root: Any, concrete: Any, record: recording.Record,
                  before: dict[Any, Any], optimizers: dict[str, Any]) -> stored.Described:
        """A miss's fresh trace as its entry holds it; raises Uncacheable for what its key does not prove."""
        builds = building.built_in_trace(key.walk, optimizers)
        problems = record.problems()
        if problems:
            raise Uncacheable("recorded", f"while tracing it {'; '.join(problems)} (not in its key)")
        if not keying.same_reads(key.walk, root, before):
            raise Uncacheable("side_effect", "its trace changed a value it reads (appended to a list, ...)")
        described = stored.describe(concrete, key.walk.bindings)
        # A SavedModel's serving function may be differentiated once loaded: not forward only
        described.forward_only = isinstance(root, KERAS_STEPS) and not isinstance(root, kerasserve.ServeStep)
        described.called = objects.calls(key.walk, before)
        described.builds = builds
        return described

    # -- a first trace's build (building.py) -------------------------------------------------------------------
    def _learn(self, key: keying.TraceKey, root: Any, optimizers: dict[str, Any], created: list[Any],
               called: list[str], name: str, seconds: float) -> None:
        """Note what a first trace built, to store once its retrace is cached (``_flush``); nothing when the
        variables it created are not exactly its optimizers' builds."""
        try:
            recipe = building.learn(key.walk, optimizers, created, called)
        except Uncacheable as exc:
            log.info("graphcache: the first trace of %s builds no optimizer alone: %s", name, exc.detail)
            return
        self._pending[_identity(root)] = building.Pending(key, recipe, name, root, seconds)
        if isinstance(root, kerasfit.FitStep):  # Keras' train function is traced once: no retrace comes to wait for
            self._flush(root)

    def _flush(self, root: Any) -> None:
        """Store the build noted at this function's first trace: its retrace was just cached or hit."""
        pending = self._pending.pop(_identity(root), None)
        if pending is None or self.cache.read_only:
            return
        if self.cache.strict:
            self._store_build(pending)
        else:
            self.cache.start_write(self._store_build, pending, key=pending.key.key)

    def _store_build(self, pending: building.Pending) -> None:
        key = pending.key
        header = codec.EntryHeader(
            key=key.key, version=self.cache.version, identity=self.cache.identity, name=f"{pending.name} (build)",
            kind=KIND, created=time.time(), compile_seconds=pending.seconds, key_parts=key.parts,
            extra={"build": [build.optimizer for build in pending.recipe.builds], "guards": key.guards})
        if self.cache.write_entry(header, building.encode(pending.recipe)):
            log.info("graphcache trace build stored %s key=%s", pending.name, key.key)

    def _store_fail_open(self, key: keying.TraceKey, described: stored.Described, concrete: Any, seconds: float,
                         name: str) -> None:
        try:
            with collector_paused():  # see the module docstring: "The collector"
                self._store(key, described, concrete, seconds, name)
        except Exception as exc:
            self._failed(f"storing the trace of {name}", exc)

    def _store(self, key: keying.TraceKey, described: stored.Described, concrete: Any, seconds: float,
               name: str) -> None:
        """Write the entry (``concrete`` is held so that its functions stay in the eager context meanwhile)."""
        del concrete
        self._record_miss(name, key)
        library = stored.library_of(described.name)
        try:
            stored.check_graph(library, forward_only=described.forward_only)
        except Uncacheable as exc:
            self._uncacheable(name, exc)
            return
        payload = stored.encode(described, library)
        header = codec.EntryHeader(
            key=key.key, version=self.cache.version, identity=self.cache.identity, name=name, kind=KIND,
            created=time.time(), compile_seconds=seconds, key_parts=key.parts,
            extra={"function": described.name, "functions": len(library.function),
                   "nodes": sum(len(fdef.node_def) for fdef in library.function), "captures": len(described.captures),
                   "guards": key.guards, **({"warnings": described.warnings} if described.warnings else {}),
                   **({"logged": described.logged} if described.logged else {}),
                   **({"nested": described.nested} if described.nested else {})})
        if self.cache.write_entry(header, payload):
            log.info("graphcache trace stored %s key=%s %.3fs", name, key.key, seconds)

    # -- refusals and failures -----------------------------------------------------------------------------
    def _uncacheable(self, name: str, exc: Uncacheable, counted: bool = True) -> None:
        log.info("graphcache: the trace of %s is not cached (%s): %s", name, exc.reason, exc.detail)
        if not counted:  # a nested trace (nested.py): its caller's trace is what is counted
            return
        self.cache.count(**{TRACE_UNCACHEABLE: 1, f"{TRACE_UNCACHEABLE}.{exc.reason}": 1})
        detail = f"trace not cacheable ({exc.reason}): {exc.detail}"
        if self.cache.strict:
            self._record_miss(name, None, detail)
        else:  # off the caller's path: the first record opens the index, e.g. in a SavedModel's first call
            self.cache.start_write(self._record_miss, name, None, detail)

    def _record_miss(self, name: str, key: keying.TraceKey | None, detail: str = "") -> None:
        """``graphcache misses``: a trace that missed, with the key parts and the reads (guards: ``g:SCALE 2.0 -> 3.0``)
        it differs in from the newest stored trace of the same name, or one that could not be cached, with why.
        Best effort: the index may be busy."""
        if self.cache.index is None or self.cache.read_only:
            return
        nearest, differs = None, ()
        try:
            from ..core.index import misses

            if key is not None:
                rows = self.cache.index.rows("kind = ? AND name = ? AND key != ?", (KIND, name, key.key),
                                             order="created DESC LIMIT 1")
                header = self.cache.entry_header(rows[0].key) if rows else None
                if header is not None:
                    nearest = header.key
                    differs = tuple(part for part in keying.PART_ORDER if header.key_parts.get(part) != key.parts[part])
                    changes = keying.guard_changes(header.extra.get("guards") or {}, key.guards)
                    detail = "; ".join(changes)
                    log.info("graphcache trace miss %s: differs from the stored trace %s in %s%s", name, nearest,
                             ", ".join(differs), f" ({detail})" if detail else "")
            self.cache.record_miss(misses.Miss(time.time(), f"tf.function {name}", key.key if key else "",
                                               nearest, differs, detail))
        except Exception:  # an explanation is never worth a failed trace
            log.debug("graphcache: recording the trace miss of %s failed", name, exc_info=True)

    def _failed(self, what: str, exc: BaseException) -> None:
        """An unexpected failure of graphcache's own: strict raises, else warn once and count."""
        self.cache.failure("trace_error", what, exc, consequence="the function is traced without the cache",
                           uncacheable=False)


def _identity(root: Any) -> Any:
    """What a function's first trace and its retrace share: the user's function (a method: with its object)."""
    if isinstance(root, keying.Arguments):
        return _identity(root.root), tuple(id(obj) for _, obj in root.objects)
    if isinstance(root, instance.BoundMethod):
        return id(root.instance), id(root.function)
    return id(root)
