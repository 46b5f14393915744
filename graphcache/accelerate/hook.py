"""TellMeStepOrLossHook: the SessionRunHook that tells a session's Accelerator when to switch precision.

The hook finds the session it serves in its run context (``run_context.session``, whose graph resolves
the tensor names) and reports in-process to that session's ``Accelerator`` (controller.py): the step it
reads before each training run (SPLIT ``step``), or the loss it fetches with it (SPLIT ``loss``). With a
session that has no Accelerator it warns once and does nothing. Importing this module imports TensorFlow.
"""

from __future__ import annotations

import logging
import math
import weakref
from typing import Any

from .controller import accelerator_of

log = logging.getLogger("graphcache")


def readable_tensor(graph, spec: Any, what: str):
    """A fetchable tensor for ``spec`` (a tensor, a variable or a tensor name) in ``graph``.

    A resource handle (``"global_step:0"`` of a resource variable is its VarHandleOp) is read through the
    graph's existing ReadVariableOp of that handle (``<name>/Read/ReadVariableOp:0``, else any other), so
    the graph gains no ops (it may be finalized). ``what`` ("step" or "loss") names the hook argument in
    the errors: TypeError for a spec that is neither, ValueError for a name that is not a tensor of the
    graph or a handle the graph never reads.
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
    """The graph's global step as a fetchable tensor, or None: what a loss hook logs the switch with."""
    import tensorflow as tf

    variable = tf.compat.v1.train.get_global_step(graph)
    if variable is None:
        return None
    try:
        return readable_tensor(graph, variable.op.outputs[0], "step")
    except ValueError:
        return None


def _hook_base():
    """SessionRunHook, imported only when this module is (TensorFlow is the base class)."""
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
            step = readable_tensor(graph, self.step, "step") if self.step is not None else None
            loss = readable_tensor(graph, self.loss, "loss") if self.loss is not None else None
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
