"""Keras objects and tf.Modules a plain tf.function reads (a global, a closure cell, an attribute): keyed whole.

Why: TensorFlow's custom training loops (the quickstart for experts, DCGAN, NMT with attention, mixed precision)
read a Keras model, an optimizer, a loss object and metrics from module globals in a ``@tf.function
train_step(x, y)``, and a ``tf.Module`` trained by ``@tf.function train(x, y)`` is read the same way. walk.py's
plain-value rules refuse such objects; this is its ``ObjectRule`` for them (``RULE``), keyed as Keras' own
steps key their model and compile state (kerasstep.py, kerasfit.py):

- a **layer or model**: Keras' distribution off, every layer built (else its variables are made inside this
  trace: refused ``creates_variables``; TensorFlow's retrace after it is cached) and holding no losses of an
  earlier call; then kerasstep.walk_model's key (classes: a user class walked, Keras' named; configs where they
  work, build configs, flags, what layers hold, a user class's ``self.<name>`` reads; variables by index, path,
  dtype and shape, bound as ``<path>/keras:<index>:<variable path>``), each layer's ``_called`` as it was
  before the trace (the trace sets it: hook.py redoes that on a hit, from what the miss's trace set);
- an **optimizer**: its default distribution strategy; per optimizer (a LossScaleOptimizer's inner one too)
  its class, ``get_config()`` exactly (learning rate, betas, epsilon, clipping, weight decay, loss scale, EMA,
  gradient accumulation), what it holds (kerasstep.keras_object), a schedule the same way, whether it is
  built, the variables it trains (each by the path the walk first reached it by) and which get weight decay;
  then its variables, bound as ``<path>/keras-optimizer:<index>:<variable path>``;
- a **loss** or **learning-rate schedule**: class, config, held functions, a user class's reads;
- a **metric**: the same, its name and its variables' paths, bound as ``<path>/keras-metric:...``;
- a **Keras variable** on its own (``model.trainable_variables`` items): its path, trainable, autocast, its
  constraint and regularizer (class and config), and its tf.Variable (a reference where it was reached);
- a **tf.Module**: instance.py's rule for a nested module (a class with library bases that hold all their
  state in ``__dict__``, walked; every attribute it holds, Keras objects by the rules above).

A ``@tf.function`` *method* of a Keras layer or model subclass (``walk_method``) is keyed by this rule for its
object, plus the ``self.<name>`` reads of the method and of the methods it reaches through ``self``.

Assumed, as for Keras' steps: a Keras object's state is its config and variables (what Keras saves and restores
it by). A ``get_config()`` that fails or is not plain is refused (``keras``).
"""

from __future__ import annotations

import sys
from typing import Any

from tensorflow.python.module import module as module_lib
from tensorflow.python.ops import resource_variable_ops

from . import instance, kerasstep, modelstate
from .walk import Uncacheable, Walk

REASON = "keras"
MAX_DEPTH = 16


def _keras() -> Any:
    return sys.modules.get("keras")


class KerasObjects:
    """walk.py's ObjectRule for Keras objects and tf.Modules (see the module docstring)."""

    def claims(self, obj: Any) -> bool:
        if isinstance(obj, module_lib.Module):
            return True
        keras = _keras()
        return keras is not None and isinstance(obj, _kinds(keras))

    def key(self, walk: Walk, obj: Any, path: str) -> None:
        if isinstance(obj, module_lib.Module):
            try:
                instance.module_rule(walk, obj, path, 0)
            except Uncacheable as exc:  # instance.py's reason is a method's; here the module is a value read
                raise Uncacheable("value" if exc.reason == instance.REASON else exc.reason, exc.detail) from None
            return
        if not walk.once(obj, path):
            return
        keras = _keras()
        if isinstance(obj, keras.Variable):
            _variable(walk, obj, path)
            return
        walk.objects[path] = obj
        if isinstance(obj, keras.layers.Layer):
            _layer(walk, obj, path)
        elif isinstance(obj, keras.optimizers.Optimizer):
            _optimizer(walk, obj, path)
        elif isinstance(obj, keras.metrics.Metric):
            walk.value(("keras metric", obj.name, [variable.path for variable in obj.variables]), path)
            kerasstep.keras_object(walk, obj, path, {})
            kerasstep.bind_variables(walk, list(obj.variables), f"{path}/keras-metric", f"metric {obj.name}")
        else:  # a loss, a learning-rate schedule
            walk.value(("keras object",), path)
            kerasstep.keras_object(walk, obj, path, {})


RULE = KerasObjects()


def walk_method(method: instance.BoundMethod, walk: Walk) -> Walk:
    """The walk of a tf.function method's trace: a Keras layer's or model's (TensorFlow's text generation tutorial's
    ``OneStep(tf.keras.Model)`` with its ``@tf.function generate_one_step``) keyed as this rule keys the object,
    the method's own ``self.<name>`` reads besides; any other object's by instance.py."""
    layer = method.instance
    keras = _keras()
    if keras is None or not isinstance(layer, keras.layers.Layer):
        return instance.walk_method(method, walk)
    walk.function(method.function, "")
    walk.value(layer, "self")  # the whole object: its classes, configs or state, user classes' reads, variables
    names, _, followed = instance.reached(type(layer), method.function)
    chains = list(dict.fromkeys(chain for function in followed for chain in instance.self_chains(function)))
    kerasstep.key_self_reads(walk, layer, names, chains, "self", kerasstep.model_objects(layer))
    return walk


def _kinds(keras: Any) -> tuple[type, ...]:
    return (keras.layers.Layer, keras.optimizers.Optimizer, keras.losses.Loss, keras.metrics.Metric,
            keras.optimizers.schedules.LearningRateSchedule, keras.Variable)


def _layer(walk: Walk, layer: Any, path: str) -> None:
    import tensorflow as tf

    keras = _keras()
    if keras.distribution.distribution() is not None or getattr(layer, "_distribute_strategy", None) is not None \
            or tf.distribute.has_strategy():
        raise Uncacheable(REASON, f"{path}: a Keras distribution or strategy is set")
    layers = layer._flatten_layers(include_self=True, recursive=True)
    for inner in layers:
        if not inner.built and not modelstate.builds_nothing(inner):
            raise Uncacheable("creates_variables", f"{path}: layer {inner.name} is not built (it makes its variables "
                                                   "inside this trace; TensorFlow's retrace after it is cached)")
        if inner._losses:  # a trace would add its own (add_loss, activity regularizers), which a hit cannot
            raise Uncacheable(REASON, f"{path}: layer {inner.name} holds losses of a call (add_loss, an activity "
                                      "regularizer)")
    walk.value(("keras layer", len(layers)), path)
    kerasstep.walk_model(walk, layer, kerasstep.model_objects(layer), f"{path}/",
                         lambda inner: kerasstep.called_before(walk, inner))


def _optimizer(walk: Walk, optimizer: Any, path: str) -> None:
    import tensorflow as tf

    keras = _keras()
    current = optimizer
    for depth in range(MAX_DEPTH):  # a LossScaleOptimizer wraps another
        where = f"{path}/optimizer{depth}"
        if getattr(current, "_distribution_strategy", None) is not tf.distribute.get_strategy():
            raise Uncacheable(REASON, f"{where}: the optimizer was made under a distribution strategy")
        kerasstep.keras_object(walk, current, where, {})
        unbuilt = ("unbuilt", id(current)) in walk.before  # as before the trace that built it (building.py)
        walk.value(("optimizer", False if unbuilt else bool(current.built)), where)
        schedule = getattr(current, "_learning_rate", None)
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            kerasstep.keras_object(walk, schedule, f"{where}/learning_rate", {})
        trained = [] if unbuilt else list(getattr(current, "_trainable_variables", ()))
        walk.value(("trains", len(trained)), f"{where}/trains")
        for index, variable in enumerate(trained):  # by the path the walk first reached each by
            walk.value(variable, f"{where}/trains:{index}")
        decays = [bool(current._use_weight_decay(variable)) for variable in trained] if current.weight_decay else []
        walk.value(("decays", decays), f"{where}/decays")
        current = getattr(current, "inner_optimizer", None)
        if current is None:
            break
    kerasstep.bind_variables(walk, list(optimizer.variables), f"{path}/keras-optimizer", "the optimizer")


def _variable(walk: Walk, variable: Any, path: str) -> None:
    value = getattr(variable, "_value", None)
    if not isinstance(value, resource_variable_ops.BaseResourceVariable):
        raise Uncacheable(REASON, f"{path}: Keras variable {variable.path} holds a {type(value).__name__}, not a "
                                  "resource variable (uninitialized, or another backend's)")
    walk.value(("keras variable", type(variable).__qualname__, variable.path, bool(variable.trainable),
                bool(variable._autocast), str(variable.aggregation), str(variable.synchronization),
                bool(getattr(variable, "overwrite_with_gradient", False))), path)
    walk.value(("attached", variable.constraint is None, variable.regularizer is None), path)
    kerasstep.attached_objects(walk, variable, path)
    walk.value(value, path)  # a binding of the walk, or a reference to the path it was first reached by
    walk.objects.setdefault(path, variable)


def before_trace(walk: Walk) -> dict[Any, Any]:
    """What a trace may change that the walk keys as it was before (``Walk(before=...)``): the ``_called`` of every
    layer it keyed (by id), and which optimizers are not built yet (``("unbuilt", id)``: a trace may build one,
    which a hit redoes: building.py)."""
    keras = _keras()
    if keras is None:
        return {}
    state: dict[Any, Any] = {}
    for obj in walk.objects.values():
        if isinstance(obj, keras.layers.Layer):
            state[id(obj)] = bool(obj._called)
        current = obj if isinstance(obj, keras.optimizers.Optimizer) else None
        while current is not None:
            if not current.built:
                state["unbuilt", id(current)] = True
            current = getattr(current, "inner_optimizer", None)
    return state


def calls(walk: Walk, before: dict[Any, Any]) -> list[str]:
    """The layers (by walk path) a miss's trace called for the first time: what a hit sets ``_called`` of."""
    keras = _keras()
    if keras is None:
        return []
    return [path for path, obj in walk.objects.items()
            if isinstance(obj, keras.layers.Layer) and not before.get(id(obj), True) and obj._called]


def after_hit(walk: Walk, paths: list[str]) -> None:
    """What a hit's trace would have done to Python objects: ``Layer.__call__`` sets ``_called``."""
    for path in paths:
        layer = walk.objects.get(path)
        if layer is not None:
            layer._called = True


__all__ = ["RULE", "KerasObjects", "after_hit", "before_trace", "calls"]
