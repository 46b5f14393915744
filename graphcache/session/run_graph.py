"""The private run graph of a graphcache.Session: compiled signatures side by side, weights shared, names mapped back.

Each compiled signature is imported into one tf.Graph under its own scope (``graphcache_N/``) and run by
one plain session. Two things make that graph as faithful and as small as running the user's graph:

- **Constants are shared across signatures.** Every signature of a frozen model compiles to a graph that
  holds all of its weights; imported as they are, four signatures of ResNet50 would hold four copies.
  A constant that an earlier signature already imported (same dtype, shape, device and bytes) is left
  out of the next import and its consumers are wired to the existing node (``input_map``). Only
  constants of at least ``MIN_SHARED_BYTES`` are compared: below that the bookkeeping costs more than it
  saves. The first signature is imported from its bytes untouched (no parse): sharing costs nothing
  until a second signature arrives.
- **Names are the user's.** TensorFlow reports an error with the run graph's node names
  (``graphcache_3/x``); ``user_message`` rewrites them to the user's names, and ``user_node`` maps one
  run-graph node to the user's op (by name, then by Grappler's naming of the nodes it creates), the one
  place where a structural mapping can plug in later.

The session that runs the graph is ``PlainSession``: TensorFlow's own class under another name, which
``graphcache.install()`` (it redirects TensorFlow's exact class, never a subclass) leaves alone.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
import xxhash
from tensorflow.core.framework import graph_pb2
from tensorflow.python.client import session as tf_session_lib

MIN_SHARED_BYTES = 1024

# Grappler names the nodes it adds after the node they replace: "<scope>/ConstantFolding/<name>",
# "<scope>/ArithmeticOptimizer/<Rewrite>_<name>", "<name>-0-TransposeNHWCToNCHW-LayoutOptimizer", ...
_OPTIMIZER_SEGMENT = re.compile(r"(^|/)(?:[A-Za-z]*Optimizer|ConstantFolding|Remapper|Pruning)/(?:\w+?_(?=[^/]))?")
_OPTIMIZER_SUFFIX = re.compile(r"-\d+-\w+-LayoutOptimizer$|/_\d+$|_\d+_folded$")
# Ops that find their state by their node name when their shared_name is empty (pin_shared_names)
_STATEFUL_NAMED = frozenset({"VariableV2", "Variable", "VarHandleOp", "TemporaryVariable"})


def shares_state(op_types: set[str]) -> bool:
    """Whether a graph with these op types may hold state that pin_shared_names must name (variables, or
    any op with a ``shared_name`` attribute; unknown op types, such as function calls, count as such)."""
    from tensorflow.python.framework import op_def_registry

    for op in op_types:
        op_def = op_def_registry.get(op)
        if op in _STATEFUL_NAMED or op_def is None or any(
                attr.name in ("shared_name", "use_node_name_sharing") for attr in op_def.attr):
            return True
    return False


def pin_shared_names(graph_def) -> None:
    """Give stateful nodes with an empty shared_name their node name, so scoped copies share state.

    TensorFlow resolves such a node's state by node name, which the import scope would change.
    """
    for node in graph_def.node:
        named_by_node = node.op in _STATEFUL_NAMED or "shared_name" in node.attr
        if named_by_node and not node.attr["shared_name"].s:
            node.attr["shared_name"].s = node.name.encode()
        if node.attr.get("use_node_name_sharing") is not None and node.attr["use_node_name_sharing"].b:
            node.attr["use_node_name_sharing"].b = False


class PlainSession(tf_session_lib.Session):
    """tf.compat.v1.Session as it is: what runs the run graph (install() redirects only the exact class)."""


@dataclass(frozen=True)
class Imported:
    """One compiled signature imported into the run graph under ``scope``."""

    scope: str
    key_source: Any  # the entry's key, or the PendingKey that computes it when first read (CompiledGraph's)
    hit: bool
    variant: str = ""  # "" for the original precision, else the mixed-precision rewriter's name
    loss_scaled: bool = False  # feeds accelerate.LOSS_SCALE_FEED and fetches accelerate.ALL_FINITE_FETCH

    @property
    def key(self) -> str:
        return self.key_source if isinstance(self.key_source, str) else self.key_source.key

    def name(self, original: str) -> str:
        return f"{self.scope}/{original}"


class RunGraph:
    """The run graph, its session, the constants its signatures share, and the way back to user names."""

    def __init__(self, target: Any, config: Any) -> None:
        self.graph = tf.Graph()
        self._target, self._config = target, config
        self._session: PlainSession | None = None  # created at first use (see ``session``)
        self._session_lock = threading.Lock()
        self._lock = threading.Lock()
        self._scopes: list[str] = []
        self._scope_pattern: re.Pattern[str] | None = None
        # (dtype, shape, device) -> names of large constants already in the graph; their content hashes
        self._constants: dict[tuple, list[str]] = {}
        self._hashes: dict[str, str] = {}
        self._indexed = 0  # how many of the graph's operations _index_constants has looked at
        # The write gates of misses imported here: their entries are written once a run is over
        # (CompiledGraph.write_gate), not while the import and the first run need the GIL. The gates, not the
        # CompiledGraphs: those hold a second copy of the graph's bytes.
        self._unwritten: list[threading.Event] = []

    @property
    def session(self) -> PlainSession:
        """The run graph's TensorFlow session, created at its first use: a graphcache.Session whose graphs all
        run the plain way (small graphs, uncacheable ones) never pays for a second session (its devices,
        thread pools) on top of its own."""
        session = self._session
        if session is None:
            with self._session_lock:
                if self._session is None:
                    self._session = PlainSession(self._target, graph=self.graph, config=self._config)
                session = self._session
        return session

    # -- importing ------------------------------------------------------------------------------------------
    def add(self, compiled: Any, scope: str, keep: set[str], graph_def: Any = None) -> None:
        """Import ``compiled`` under ``scope``, sharing large constants with what is already here.

        ``keep``: node names that must stay (the signature's feeds, fetches and targets). ``graph_def``: the
        compiled GraphDef when the caller has parsed (and maybe edited) it; else it is parsed only when a
        constant can be shared.
        """
        with self._lock:
            if not self._scopes and graph_def is None:
                compiled.import_into(self.graph, name=scope)  # from its bytes: nothing to share yet
            else:
                self._import_sharing(graph_def if graph_def is not None else compiled.graph_def, scope, keep)
            self._scopes.append(scope)
            if compiled.write_gate is not None:
                self._unwritten.append(compiled.write_gate)
            self._scope_pattern = re.compile(
                r"(?<![\w./-])(?:" + "|".join(re.escape(s) for s in self._scopes) + r")/")

    def _import_sharing(self, graph_def: Any, scope: str, keep: set[str]) -> None:
        candidates = {node.name: node for node in graph_def.node
                      if node.op == "Const" and not node.input and node.name not in keep
                      and node.attr["value"].tensor.ByteSize() >= MIN_SHARED_BYTES}
        for node in graph_def.node:  # a control edge cannot be rewired through input_map
            for ref in node.input:
                if ref.startswith("^"):
                    candidates.pop(ref[1:], None)
        self._index_constants()
        input_map = {}
        for name, node in candidates.items():
            existing = self._shared_constant(node)
            if existing is not None:
                input_map[f"{name}:0"] = self.graph.get_tensor_by_name(f"{existing}:0")
        if input_map:
            shared = {ref.rpartition(":")[0] for ref in input_map}
            reduced = graph_pb2.GraphDef()
            reduced.versions.CopyFrom(graph_def.versions)
            reduced.library.CopyFrom(graph_def.library)
            reduced.node.extend(node for node in graph_def.node if node.name not in shared)
            graph_def = reduced
        with self.graph.as_default():
            tf.graph_util.import_graph_def(graph_def, input_map=input_map or None, name=scope)

    def _index_constants(self) -> None:
        """Index the large constants imported since the last call by (dtype, shape, device)."""
        operations = self.graph.get_operations()
        for op in operations[self._indexed:]:
            if op.type != "Const" or op.inputs or op.control_inputs:
                continue
            output = op.outputs[0]
            if output.dtype == tf.string or not output.shape.is_fully_defined():
                continue
            if output.shape.num_elements() * output.dtype.size < MIN_SHARED_BYTES:
                continue
            key = (output.dtype.as_datatype_enum, tuple(output.shape.as_list()), op.device)
            self._constants.setdefault(key, []).append(op.name)
        self._indexed = len(operations)

    def _shared_constant(self, node: Any) -> str | None:
        """The name of a constant in the graph equal to ``node`` (a NodeDef), or None."""
        tensor = node.attr["value"].tensor
        shape = tuple(dim.size for dim in tensor.tensor_shape.dim)
        names = self._constants.get((tensor.dtype, shape, node.device))
        if not names:
            return None
        digest = _tensor_digest(tensor)
        for name in names:
            known = self._hashes.get(name)
            if known is None:
                known = self._hashes[name] = _tensor_digest(self.graph.get_operation_by_name(name).get_attr("value"))
            if known == digest:
                return name
        return None

    # -- running (raw: errors name run-graph nodes; the session maps them) ------------------------------------
    def run(self, options: Any, feeds: dict, fetches: list, targets: list, run_metadata: Any) -> list:
        session = self.session
        session._extend_graph()  # what BaseSession._do_run does before TF_SessionRun
        try:
            return session._call_tf_sessionrun(options, _outputs(feeds), [t._as_tf_output() for t in fetches],
                                               [op._c_op for op in targets], run_metadata)
        finally:
            self._first_runs_done()

    def _first_runs_done(self) -> None:
        """Let the entries of the misses imported so far be written (partial runs and callables: at set-up)."""
        while self._unwritten:
            self._unwritten.pop().set()

    def partial_run_setup(self, feeds: list, fetches: list, targets: list) -> str:
        self._first_runs_done()
        session = self.session
        session._extend_graph()
        return tf_session_lib.tf_session.TF_SessionPRunSetup_wrapper(
            session._session, [t._as_tf_output() for t in feeds], [t._as_tf_output() for t in fetches],
            [op._c_op for op in targets])

    def partial_run(self, handle: str, feeds: dict, fetches: list) -> list:
        return self.session._call_tf_sessionprun(handle, _outputs(feeds), [t._as_tf_output() for t in fetches])

    def make_callable(self, callable_options: Any, user_graph: Any) -> MappedCallable:
        """A TensorFlow callable (``Session._make_callable_from_options``) on the run graph, whose errors
        name ``user_graph``'s nodes."""
        self._first_runs_done()
        return MappedCallable(self.session._make_callable_from_options(callable_options), self, user_graph)

    def close(self) -> None:
        self._first_runs_done()
        if self._session is not None:
            self._session.close()

    # -- the way back to the user's graph ------------------------------------------------------------------------
    def user_name(self, run_name: str) -> str:
        """``run_name`` without the scope of the signature it belongs to."""
        pattern = self._scope_pattern
        return pattern.sub("", run_name, count=1) if pattern is not None else run_name

    def user_message(self, message: str, user_graph: Any) -> str:
        """A TensorFlow error message with every run-graph name replaced by the user's name.

        A ``{{node X}}`` tag that names a node Grappler created is rewritten to the user's node it stands
        for when one can be named (``user_node``), so TensorFlow's own error mapping finds the user's op.
        """
        pattern = self._scope_pattern
        if pattern is None:
            return message
        message = pattern.sub("", message)

        def tag(match: re.Match[str]) -> str:
            op = user_node(match[2], user_graph)
            return f"{match[1]}{op.name if op is not None else match[2]}{match[3]}"

        return re.sub(r"(\{\{node )([^} ]+)(\}\})", tag, message)


class MappedCallable:
    """A TensorFlow callable on the run graph whose errors name the user's nodes (``op`` is None, as
    TensorFlow's own callables raise them)."""

    def __init__(self, inner: Any, run_graph: RunGraph, user_graph: Any) -> None:
        self._inner, self._run_graph, self._user_graph = inner, run_graph, user_graph

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._inner(*args, **kwargs)
        except tf.errors.OpError as exc:
            raise retyped(exc, self._run_graph.user_message(exc.message, self._user_graph)) from None


def retyped(exc: Any, message: str) -> Any:
    """``exc`` (a tf.errors.OpError) as the same class with ``message`` and no op (TensorFlow maps it then)."""
    try:
        return type(exc)(None, None, message)
    except TypeError:  # OpError itself also takes the error code
        return tf.errors.OpError(None, None, message, exc.error_code)


def user_node(name: str, user_graph: Any) -> Any:
    """The user's op that the (scope-stripped) run-graph node ``name`` stands for, or None.

    By name first; else by the names Grappler gives the nodes it creates (an optimizer segment, a layout or
    folding suffix). This is the hook for a structural mapping (compiled entries shared between graphs that
    differ only in node names).
    """
    candidates = [name, _OPTIMIZER_SEGMENT.sub(r"\1", name, count=1), _OPTIMIZER_SUFFIX.sub("", name)]
    for candidate in candidates:
        try:
            return user_graph.get_operation_by_name(candidate)
        except (KeyError, ValueError):
            continue
    return None


def _outputs(feeds: dict) -> dict:
    return {ref.deref()._as_tf_output(): value for ref, value in feeds.items()}


def _tensor_digest(tensor: Any) -> str:
    return xxhash.xxh3_128_hexdigest(tensor.SerializeToString(deterministic=True))

