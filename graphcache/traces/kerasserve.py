"""Keras 3's serving function at the trace hook: ``tf.saved_model.save(model, ...)``'s ``serving_default``.

Saving a Keras model with ``tf.saved_model.save`` exports ``TFLayer._default_save_signature``: a property that
makes, at each read, a new ``tf.function(input_signature=<the model's inputs>)`` over
``_default_save_signature.<locals>.serving_default(inputs)``, whose whole body is ``return self(inputs)``:
library code closing over the model (``self``), traced inside the save (savecontext.py). What that trace reads
is what a predict step's reads, minus the step: the model's call on its inputs with Keras' default ``training``.
So it is keyed as kerasstep.py keys a predict step (the model, its layers, configs, user code and variables;
Keras' settings), with this function's qualified name in the key instead of the predict step's, and its
declared input signature in the ``signature`` part as any function's.

Unlike Keras' own steps it is not ``forward_only``: a SavedModel's serving function may be differentiated
after loading, so stored.check_graph refuses one with a custom gradient, as for any user function.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .kerasstep import REASON, PredictStep, closure_cells, unwrapped
from .walk import Uncacheable

LAYER_MODULE = "keras.src.backend.tensorflow.layer"
SERVING = "TFLayer._default_save_signature.<locals>.serving_default"


@dataclass
class ServeStep(PredictStep):
    """A trace of Keras' ``serving_default``: keyed as a predict step of the same model (kerasstep.walk_step)."""


def serving_step(target: Any) -> ServeStep | None:
    """The serving function ``target`` is, or None when it is not Keras' ``serving_default``."""
    if getattr(target, "__module__", None) != LAYER_MODULE or getattr(target, "__qualname__", "") != SERVING:
        return None
    inner = unwrapped(target)
    model = closure_cells(inner).get("self")
    keras = sys.modules.get("keras")
    if keras is None or not isinstance(model, keras.Model):
        raise Uncacheable(REASON, f"Keras' serving function closes over a {type(model).__name__}, not a keras.Model")
    return ServeStep(model, inner)


def after_hit(step: ServeStep) -> None:
    """What the serving trace does to Python objects, done again on a hit: ``self(inputs)`` (Layer.__call__)
    marks the model called."""
    step.model._called = True


__all__ = ["SERVING", "ServeStep", "after_hit", "serving_step"]
