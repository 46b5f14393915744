"""accelerate_train_mode: train the first part at reduced precision, the rest at the original precision.

``ExperimentalConfig(accelerate_train_mode="fast1|step|0.9")`` (parsing: graphcache/config.py) makes a
``graphcache.Session`` compile each *training* signature a second time, with one of Grappler's
mixed-precision rewriters on, and run that variant until the split is reached:

=====  ======================================  ===========================================
TYPE   CPU                                     GPU
=====  ======================================  ===========================================
fast   auto_mixed_precision_cpu (float16,      auto_mixed_precision (float16)
       emulated: fidelity, not speed)
fast1  auto_mixed_precision_onednn_bfloat16    float16 + one warning (Grappler's bfloat16
       (bfloat16, oneDNN)                      rewriter only rewrites CPU nodes)
=====  ======================================  ===========================================

The rewriter goes into the compile options (a copy of the session's ConfigProto), so each precision
variant is its own cache entry. Grappler's mixed-precision passes place unplaced nodes with its virtual
placer (the cluster's default device), so the graph is compiled as it is, unplaced: verified on CPU,
where an unplaced graph gets its MatMuls in bfloat16.

Which signatures: those whose fan-in trains, i.e. holds an optimizer update (``Apply*`` /
``ResourceApply*`` / ``*SparseApply*`` ops) or a ``tf.gradients`` scope (``gradients/``,
``gradients_1/``...). Initializers, evaluation, checkpointing and the hook's own step read keep the
original precision (one compile each, and evaluation metrics stay exact).

The split is told by ``TellMeStepOrLossHook``, a SessionRunHook that finds the session it serves in its
run context (``run_context.session``, whose graph resolves the tensor names) and reports in-process:

- ``step``: before each training run the hook reads the step (one extra small run, only while
  accelerated); the run that starts with step >= floor(total_step x ratio) is the first at the
  original precision.
- ``loss``: the hook fetches the loss with each training run; the run after the first reported loss
  that is != 0 and <= final_loss x ratio is the first at the original precision.

The switch is one-way, happens once and is logged (INFO, logger "graphcache"). Both variants of a
signature are imported into the session's one run graph, whose variables have pinned shared names, so
variables, optimizer slots and the global step carry across: nothing is re-initialized.

float16 needs loss scaling (gradients below 6e-8 flush to zero). The float16 variant's graph is rewritten
before Grappler sees it: each ``tf.gradients`` seed (``.../gradients/grad_ys_N``) is multiplied by a fed
scale S, and every float tensor leaving the gradients scope (what the optimizer, or clipping, consumes) is
divided by S in float32 and replaced by zeros unless every such gradient is finite. The session feeds S
and reads the all-finite flag with each run: S starts at 2**15, halves on a non-finite step (that step's
update gets zero gradients, the global step still advances), and doubles after 2000 finite steps, like
TensorFlow's dynamic loss scale. Graphs that already scale their loss (a node named ``*loss_scale*``) are
left alone. bfloat16 has float32's exponent range and is not scaled.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from .config import AccelerateMode

log = logging.getLogger("graphcache")

CPU_REWRITERS = {"fast": "auto_mixed_precision_cpu", "fast1": "auto_mixed_precision_onednn_bfloat16"}
GPU_REWRITER = "auto_mixed_precision"
LOSS_SCALE_SCOPE = "graphcache_loss_scale"
LOSS_SCALE_FEED = f"{LOSS_SCALE_SCOPE}/scale:0"
ALL_FINITE_FETCH = f"{LOSS_SCALE_SCOPE}/all_finite:0"
INITIAL_LOSS_SCALE = 2.0**15
LOSS_SCALE_GROWTH_STEPS = 2000
MAX_LOSS_SCALE = 2.0**24

_APPLY_OP = re.compile(r"(Resource)?(Sparse)?Apply[A-Z]\w*")
_GRADIENTS_SCOPE = re.compile(r"(^|/)gradients(_\d+)?/")
_SEED = re.compile(r"(?P<scope>(?:.*/)?gradients(?:_\d+)?)/grad_ys_\d+")
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


# -- precision variants --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One reduced-precision compile: the RewriterConfig field turned ON and what it produces."""

    rewriter: str
    dtype: str  # "float16" | "bfloat16": what the rewritten graph casts to
    device: str  # "CPU" | "GPU"

    @property
    def loss_scaling(self) -> bool:
        return self.dtype == "float16"


def gpu_in_use(config: Any = None) -> bool:
    """Whether the session will run on a GPU: one is visible and the config does not hide it."""
    import tensorflow as tf

    if config is not None and config.device_count.get("GPU", 1) == 0:
        return False
    try:
        return bool(tf.config.list_physical_devices("GPU"))
    except Exception:  # a broken driver setup reads as no GPU
        return False


def variant_for(mode: AccelerateMode, config: Any = None) -> Variant:
    """The rewriter for ``mode`` on this machine's device (see the module docstring's table)."""
    from .core.failures import warn_once

    if not gpu_in_use(config):
        return Variant(CPU_REWRITERS[mode.type], mode.dtype, "CPU")
    if mode.type == "fast1":
        warn_once("accelerate_bf16_gpu",
                  f"graphcache: accelerate_train_mode={mode.text!r} asks for bfloat16, but TensorFlow's Grappler "
                  "has no bfloat16 rewriter for GPUs (auto_mixed_precision_onednn_bfloat16 rewrites CPU nodes "
                  "only): the accelerated phase trains in float16 (auto_mixed_precision) with loss scaling")
    return Variant(GPU_REWRITER, "float16", "GPU")


def variant_options(config: Any, variant: Variant):
    """A copy of ``config`` (a ConfigProto or None) with the variant's rewriter ON: part of the cache key."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    options = config_pb2.ConfigProto()
    if config is not None:
        options.CopyFrom(config)
    setattr(options.graph_options.rewrite_options, variant.rewriter, rewriter_config_pb2.RewriterConfig.ON)
    return options


def low_precision_casts(graph_def, dtype: str) -> int:
    """How many Cast nodes of a compiled graph cast to ``dtype``: 0 means the rewriter changed nothing."""
    from tensorflow.python.framework import dtypes

    target = dtypes.as_dtype(dtype).as_datatype_enum
    return sum(1 for node in graph_def.node if node.op == "Cast" and node.attr["DstT"].type == target)


# -- which signatures train ----------------------------------------------------------------------------------

def fan_in_trains(graph, op_names) -> bool:
    """Whether the fan-in of these ops (a tf.Graph's) holds an optimizer update or a gradients scope."""
    seen: set[str] = set()
    stack = [graph.get_operation_by_name(name) for name in op_names]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if _APPLY_OP.fullmatch(op.type) or _GRADIENTS_SCOPE.search(op.name):
            return True
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return False


def _fetch_op_names(graph, fetches) -> list[str]:
    """Op names behind a session.run fetch structure (nested lists/tuples/dicts of tensors, ops, names)."""
    import tensorflow as tf

    names = []
    for leaf in tf.nest.flatten(fetches):
        try:
            element = graph.as_graph_element(leaf, allow_tensor=True, allow_operation=True)
        except (TypeError, ValueError, KeyError):
            continue  # not a graph element (a SparseTensor, a handle...): it cannot add training
        names.append(element.name if isinstance(element, tf.Operation) else element.op.name)
    return names


# -- loss scaling ------------------------------------------------------------------------------------------

def _tensor_key(ref: str) -> str:
    """A data input ("n", "n:0", "n:2") as "n:port"."""
    name, _, port = ref.partition(":")
    return f"{name}:{port or 0}"


def add_loss_scaling(graph_def, tf_graph, roots: list[str]):
    """The float16 variant's graph: (new GraphDef, None) with dynamic loss scaling, or (graph_def, reason).

    ``tf_graph`` is the same graph as a tf.Graph (for tensor dtypes); ``roots`` are the signature's
    fetch/target node names: only gradient scopes in their fan-in are rewritten.
    """
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    nodes = {node.name: node for node in graph_def.node}
    fan_in: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in fan_in or name not in nodes:
            continue
        fan_in.add(name)
        stack.extend(ref.lstrip("^").partition(":")[0] for ref in nodes[name].input)
    if any("loss_scale" in part.lower() for name in fan_in for part in name.split("/")):
        return graph_def, "the graph already scales its loss"
    seeds_by_scope: dict[str, list[str]] = {}
    for name in sorted(fan_in):
        match = _SEED.fullmatch(name)
        if match:
            seeds_by_scope.setdefault(match["scope"], []).append(f"{name}:0")
    if not seeds_by_scope:
        return graph_def, "no tf.gradients seed (a '.../gradients/grad_ys_N' node) in the training signature"
    scopes = tuple(scope + "/" for scope in seeds_by_scope)

    def scope_of(name: str) -> str | None:
        return next((s for s in scopes if name.startswith(s)), None)

    # Gradients leaving their scope: float data edges from inside a scope to a node outside it.
    leaving: dict[str, list[tuple[str, int]]] = {}  # tensor -> [(consumer, input index)]
    for name in sorted(fan_in):
        inside = scope_of(name)
        for index, ref in enumerate(nodes[name].input):
            if ref.startswith("^"):
                continue
            key = _tensor_key(ref)
            producer = key.rpartition(":")[0]
            source = scope_of(producer)
            if source is None or source == inside:
                continue
            if tf_graph.get_tensor_by_name(key).dtype.base_dtype.name in _FLOAT_DTYPES:
                leaving.setdefault(key, []).append((name, index))
    if not leaving:
        return graph_def, "the gradients scope has no float output"
    seeds = [seed for scope in seeds_by_scope for seed in seeds_by_scope[scope]]

    scratch = tf.Graph()
    stand_ins: dict[str, str] = {}  # stand-in placeholder node -> original tensor
    scaled_seed: dict[str, str] = {}
    unscaled: dict[str, str] = {}
    with scratch.as_default(), tf.compat.v1.name_scope(LOSS_SCALE_SCOPE + "/"):  # every node in the scope
        scale = tf.compat.v1.placeholder(tf.float32, [], name="scale")
        inverse = tf.math.reciprocal(scale, name="inverse")
        for i, seed in enumerate(seeds):
            dtype = tf_graph.get_tensor_by_name(seed).dtype.base_dtype
            stand_in = tf.compat.v1.placeholder(dtype, name=f"seed_in_{i}")
            stand_ins[stand_in.op.name] = seed
            scaled_seed[seed] = tf.multiply(stand_in, tf.cast(scale, dtype), name=f"scaled_seed_{i}").name
        raw = []
        for j, key in enumerate(sorted(leaving)):
            dtype = tf_graph.get_tensor_by_name(key).dtype.base_dtype
            stand_in = tf.compat.v1.placeholder(dtype, name=f"grad_in_{j}")
            stand_ins[stand_in.op.name] = key
            # Unscale in float32 whatever the gradient's dtype, so the division cannot underflow again.
            raw.append((key, dtype, tf.multiply(tf.cast(stand_in, tf.float32), inverse, name=f"unscale_{j}")))
        finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for _, _, v in raw]),
                               name="all_finite")
        for j, (key, dtype, value) in enumerate(raw):
            guarded = tf.where(finite, value, tf.zeros_like(value), name=f"guard_{j}")
            unscaled[key] = tf.cast(guarded, dtype, name=f"grad_{j}").name
    added = [node for node in scratch.as_graph_def().node if node.name not in stand_ins]
    for node in added:
        for index, ref in enumerate(node.input):
            original = stand_ins.get(ref.partition(":")[0])
            if original is not None:
                node.input[index] = original

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    rewired = {node.name: node for node in out.node}
    for name in fan_in:  # every consumer of a seed is inside its scope
        node = rewired[name]
        for index, ref in enumerate(node.input):
            if not ref.startswith("^") and _tensor_key(ref) in scaled_seed:
                node.input[index] = scaled_seed[_tensor_key(ref)]
    for key, consumers in leaving.items():
        for name, index in consumers:
            rewired[name].input[index] = unscaled[key]
    out.node.extend(added)
    return out, None


class LossScale:
    """Dynamic loss scale state, kept by the session (fed in, updated from the all-finite flag)."""

    def __init__(self) -> None:
        self.value = INITIAL_LOSS_SCALE
        self.good_steps = 0
        self.skipped = 0

    def update(self, finite: bool) -> None:
        if finite:
            self.good_steps += 1
            if self.good_steps >= LOSS_SCALE_GROWTH_STEPS:
                self.value = min(self.value * 2.0, MAX_LOSS_SCALE)
                self.good_steps = 0
        else:
            self.skipped += 1
            self.good_steps = 0
            self.value = max(self.value / 2.0, 1.0)
            log.debug("graphcache: non-finite float16 gradients: update skipped, loss scale -> %g", self.value)


# -- the per-session controller ------------------------------------------------------------------------------

class Accelerator:
    """One session's accelerate_train_mode state: which precision runs now, and the one-way switch."""

    def __init__(self, mode: AccelerateMode, config: Any = None) -> None:
        self.mode = mode
        self._config = config
        self._variant: Variant | None = None
        self._lock = threading.Lock()
        self._training: dict[frozenset[str], bool] = {}
        self.hook: TellMeStepOrLossHook | None = None
        self.accelerated = True
        self.switch_step: int | None = None  # the step the switch happened at (as reported), once switched
        self.switch_loss: float | None = None  # the last reported loss at the switch
        self.last_loss: float | None = None
        self.last_step: int | None = None
        self.low_precision_runs = 0
        self.original_runs = 0  # training runs at the original precision
        self.loss_scale = LossScale()

    @property
    def variant(self) -> Variant:
        if self._variant is None:
            self._variant = variant_for(self.mode, self._config)
        return self._variant

    # -- used by the hook
    def register(self, hook: TellMeStepOrLossHook) -> None:
        if hook.split != self.mode.split:
            raise ValueError(
                f"accelerate_train_mode={self.mode.text!r} splits on {self.mode.split!r}, but its "
                f"TellMeStepOrLossHook reports the {hook.split!r}: pass "
                + ("step=..., total_step=..." if self.mode.split == "step" else "loss=..., final_loss=...")
                + " to the hook, or change the mode's SPLIT")
        self.hook = hook

    def trains(self, graph, op_names) -> bool:
        key = frozenset(op_names)
        known = self._training.get(key)
        if known is None:
            known = self._training[key] = fan_in_trains(graph, sorted(key))
        return known

    def is_training_run(self, graph, fetches) -> bool:
        return self.trains(graph, _fetch_op_names(graph, fetches))

    def report_step(self, step: int) -> None:
        with self._lock:
            self.last_step = step
            threshold = self.mode.switch_step(self.hook.total_step) if self.hook else None
            if self.accelerated and threshold is not None and step >= threshold:
                self._switch(f"step {step} >= {threshold} = floor({self.hook.total_step} x {self.mode.ratio})")

    def report_loss(self, loss: float, step: int | None = None) -> None:
        with self._lock:
            self.last_loss = loss
            if step is not None:
                self.last_step = step
            if self.mode.split != "loss" or not self.accelerated or self.hook is None:
                return
            threshold = self.mode.switch_loss(self.hook.final_loss)
            if loss != 0 and loss <= threshold:
                self._switch(f"loss {loss:.6g} <= {threshold:.6g} = {self.hook.final_loss} x {self.mode.ratio}")

    def _switch(self, why: str) -> None:
        self.accelerated = False
        self.switch_step = self.last_step
        self.switch_loss = self.last_loss
        loss = "unknown" if self.last_loss is None else f"{self.last_loss:.6g}"
        log.info("graphcache: accelerate_train_mode %r: %s: training at the original precision from now on "
                 "(step %s, loss %s, %d run(s) in %s)", self.mode.text, why, self.last_step, loss,
                 self.low_precision_runs, self.variant.dtype)

    # -- used by the session
    def variant_for_run(self, graph, op_names) -> Variant | None:
        """The variant a run of these ops uses (None: original precision); counts training runs."""
        if not self.trains(graph, op_names):
            return None
        if self.hook is None:
            needs = ("step=..., total_step=..." if self.mode.split == "step" else "loss=..., final_loss=...")
            raise ValueError(
                f"accelerate_train_mode={self.mode.text!r} needs a graphcache.TellMeStepOrLossHook({needs}) in "
                "the session's hooks (graphcache.Session(hooks=[...]) or MonitoredSession(hooks=[...])): "
                "nothing tells it when to switch to the original precision")
        with self._lock:
            if self.accelerated:
                self.low_precision_runs += 1
                return self.variant
            self.original_runs += 1
            return None


def accelerator_of(session: Any) -> Accelerator | None:
    accelerator = getattr(session, "accelerator", None)
    return accelerator if isinstance(accelerator, Accelerator) else None


# -- the hook -----------------------------------------------------------------------------------------------

def _readable(graph, spec: Any, what: str):
    """A fetchable tensor for ``spec`` (a tensor or a tensor name) in ``graph``.

    A resource handle (``"global_step:0"`` of a resource variable is its VarHandleOp) is read through the
    graph's existing ReadVariableOp of that handle (``<name>/Read/ReadVariableOp:0``, else any other), so
    the graph gains no ops (it may be finalized).
    """
    import tensorflow as tf

    name = spec.name if isinstance(spec, tf.Tensor | tf.Variable) else spec
    if not isinstance(name, str):
        raise TypeError(f"TellMeStepOrLossHook: {what}= must be a tensor or a tensor name, not "
                        f"{type(spec).__name__}")
    try:
        tensor = graph.get_tensor_by_name(name)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"TellMeStepOrLossHook: {what}={name!r} is not a tensor of the graph: {exc}") from None
    if tensor.dtype != tf.resource:
        return tensor
    reads = [op for op in tensor.consumers() if op.type == "ReadVariableOp"]
    reads.sort(key=lambda op: (not op.name.endswith("/Read/ReadVariableOp"), op.name))
    if not reads:
        raise ValueError(f"TellMeStepOrLossHook: {what}={name!r} is a resource handle that the graph never "
                         "reads: pass the variable's value tensor instead")
    return reads[0].outputs[0]


def _global_step_tensor(graph):
    import tensorflow as tf

    variable = tf.compat.v1.train.get_global_step(graph)
    if variable is None:
        return None
    try:
        return _readable(graph, variable.op.outputs[0], "step")
    except ValueError:
        return None


def _hook_base():
    import tensorflow as tf

    return tf.compat.v1.train.SessionRunHook


class TellMeStepOrLossHook(_hook_base()):
    """Tells a graphcache.Session with ``accelerate_train_mode`` when to leave the reduced precision.

    ``TellMeStepOrLossHook(step="global_step:0", total_step=1000)`` for a ``step`` split,
    ``TellMeStepOrLossHook(loss=loss, final_loss=0.05)`` for a ``loss`` split. ``step``/``loss`` are
    tensors or tensor names. The other one may be given too, for the switch's log line (a loss hook
    logs the graph's global step when it has one). Use it in ``graphcache.Session(hooks=[...])`` or in a
    MonitoredSession over ``graphcache.SessionCreator``. With any other session it does nothing.
    """

    def __init__(self, step: Any = None, total_step: int | None = None, loss: Any = None,
                 final_loss: float | None = None) -> None:
        if total_step is not None and final_loss is not None:
            raise ValueError("TellMeStepOrLossHook: give total_step= (SPLIT 'step') or final_loss= (SPLIT 'loss'), "
                             "not both")
        if total_step is not None:
            if step is None:
                raise ValueError("TellMeStepOrLossHook: total_step= needs step= (the global step tensor or its "
                                 "name, e.g. 'global_step:0')")
            if isinstance(total_step, bool) or not isinstance(total_step, int) or total_step <= 0:
                raise ValueError(f"TellMeStepOrLossHook: total_step={total_step!r} must be a positive int")
            self.split = "step"
        elif final_loss is not None:
            if loss is None:
                raise ValueError("TellMeStepOrLossHook: final_loss= needs loss= (the loss tensor or its name)")
            if isinstance(final_loss, bool) or not isinstance(final_loss, int | float) or \
                    not math.isfinite(final_loss) or final_loss <= 0:
                raise ValueError(f"TellMeStepOrLossHook: final_loss={final_loss!r} must be a positive number")
            self.split = "loss"
        else:
            raise ValueError("TellMeStepOrLossHook needs step= and total_step= (for SPLIT 'step') or loss= and "
                             "final_loss= (for SPLIT 'loss'); neither was given")
        self.step = step
        self.total_step = total_step
        self.loss = loss
        self.final_loss = None if final_loss is None else float(final_loss)
        self._tensors: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._warned = False

    def _resolve(self, graph) -> tuple[Any, Any]:
        """(step tensor or None, loss tensor or None) for ``graph``; bad names raise ValueError."""
        known = self._tensors.get(graph)
        if known is None:
            step = _readable(graph, self.step, "step") if self.step is not None else None
            loss = _readable(graph, self.loss, "loss") if self.loss is not None else None
            if step is None and self.split == "loss":
                step = _global_step_tensor(graph)
            known = self._tensors[graph] = (step, loss)
        return known

    def begin(self) -> None:
        import tensorflow as tf

        self._resolve(tf.compat.v1.get_default_graph())  # bad names fail before the first run

    def before_run(self, run_context):
        import tensorflow as tf

        session = run_context.session
        accelerator = accelerator_of(session)
        if accelerator is None:
            if not self._warned:
                self._warned = True
                log.warning("graphcache: TellMeStepOrLossHook serves a %s without accelerate_train_mode: it has "
                            "nothing to report to", type(session).__name__)
            return None
        accelerator.register(self)
        graph = session.graph
        if not accelerator.accelerated or not accelerator.is_training_run(graph, run_context.original_args.fetches):
            return None
        step, loss = self._resolve(graph)
        if self.split == "step":
            try:
                value = session.run(step)
            except tf.errors.FailedPreconditionError:  # not initialized yet: nothing to report
                return None
            accelerator.report_step(int(value))
            if loss is None or not accelerator.accelerated:
                return None
            return tf.compat.v1.train.SessionRunArgs({"loss": loss})
        fetches = {"loss": loss}
        if step is not None:
            fetches["step"] = step
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values) -> None:
        results = run_values.results
        accelerator = accelerator_of(run_context.session)
        if not results or accelerator is None:
            return
        step = results.get("step")
        accelerator.report_loss(float(results["loss"]), None if step is None else int(step))
