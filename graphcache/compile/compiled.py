"""CompiledGraph: what a compile returns, and how an optimized graph is run without compiling it again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tensorflow.core.framework import graph_pb2
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

from . import importing
from .graphs import Signature


def runtime_config(config: Any = None) -> config_pb2.ConfigProto:
    """A copy of ``config`` with the meta-optimizer and the classic graph optimizer off.

    The graph was already compiled by Grappler: running the optimizers again would pay the compile a
    second time (the very cost the cache removes).
    """
    out = config_pb2.ConfigProto()
    if config is not None:
        out.CopyFrom(config)
    out.graph_options.rewrite_options.disable_meta_optimizer = True
    out.graph_options.rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    out.graph_options.optimizer_options.opt_level = config_pb2.OptimizerOptions.L0
    out.graph_options.optimizer_options.do_constant_folding = False
    out.graph_options.optimizer_options.do_common_subexpression_elimination = False
    return out


class PendingKey:
    """A graph's canonical key, computed once by whoever needs it first: the entry's write in the background or
    a caller reading ``CompiledGraph.key`` (cache.py: a first-ever run's miss leaves it off the caller's path).

    Once the write has taken the fingerprint, only the key is kept: a fingerprint's node summaries reach into
    the source graph, and a protobuf sub-message keeps its whole GraphDef alive (a frozen model's weights, for
    as long as the CompiledGraph or a Session's signature lives)."""

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute: Callable[[], Any] | None = compute  # holds the source graph until it has run
        self._fingerprint: Any = None  # keys.Fingerprint, until the write takes it
        self._key: str | None = None
        self._lock = threading.Lock()

    def _computed(self) -> Any:
        if self._fingerprint is None and self._key is None:
            assert self._compute is not None
            self._fingerprint, self._compute = self._compute(), None  # what it held (the graph) is let go
            self._key = self._fingerprint.key
        return self._fingerprint

    def start(self) -> None:
        """Compute the key in a thread now (priority.start_early): a Session's first-ever miss starts it before
        TensorFlow's run compiles the graph, so that the graph can be let go once keyed (cache.py)."""
        from ..core import priority

        priority.start_early(self._compute_now, "graphcache-key")

    def _compute_now(self) -> None:
        with self._lock:
            if self._compute is not None:  # not taken or computed yet
                fingerprint = self._computed()
                # and the node summaries the write's miss hook reads (explain/'s node table), while it is idle
                _ = fingerprint.details

    def take_fingerprint(self) -> Any:
        """The fingerprint, for the entry's write (once): computed here if no caller has read the key."""
        with self._lock:
            fingerprint, self._fingerprint = self._computed(), None
            assert fingerprint is not None, "the fingerprint was taken already"
            return fingerprint

    @property
    def key(self) -> str:
        with self._lock:
            self._computed()
            assert self._key is not None
            return self._key

    def __str__(self) -> str:  # log lines format it only when they are emitted
        return self.key


class CompiledGraph:
    """The result of ``GraphCache.compile``.

    ``compile_seconds`` is the original compile's time, also on a hit (so a hit can say what it saved).

    The compiled graph is held serialized when that is how it arrived (a hit's payload, a fresh compile's
    entry bytes): ``graph_def`` parses it on first access only, and ``import_graph``/``session`` hand the
    bytes straight to TensorFlow's importer (importing.py). For a big frozen model that skips a parse
    and a re-serialization, most of what importing costs. Once ``graph_def`` has been read (the caller may
    have changed it), imports use the GraphDef instead.
    """

    def __init__(self, key: str | PendingKey, hit: bool, graph_def: graph_pb2.GraphDef | None,
                 compile_seconds: float, name: str, signature: Signature, *, serialized: bytes | None = None,
                 write_gate: threading.Event | None = None) -> None:
        if graph_def is None and serialized is None:
            raise ValueError("a CompiledGraph needs its graph_def or its serialized bytes")
        self.key_source = key  # the key, or the PendingKey that computes it when first read
        self.hit = hit
        self.compile_seconds = compile_seconds
        self.name = name
        self.signature = signature
        self._graph_def = graph_def
        self._serialized = serialized
        self._exposed = False  # graph_def handed out: it may have been edited, the bytes may be stale
        self._lock = threading.Lock()
        self._write_gate = write_gate  # a miss's entry write, a hit's use and count wait for it (core/background.py)

    @property
    def key(self) -> str:
        """The entry's key ("" when the cache was bypassed)."""
        return self.key_source if isinstance(self.key_source, str) else self.key_source.key

    @property
    def write_gate(self) -> threading.Event | None:
        """What this graph's background write waits for (``first_run_done`` sets it): a miss's entry, a hit's
        use and count (core/usage.py); None when nothing waits (written before ``compile()`` returned)."""
        return self._write_gate

    def first_run_done(self) -> None:
        """Say that the first run of this graph is over: a miss whose entry is written in the background
        starts writing now, rather than competing with the import and the first run (as does a hit's index
        update; either also starts after a grace of at most a few seconds, and when the cache is flushed).
        ``session()`` and graphcache.Session call it themselves; call it when you import ``graph_def``
        yourself."""
        if self._write_gate is not None:
            self._write_gate.set()

    def __repr__(self) -> str:
        return (f"CompiledGraph(key={self.key!r}, hit={self.hit}, name={self.name!r}, "
                f"compile_seconds={self.compile_seconds:.3f})")

    @property
    def graph_def(self) -> graph_pb2.GraphDef:
        """The compiled GraphDef (parsed from the serialized bytes on first access)."""
        with self._lock:
            if self._graph_def is None:
                self._graph_def = graph_pb2.GraphDef.FromString(self._serialized)
            self._exposed = True
            return self._graph_def

    def _fresh_bytes(self) -> bytes | None:
        """The serialized graph when it is known to match what ``graph_def`` would give, else None."""
        with self._lock:
            return None if self._exposed else self._serialized

    @property
    def feeds(self) -> tuple[str, ...]:
        return self.signature.feeds

    @property
    def fetches(self) -> tuple[str, ...]:
        return self.signature.fetches

    @property
    def targets(self) -> tuple[str, ...]:
        return self.signature.targets

    def op_types(self) -> set[str]:
        """Every op type of the compiled graph (safety.graph_ops), read from the bytes when it has them."""
        from . import safety

        data = self._fresh_bytes()
        return importing.wire_op_types(data) if data is not None else safety.graph_ops(self.graph_def)

    def import_into(self, graph: Any, name: str = "") -> None:
        """Import the compiled graph into ``graph`` under the scope ``name`` ("" keeps node names)."""
        data = self._fresh_bytes()
        if data is not None:
            try:
                importing.import_serialized(graph, data, name=name)
                return
            except importing.FastImportUnavailable:
                pass  # another TensorFlow: the public importer below does the same, slower
        import tensorflow as tf

        with graph.as_default():
            tf.graph_util.import_graph_def(self.graph_def, name=name)

    def import_graph(self):
        """A new tf.Graph holding the compiled graph (node names unchanged)."""
        import tensorflow as tf

        graph = tf.Graph()
        self.import_into(graph)
        return graph

    def session(self, config: Any = None, target: str = ""):
        """A tf.compat.v1.Session on the compiled graph, with the optimizers off. Its first ``run`` ends with
        ``first_run_done()``."""
        import tensorflow as tf

        session = tf.compat.v1.Session(target, graph=self.import_graph(), config=runtime_config(config))
        if self._write_gate is not None and not self._write_gate.is_set():
            _open_after_first_run(session, self._write_gate)
        return session


def _open_after_first_run(session: Any, gate: threading.Event) -> None:
    """Shadow ``session.run`` with a wrapper that opens ``gate`` after the first call and then removes
    itself (the instance attribute goes; the class's ``run`` is found again)."""
    run = session.run

    def first_run(*args: Any, **kwargs: Any) -> Any:
        try:
            return run(*args, **kwargs)
        finally:
            gate.set()
            session.__dict__.pop("run", None)

    session.run = first_run
