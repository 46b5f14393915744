"""Keras 3's train and test steps at the trace hook: ``model.fit`` / ``model.evaluate`` keyed by the model and
its compile state, not by Keras' Python.

``fit`` calls ``model.train_function(iterator)``, whose one tf.function traced at the top level is
``_make_function.<locals>.multi_step_on_iterator`` (TensorFlow backend): library code closing over the model
(``self``) and over ``one_step_on_data``, a nested tf.function (``jit_compile=model.jit_compile``) around
the model's bound ``train_step`` (``test_step`` for ``evaluate``). Its trace reads, besides the model
(kerasstep.py's walk: layers, configs, user code, variables):

- which step: ``train_step`` or ``test_step`` (a user override is code of the model's class, walked with it;
  so are ``compute_loss`` / ``compute_metrics`` overrides), ``steps_per_execution``,
  ``unrolled_steps_per_execution``, ``jit_compile`` (and the nested function's), the reduction method;
- the optimizer (train steps, and test steps of a user model class, whose code may read it): its class (a
  user class walked), ``get_config()`` exactly (learning rate, or the schedule's config; betas, epsilon,
  clipnorm, weight decay, loss scale, gradient accumulation, EMA), a schedule object and a
  ``LossScaleOptimizer``'s inner optimizer the same way, the model variables it trains (by the walk's
  labels) and which of them get weight decay, its variables by index, path, dtype and shape (bindings
  ``keras-optimizer:<index>:<path>``);
- the compile arguments (``loss``, ``loss_weights``, ``metrics``, ``weighted_metrics``): strings and
  numbers exactly, functions walked as user code (Keras' named), Loss and Metric objects as the optimizer
  (class, config, the functions they hold, a user class's ``self.<name>`` reads); the built losses (path,
  weight, the wrapper object);
- every metric the model tracks (its loss tracker, the compiled metrics and what they contain, metrics a user
  model holds), depth first: class and config (containers by class), their variables
  (``model.metrics_variables``, bindings ``keras-metric:<index>:<path>``).

Building first (``build_state``): plain Keras creates optimizer (and unbuilt metric and model) variables
inside the first trace, so TensorFlow traces ``one_step_on_data`` twice; a hit needs them to exist to bind
them. Before the first trace, graphcache builds that state as Keras' own ``_symbolic_build`` does (the
path Keras takes under a distribution strategy) from the iterator's element spec; a test step's build leaves
the optimizer alone, as plain ``evaluate`` does, and so does a user ``train_step``'s, which builds the optimizer
with the variables it trains (maybe a subset: Keras' build would make every variable's slots): its first trace
builds it (``creates_variables``), building.py learns that build, stored at once (Keras traces the train function
once, no retrace comes); a later process builds it first and stores the trace, the next hits. A model without
``call()`` (keras.io's VAE) gets no build at all (``uncallable``): Keras' would call it. For a functional or sequential model called on the input shapes
it was built for, the model's output spec is its output tensors (Keras' own shortcut in
``Function.compute_output_spec``) instead of a symbolic call of the whole model (``_build_from_outputs``). A model whose state cannot be built so is refused.

Refused (reason ``keras``): as for predict (eager, several steps per execution, distribution, unbuilt or foreign
layers, configs that are not plain, user code that writes ``self`` or reads objects the walk does not know),
and a step function that is not the model's bound ``train_step`` / ``test_step``, ``one_step_on_data``
traced on its own (data that is not a tf.data iterator), an optimizer that trains variables not in the model.
On a hit, the one Python side effect of the trace, ``Layer.__call__`` setting the model's ``_called``, is redone.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

from tensorflow.python.framework import tensor as tensor_lib
from tensorflow.python.util import nest

from . import kerasstep
from .walk import PLAIN_SCALARS, ObjectRule, Uncacheable, Walk, is_library

TRAINER_MODULE = kerasstep.TRAINER_MODULE
FIT_STEP = "_make_function.<locals>.multi_step_on_iterator"
ONE_STEP = "_make_function.<locals>.one_step_on_data"
REASON = kerasstep.REASON
STEP_METHODS = ("train_step", "test_step")
COMPILE_ARGUMENTS = ("loss", "loss_weights", "metrics", "weighted_metrics")
# Keras' metric containers: their content is the metrics they hold (walked) and the compile arguments.
METRIC_CONTAINERS = frozenset({"CompileMetrics", "MetricsList"})
MAX_DEPTH = 16


@dataclass
class FitStep:
    """A trace of Keras' train or test step: the model, the traced function, ``train_step`` or ``test_step``."""

    model: Any
    function: types.FunctionType
    method: str
    jit_compile: bool  # the nested one_step_on_data tf.function's


def fit_step(target: Any) -> FitStep | None:
    """The train or test step ``target`` is (tf.function's target), or None when it is neither. Raises
    Uncacheable for the steps this slice leaves alone."""
    if getattr(target, "__module__", None) != TRAINER_MODULE:
        return None
    qualname = getattr(target, "__qualname__", "")
    if qualname.endswith(ONE_STEP):
        raise Uncacheable(REASON, "Keras' one-step function is traced on its own (data that is not a tf.data iterator)")
    if not qualname.endswith(FIT_STEP):
        return None
    inner = kerasstep.unwrapped(target)
    cells = kerasstep.closure_cells(inner)
    model = cells.get("self")
    keras = _keras()
    if keras is None or not isinstance(model, keras.Model):
        raise Uncacheable(REASON, f"the step closes over a {type(model).__name__}, not a keras.Model")
    one_step = getattr(cells.get("one_step_on_data"), "__wrapped__", None)  # under _autoconvert_optionals
    python_function = getattr(one_step, "python_function", None)
    step_cells = kerasstep.closure_cells(kerasstep.unwrapped(python_function)) if python_function is not None else {}
    bound = step_cells.get("step_function")
    method = getattr(getattr(bound, "__func__", None), "__name__", None)
    if not isinstance(bound, types.MethodType) or bound.__self__ is not model or method not in STEP_METHODS or \
            bound.__func__ is not getattr(type(model), method):
        raise Uncacheable(REASON, "the step does not run the model's own train_step or test_step")
    return FitStep(model, inner, method, bool(getattr(one_step, "_jit_compile", False)))


def _keras() -> Any:
    import sys

    return sys.modules.get("keras")


def _trains(step: FitStep) -> bool:
    return step.method == "train_step"


# -- state built before the first trace ----------------------------------------------------------------------
def build_state(step: FitStep, function_type: Any) -> None:
    """Create the variables Keras would create inside the first trace (see the module docstring), from the
    element spec of the iterator the step is traced for; raises Uncacheable when that cannot be done."""
    model = step.model
    if uncallable(model):
        return  # a user step on a model without call() (keras.io's VAE): plain Keras builds nothing first either
    optimizer = model.optimizer
    # Keras' train_step builds the optimizer with every trainable variable, as _symbolic_build does; a user's builds it
    # with the variables it trains (maybe a subset): its build is learned from its first trace instead (building.py).
    builds_optimizer = _trains(step) and is_library(getattr(type(model), step.method).__module__)
    needed = (not all(layer.built for layer in model._flatten_layers())
              or _unbuilt(model._compile_metrics) or _unbuilt(model._compile_loss)
              or (builds_optimizer and _unbuilt(optimizer)))
    if not needed:
        return
    spec = _element_spec(function_type)
    # Keras' _symbolic_build builds the optimizer too; plain evaluate does not, nor does a user train_step before
    # its trace: it is marked built around the call.
    hidden = not builds_optimizer and _unbuilt(optimizer)
    if hidden:
        optimizer.built = True
    try:
        if not _build_from_outputs(model, spec):
            model._symbolic_build(data_batch=spec)
    except Exception as exc:
        raise Uncacheable(REASON, f"its training state cannot be built before the trace ({type(exc).__name__}: "
                                  f"{exc})") from None
    finally:
        if hidden:
            optimizer.built = False


def _build_from_outputs(model: Any, spec: Any) -> bool:
    """Keras' ``_symbolic_build`` without its symbolic call of the whole model, where Keras' own
    ``Function.compute_output_spec`` takes its shortcut: a model of Keras' functional or sequential class, every
    layer built, inputs of the shapes it was built for. The output spec is then the model's output tensors (as
    Keras gives it for any symbolic call of such a model), and tracing the model once more, most of what a step's
    build cost (about a quarter of a second for ResNet50V2), is not needed. False where the shortcut does not
    apply (Keras' own build is used then)."""
    from keras.src import backend, tree
    from keras.src.models.functional import Functional
    from keras.src.models.sequential import Sequential
    from keras.src.trainers.data_adapters.data_adapter_utils import unpack_x_y_sample_weight

    functional = model if type(model) is Functional else model._functional if type(model) is Sequential else None
    if functional is None or not all(layer.built for layer in model._flatten_layers()):
        return False
    symbolic = tree.map_structure(
        lambda v: None if v is None else backend.KerasTensor(v.shape, backend.standardize_dtype(v.dtype)), spec)
    x, y, sample_weight = unpack_x_y_sample_weight(symbolic)
    inputs = tree.flatten(x)
    if len(inputs) != len(functional._inputs) or any(
            given.shape != built.shape for given, built in zip(inputs, functional._inputs, strict=True)):
        return False
    y_pred = functional.compute_output_spec(x)
    if _unbuilt(model._compile_metrics):
        backend.compute_output_spec(model.compute_metrics, x, y, y_pred, sample_weight=sample_weight)
    if _unbuilt(model._compile_loss):
        backend.compute_output_spec(model._compute_loss, x, y, y_pred, sample_weight=sample_weight, training=False)
    if _unbuilt(model.optimizer):
        model.optimizer.build(model.trainable_variables)
    model._post_build()
    return True


def _unbuilt(obj: Any) -> bool:
    return obj is not None and not obj.built


def _element_spec(function_type: Any) -> Any:
    parameters = list(function_type.parameters.values())
    spec = getattr(parameters[0].type_constraint, "_element_spec", None) if len(parameters) == 1 else None
    if spec is None or not all(isinstance(leaf, tensor_lib.TensorSpec) for leaf in nest.flatten(spec)):
        raise Uncacheable(REASON, "the step's iterator does not yield tensors only")
    return spec


# -- the key ------------------------------------------------------------------------------------------------
def walk_step(step: FitStep, reuse_configs: dict[str, Any] | None = None, before: dict[Any, Any] | None = None,
              rule: ObjectRule | None = None) -> Walk:
    """The walk of a train or test trace (see the module docstring); raises Uncacheable. ``reuse_configs`` and
    ``before``: as kerasstep.walk_step's; ``rule``: how Keras objects user code reads from globals are keyed
    (keying.py passes objects.py's: keras.io's custom train_step updates metrics held in module globals)."""
    model = step.model
    kerasstep.check_model(model)
    if not getattr(model, "compiled", False) or getattr(model, "_compile_config", None) is None:
        raise Uncacheable(REASON, "the model is not compiled")
    walk = Walk(rule, before=before, reuse_configs=reuse_configs)
    walk.packages.update({"keras", "tensorflow"})
    walk.value(("keras fit step", step.method, step.function.__qualname__, *kerasstep.keras_settings(model),
                int(model.unrolled_steps_per_execution), str(getattr(model, "_distribute_reduction_method", None)),
                step.jit_compile),
               "settings")
    known = kerasstep.model_objects(model)
    optimizer = model.optimizer
    walks_optimizer = optimizer is not None and (_trains(step) or not is_library(type(model).__module__))
    if walks_optimizer:
        known[id(optimizer)] = "optimizer"
    metrics = _metrics(model)
    for index, metric in enumerate(metrics):
        known[id(metric)] = f"metric {index}"
    for index, variable in enumerate(model.metrics_variables):  # a user metric's code reads its own
        known.setdefault(id(variable), f"metric variable {index}")
    if walks_optimizer:
        for index, variable in enumerate(optimizer.variables):
            known.setdefault(id(variable), f"optimizer variable {index}")
    # the user's train_step / test_step is its class's code; the layers are the walk's objects layer<i> (what a
    # first trace calls first: a hit, or a build's recipe, redoes it)
    kerasstep.walk_model(walk, model, known)
    _compile_state(walk, model, known)
    for index, metric in enumerate(metrics):
        _metric(walk, metric, index, known)
    kerasstep.bind_variables(walk, list(model.metrics_variables), "keras-metric", "a metric")
    if walks_optimizer:
        _optimizer(walk, optimizer, known)
    return walk


def after_hit(step: FitStep) -> None:
    """What the step's trace does to Python objects, done again when the trace came from the cache: the step
    calls the model (``Layer.__call__`` sets ``_called``), unless it has no call() to run."""
    if not uncallable(step.model):
        step.model._called = True


def uncallable(model: Any) -> bool:
    """Whether ``model`` has no ``call()`` (Keras' Model.call raises): only a user ``train_step`` / ``test_step``
    can use it, and neither Keras' symbolic build nor a step's trace ever calls it."""
    keras = _keras()
    return getattr(type(model), "call", None) is keras.Model.call


def _compile_state(walk: Walk, model: Any, known: dict[int, str]) -> None:
    arguments = model._compile_config.config
    for name in COMPILE_ARGUMENTS:
        _argument(walk, arguments.get(name), f"compile/{name}", known, 0)
    compile_loss = model._compile_loss
    if compile_loss is not None:
        walk.value(("compile loss", type(compile_loss).__name__, compile_loss.reduction,
                    _plain(compile_loss.output_names)), "compile/built")
        for index, flat in enumerate(compile_loss._flat_losses or ()):
            walk.value(("loss", _plain(flat.path), flat.name, _plain(flat.loss_weights)), f"compile/loss{index}")
            kerasstep.keras_object(walk, flat.loss, f"compile/loss{index}", known)


def _argument(walk: Walk, value: Any, where: str, known: dict[int, str], depth: int) -> None:
    """One compile argument: plain values, functions (walked), Loss / Metric objects, containers of those."""
    keras = _keras()
    if depth > MAX_DEPTH:
        raise Uncacheable(REASON, f"{where} is nested too deeply to key")
    if type(value) in PLAIN_SCALARS or isinstance(value, types.FunctionType):
        walk.value(value, where)
    elif isinstance(value, (list, tuple)):
        walk.value(("list", type(value).__name__, len(value)), where)
        for index, item in enumerate(value):
            _argument(walk, item, f"{where}[{index}]", known, depth + 1)
    elif isinstance(value, dict):
        if any(type(key) is not str for key in value):
            raise Uncacheable(REASON, f"{where} is a dict with keys that are not str")
        walk.value(("dict", sorted(value)), where)
        for key in sorted(value):
            _argument(walk, value[key], f"{where}[{key!r}]", known, depth + 1)
    elif isinstance(value, (keras.losses.Loss, keras.metrics.Metric)):
        walk.value(("object", known.get(id(value), "")), where)
        kerasstep.keras_object(walk, value, where, known)
    else:
        raise Uncacheable(REASON, f"{where} is a {type(value).__qualname__} (what it computes is not keyed)")


def _metrics(model: Any) -> list[Any]:
    """Every metric the model tracks, depth first (containers before what they hold), each once."""
    keras = _keras()
    found: dict[int, Any] = {}

    def visit(value: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Uncacheable(REASON, "the model's metrics are nested too deeply to key")
        if isinstance(value, keras.metrics.Metric):
            if id(value) in found:
                return
            found[id(value)] = value
            for name in sorted(vars(value)):
                if not name.startswith("_tracker"):
                    visit(vars(value)[name], depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item, depth + 1)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item, depth + 1)

    for metric in model.metrics:
        visit(metric, 0)
    return list(found.values())


def _metric(walk: Walk, metric: Any, index: int, known: dict[int, str]) -> None:
    where = f"metric{index}"
    if type(metric).__name__ in METRIC_CONTAINERS and is_library(type(metric).__module__):
        walk.value(("metric container", type(metric).__name__, metric.name,
                    _plain(getattr(metric, "output_names", None))), where)
        return
    walk.value(("metric", metric.name, [variable.path for variable in metric.variables]), where)
    kerasstep.keras_object(walk, metric, where, known)


def _optimizer(walk: Walk, optimizer: Any, known: dict[int, str]) -> None:
    keras = _keras()
    walk.objects.setdefault("optimizer0", optimizer)  # an unbuilt one a user step builds: building.py learns it
    current = optimizer
    for depth in range(MAX_DEPTH):  # a LossScaleOptimizer wraps another
        where = f"optimizer{depth}"
        kerasstep.keras_object(walk, current, where, known)
        schedule = getattr(current, "_learning_rate", None)
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            kerasstep.keras_object(walk, schedule, f"{where}/learning_rate", known)
        trained = [known.get(id(variable)) for variable in getattr(current, "_trainable_variables", ())]
        if any(label is None for label in trained):
            raise Uncacheable(REASON, f"{where} trains variables that are not the model's")
        decays = [bool(current._use_weight_decay(variable)) for variable in current._trainable_variables] \
            if current.weight_decay else []
        walk.value(("trains", trained, decays), f"{where}/trains")
        current = getattr(current, "inner_optimizer", None)
        if current is None:
            break
    kerasstep.bind_variables(walk, list(optimizer.variables), "keras-optimizer", "the optimizer")


def _plain(value: Any) -> Any:
    """A structure of a compiled loss or metric (output names, paths, weights) as exact text, or refused."""
    text = kerasstep.config_text(value)
    if not isinstance(text, str):
        raise Uncacheable(REASON, f"a compiled structure holds a {type(value).__name__} (not plain)")
    return text


__all__ = ["FitStep", "after_hit", "build_state", "fit_step", "uncallable", "walk_step"]
