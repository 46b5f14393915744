"""The per-session controller: which precision a training run uses now, and the one-way switch.

A ``graphcache.Session`` with ``accelerate_train_mode`` holds one ``Accelerator``. Its hook
(``TellMeStepOrLossHook``) reports steps or losses to it; the session asks it, for each run, whether the
run trains and at which precision:

- ``step``: before each training run the hook reads the step (one extra small run, only while
  accelerated); the run that starts with step >= floor(total_step x ratio) is the first at the
  original precision.
- ``loss``: the hook fetches the loss with each training run; the run after the first reported loss
  that is != 0 and <= final_loss x ratio is the first at the original precision.

The switch is one-way, happens once and is logged (INFO, logger "graphcache"). The controller also keeps
the float16 variant's ``LossScale``, which the session feeds and updates with each scaled run.

Where the variant's rewriter cannot run in this process (support.py: ``fast1`` with oneDNN off, or on a CPU
without bfloat16 in oneDNN), the controller finds out before the first training run (when the hook first
reports, else at that run), warns once naming the reason and what to set, and trains at the original
precision throughout: no variant is compiled, nothing switches, and the runs count as ``unaccelerated_runs``.
Every training run is also counted, through the session's cache, by the precision it actually ran at
(core/counters.py ``ACCELERATE_RUNS``: what ``graphcache stats`` shows).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..core.counters import ACCELERATE_PREFIX
from ..core.failures import warn_once
from .loss_scaling import LossScale
from .mode import AccelerateMode
from .support import BFLOAT16_FIX, unavailable
from .training import fan_in_trains, fetch_op_names
from .variants import Variant, variant_for

log = logging.getLogger("graphcache")


class SplitReporter(Protocol):
    """What the controller reads of its hook (a TellMeStepOrLossHook): the split and its target."""

    split: str  # "step" | "loss"
    total_step: int | None
    final_loss: float | None


class Accelerator:
    """One session's accelerate_train_mode state: which precision runs now, and the one-way switch."""

    def __init__(self, mode: AccelerateMode, config: Any = None, onednn: bool | None = None,
                 count: Callable[..., None] | None = None) -> None:
        self.mode = mode
        self._config = config
        self._onednn = onednn  # TensorFlow's oneDNN switch as it resolved it (compile/identity.py)
        self._count = count  # adds to the cache's counters (its ``count(**deltas)``)
        self._variant: Variant | None = None
        self._checked = False
        self.unavailable: str | None = None  # why the variant's rewriter cannot run here; None when it can
        self._lock = threading.Lock()
        self._training: dict[frozenset[str], bool] = {}
        self.hook: SplitReporter | None = None
        self.accelerated = True
        self.switch_step: int | None = None  # the step the switch happened at (as reported), once switched
        self.switch_loss: float | None = None  # the last reported loss at the switch
        self.last_loss: float | None = None
        self.last_step: int | None = None
        self.low_precision_runs = 0  # training runs in the variant's reduced precision
        self.original_runs = 0  # training runs at the original precision after the switch
        self.unaccelerated_runs = 0  # training runs at the original precision because the rewriter cannot run
        self.loss_scale = LossScale()

    @property
    def variant(self) -> Variant:
        if self._variant is None:
            self._variant = variant_for(self.mode, self._config)
        return self._variant

    @property
    def precision(self) -> str:
        """The precision training runs at before the switch: the variant's dtype, or "original" where its
        rewriter cannot run in this process (``unavailable`` says why)."""
        self.check_available()
        return "original" if self.unavailable else self.variant.dtype

    def check_available(self) -> None:
        """Once: whether the variant's rewriter can run here (support.py). If not, warn once with the reason
        and the fix, and train at the original precision from the first run on; either way, log what runs."""
        with self._lock:
            if self._checked:
                return
            self._checked = True
            variant = self.variant
            self.unavailable = unavailable(variant, self._onednn)
            if self.unavailable is None:
                log.info("graphcache: accelerate_train_mode %r: training signatures run in %s (%s on %s) until the "
                         "%s split", self.mode.text, variant.dtype, variant.rewriter, variant.device, self.mode.split)
                return
            self.accelerated = False  # nothing to switch from: no step reads, no second compile
        message = (f"graphcache: accelerate_train_mode={self.mode.text!r} trains at the original precision "
                   f"throughout: {self.unavailable}. To train the first part in {variant.dtype}, {BFLOAT16_FIX}")
        log.info("%s", message)
        warn_once("accelerate_unavailable", message)

    # -- used by the hook
    def register(self, hook: SplitReporter) -> None:
        if hook.split != self.mode.split:
            raise ValueError(
                f"accelerate_train_mode={self.mode.text!r} splits on {self.mode.split!r}, but its "
                f"TellMeStepOrLossHook reports the {hook.split!r}: pass "
                + ("step=..., total_step=..." if self.mode.split == "step" else "loss=..., final_loss=...")
                + " to the hook, or change the mode's SPLIT")
        self.hook = hook
        self.check_available()  # the hook's first report comes before the first training run

    def trains(self, graph, op_names) -> bool:
        key = frozenset(op_names)
        known = self._training.get(key)
        if known is None:
            known = self._training[key] = fan_in_trains(graph, sorted(key))
        return known

    def is_training_run(self, graph, fetches) -> bool:
        return self.trains(graph, fetch_op_names(graph, fetches))

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
        self.check_available()
        with self._lock:
            if self.accelerated:
                self.low_precision_runs += 1
                variant, ran_at = self.variant, self.variant.dtype
            elif self.unavailable:
                self.unaccelerated_runs += 1
                variant, ran_at = None, "original_unaccelerated"
            else:
                self.original_runs += 1
                variant, ran_at = None, "original_after_switch"
        if self._count is not None:
            self._count(**{ACCELERATE_PREFIX + ran_at: 1})
        return variant


def accelerator_of(session: Any) -> Accelerator | None:
    """The Accelerator of a graphcache.Session with accelerate_train_mode; None for any other session."""
    accelerator = getattr(session, "accelerator", None)
    return accelerator if isinstance(accelerator, Accelerator) else None
