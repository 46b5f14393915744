"""Keras layers, models and learning-rate schedules of user code without a working ``get_config()``: keyed by their
state, as a tf.Module's is, instead of refused.

Why: TensorFlow's Transformer tutorial (and most subclassed models) never writes ``get_config()``: Keras' default
raises for a model whose ``__init__`` takes keyword-only or non-serializable arguments, and a
``LearningRateSchedule`` subclass has none at all. A config is only the constructor's arguments; what a trace can
read is what the constructor made of them: the object's attributes, its sub-layers and its variables. Where the
config is missing, ``state`` keys all of that instead (for a user class only: a Keras class's config is its
definition, and one that fails stays refused):

- the object's attribute names, in order, and each value by instance.keyed_state with the caller's rule first
  (kerasstep's: a layer, a variable, an optimizer or a metric of the model by its label in the walk, a dtype
  policy by name, a seed generator by its state variable), then these kinds: plain values, eager tensors and
  arrays by value, lists, tuples, dicts (Keras' tracked ones too) item by item, user functions walked, Keras' own
  per-instance wrappers of the object's methods (``build``, ``quantize``) as the method they wrap, an
  ``InputSpec``, a regularizer, initializer or constraint by class and config, a set of str or int by its sorted
  items. Anything else is refused (``keras``), naming the attribute and its type;
- not keyed, each for the reason in ``SKIPPED``: Keras' bookkeeping that mirrors what is keyed (the tracker, the
  trackable dependency lists), what Keras reads outside the step's trace (the step functions themselves, the
  History callback, nodes of symbolic calls, SavedModel specs), the constructor's arguments (``_auto_config``:
  their effect is the state keyed here) and a model's compile state (the fit key holds the optimizer, the compile
  arguments, the compiled losses and metrics: kerasfit.py; a predict step does not read it, and user code that
  reads it is keyed by kerasstep.instance_reads, which refuses what it does not know).

The class is walked by the caller (user code: every method, ``__init__`` included), and a user class's
``self.<name>`` reads are keyed there too. A trace that changes what this keys (an attribute set in ``call``) makes
the walk after it differ: that trace is not stored (``side_effect``).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from .instance import keyed_state
from .walk import PLAIN_SCALARS, Uncacheable, Walk, is_library

REASON = "keras"
StateRule = Callable[[Walk, Any, str, int], bool]
SKIPPED: dict[str, str] = {
    "_tracker": "Keras' attribute tracker: it mirrors the attributes it tracks, keyed themselves",
    "_auto_config": "the constructor's arguments: their effect is the state keyed here",
    "_called": "keyed by the caller: the model as called, a sublayer as it was before the trace (a trace sets it)",
    "_call_signature": "inspect's signature of the class's call(), whose code is walked",
    "_inbound_nodes": "nodes of symbolic calls (functional graphs): a step's trace calls the layer on tensors",
    "_outbound_nodes": "nodes of symbolic calls (functional graphs): a step's trace calls the layer on tensors",
    "_saved_model_inputs_spec": "read by SavedModel export only",
    "_saved_model_arg_spec": "read by SavedModel export only",
    "_loss_ids": "ids of this process's loss tensors, mirroring _losses (keyed)",
    "train_function": "Keras' step functions: the traced function is keyed as the step",
    "test_function": "Keras' step functions: the traced function is keyed as the step",
    "predict_function": "Keras' step functions: the traced function is keyed as the step",
    "history": "the History callback of the last fit (callbacks run outside the trace)",
    "_eval_epoch_iterator": "fit's validation data iterator (outside the trace)",
    "optimizer": "compile state: kerasfit.py keys it",
    "loss": "compile state: kerasfit.py keys it",
    "_compile_config": "compile state: kerasfit.py keys it",
    "_compile_loss": "compile state: kerasfit.py keys it",
    "_compile_metrics": "compile state: kerasfit.py keys it",
    "_loss_tracker": "compile state: kerasfit.py keys it",
    "_compiled_trainable_state": "compile state: which layers were trainable at compile (fit warns on a change)",
}
TRACKABLE_PREFIX = "_self_"  # TensorFlow Trackable's checkpoint bookkeeping: it mirrors the object's attributes


def user_class(obj: Any) -> bool:
    """Whether ``obj``'s class is user code (its state is what this module keys; a Keras class's is its config)."""
    return not is_library(type(obj).__module__)


def builds_nothing(layer: Any) -> bool:
    """Whether an unbuilt ``layer`` may be keyed as it is: its class's ``build`` is Keras' default ``Layer.build``,
    which makes no variables (a subclassed model without ``call`` or ``build``, the keras.io VAE; an
    ``IndexLookup``, which ``TextVectorization`` calls through ``.call`` and so never builds). Should a trace build
    it after all (``Layer.__call__`` builds by running ``call`` where sublayers are unbuilt), the variables it makes
    refuse that trace (``creates_variables``) and its ``built`` flag changes what the walk after the trace reads
    (``side_effect``): such a trace is never stored."""
    return bool(getattr(type(layer).build, "_is_default", False))


def stateful_kind(obj: Any) -> bool:
    """The kinds whose state ``state`` may key: layers and models (their library bases keep their state in
    ``__dict__``, SKIPPED aside) and learning-rate schedules (a base without state)."""
    import keras

    return isinstance(obj, (keras.layers.Layer, keras.optimizers.schedules.LearningRateSchedule))


def state(walk: Walk, obj: Any, path: str, where: str, rule: StateRule, failure: BaseException) -> str:
    """Key ``obj``'s state (see the module docstring) under ``path``; the text the caller keys in place of a config.
    Refuses a Keras class, a kind other than a layer or a schedule, and values of kinds not listed."""
    cls = type(obj)
    if not user_class(obj) or not stateful_kind(obj):
        raise Uncacheable(REASON, f"{where}: get_config() fails ({type(failure).__name__}: {failure})")
    items = [(name, value) for name, value in vars(obj).items()
             if name not in SKIPPED and not name.startswith(TRACKABLE_PREFIX)]
    walk.value(("state without config", cls.__qualname__, [name for name, _ in items]), f"{path}/state")

    def combined(inner_walk: Walk, value: Any, at: str, depth: int) -> bool:
        return rule(inner_walk, value, at, depth) or _known_kind(inner_walk, obj, value, at)

    for name, value in items:
        keyed_state(walk, value, f"{path}.{name}", 0, combined, REASON)
    return "state without config"


def optimizer_config(optimizer: Any, where: str, failure: BaseException) -> dict[str, Any]:
    """An optimizer's ``get_config()`` where it failed for its learning-rate schedule alone (a user schedule without
    a config, keyed by its state on its own: kerasfit's ``<where>/learning_rate``): the optimizer's own
    ``get_config`` run on a copy of its attributes whose schedule is None (Keras' base config then holds 0.5, here
    replaced by a marker). The optimizer itself is not touched. Refused where the schedule is not the cause."""
    import keras

    schedule = getattr(optimizer, "_learning_rate", None)
    if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule) or not user_class(schedule) or \
            _has_config(schedule):
        raise Uncacheable(REASON, f"{where}: get_config() fails ({type(failure).__name__}: {failure})")
    proxy = object.__new__(type(optimizer))
    vars(proxy).update(vars(optimizer))
    vars(proxy)["_learning_rate"] = None
    try:
        config = type(optimizer).get_config(proxy)
    except Exception as exc:
        raise Uncacheable(REASON, f"{where}: get_config() fails without its schedule too ({type(exc).__name__}: "
                                  f"{exc})") from None
    config["learning_rate"] = "a schedule without a config, keyed by its state"
    return config


def _has_config(obj: Any) -> bool:
    try:
        obj.get_config()
    except Exception:  # any failure: the schedule is what the optimizer's config cannot serialize
        return False
    return True


def _known_kind(walk: Walk, owner: Any, value: Any, where: str) -> bool:
    """The kinds of value a Keras object's state holds besides the caller's (module docstring); False for plain
    values and containers (keyed_state keys those), refused for anything else."""
    keras = sys.modules["keras"]
    if type(value) in PLAIN_SCALARS or type(value) in (list, tuple, dict) or \
            (isinstance(value, (list, tuple, dict)) and is_library(type(value).__module__)):
        return False
    if isinstance(value, types.FunctionType):
        wrapped = getattr(value, "__wrapped__", None)
        if isinstance(wrapped, types.MethodType) and wrapped.__self__ is owner:  # Keras' per-instance build wrapper
            walk.value(("method wrapper", wrapped.__func__.__qualname__), where)
        else:
            walk.value(value, where)
        return True
    if _tensor_or_array(value):
        walk.value(value, where)
    elif isinstance(value, (set, frozenset)) and all(type(item) in (str, int) for item in value):
        walk.value(("set", type(value).__name__, sorted(value, key=repr)), where)
    elif isinstance(value, keras.InputSpec):
        walk.value(("input spec", value.get_config()), where)
    elif isinstance(value, (keras.regularizers.Regularizer, keras.initializers.Initializer,
                            keras.constraints.Constraint)):
        walk.value(type(value), f"{where}/class")
        walk.value(("config", value.get_config()), where)
    else:
        raise Uncacheable(REASON, f"{where} is a {type(value).__module__}.{type(value).__qualname__} (an object "
                                  "without a config, in an object without one: its state is not keyed)")
    return True


def _tensor_or_array(value: Any) -> bool:
    import numpy as np
    from tensorflow.python.framework import ops

    return isinstance(value, (ops.EagerTensor, np.ndarray, np.generic))


__all__ = ["SKIPPED", "builds_nothing", "optimizer_config", "state", "stateful_kind", "user_class"]
