"""Keras 3's predict step at the trace hook: the key of ``model.predict``'s trace, from the model, not its Python.

``model.predict`` (TensorFlow backend) calls ``model.predict_function``, a ``tf.function`` over
``make_predict_function.<locals>.one_step_on_data_distributed``: library code closing over the model
(``self``). What that trace reads is the model, so the ``code`` part of its key is a walk of the model
instead of the function (walk.py's Walk, so user code is hashed the same way):

- Keras' settings the trace reads: ``floatx``, ``epsilon``, ``image_data_format``, the global dtype
  policy, the backend, flash attention and NNX switches; the model's ``jit_compile`` (the nested XLA
  function is part of the stored library), ``steps_per_execution``
  (more than 1 refused: ``multi_step_on_data``), ``run_eagerly`` (never a tf.function), its distribution
  strategy and Keras' distribution (any but the default refused);
- every layer, the model first (``_flatten_layers``, in that order): its class (a user class walked:
  methods' code, the globals and closures they read; a library class by name, Keras' version in the
  ``versions`` part), its ``get_config()`` and build config keyed exactly (repr of plain JSON-like values,
  else walk.py's plain values; refused when it fails or holds anything else, but a user class whose config fails
  is keyed by its state: modelstate.py; of Keras' own functional and sequential models, their graph of layer
  calls instead, topology.py, each layer's config taken on its own), ``built`` (an unbuilt layer would create
  variables inside the trace: refused, unless its build is Keras' default: modelstate.builds_nothing), its lookup
  tables by content (preprocessing.py), ``_called`` (of sublayers: one the trace calls first is changed by
  it, so the walk after the trace differs and it is not stored; InputLayers are never called),
  ``autocast``, ``supports_masking``, its call-argument flags; the eager tensors it holds as attributes
  (``Normalization``'s mean and variance: bindings, by value); the functions it holds (an ``activation``
  of user code is in the config by name only: walked as user code; a ``Lambda``'s function); objects of user
  classes that Keras' code calls (a regularizer, a constraint, a callable activation: ``called_kind``), held
  or attached to a variable, as Keras objects (``keras_object``: class walked, config or state); partials and
  bound methods of other objects refused;
  layers that run foreign code (``TFSMLayer``, ``TorchModuleWrapper``, ``JaxLayer``, ``FlaxLayer``) refused;
- for a user class, each ``self.<name>`` its methods read (outside ``__init__``/``build``/config methods):
  a layer or variable of the model (by its index), a dtype policy, a seed generator, containers of those,
  or a plain value; a class attribute (a user class's is walked, a library's named); anything else, an
  attribute assigned outside those methods, or ``self`` handed to other code, refused (instance.py's
  ``self_reads`` and ``keyed_state``, shared with tf.function methods, with Keras' objects as this module's rule);
- the variables, ``model.variables`` order (weights, then seed-generator states): index, path, shape, dtype,
  trainable. Their tf.Variables are the walk's bindings (``keras:<index>:<path>``): a hit binds this
  process's variables by index and path, each checked by dtype and shape (stored.bind), and a trace that
  captures anything else is refused (stored.capture_paths).

What Keras does outside the trace (``make_predict_function``, the data iterator, callbacks) runs as ever.
The one Python side effect inside it, ``Layer.__call__`` setting ``_called`` on the model, is redone on a
hit (``after_hit``); any other change the trace makes to what the walk reads (a sublayer's ``_called``,
its config, an attribute user code reads) makes the walk after the trace differ: such a trace is not stored.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorflow.python.framework import ops
from tensorflow.python.ops import resource_variable_ops

from . import modelstate, preprocessing
from .instance import keyed_state, self_chains, self_reads
from .topology import CONFIG_SCALARS, PLAIN_SCALAR_TYPES, graph_config, is_graph_model, operations
from .walk import Uncacheable, Walk, is_library

TRAINER_MODULE = "keras.src.backend.tensorflow.trainer"
PREDICT_STEP = "make_predict_function.<locals>.one_step_on_data_distributed"
MULTI_STEP = "make_predict_function.<locals>.multi_step_on_data"
REASON = "keras"
# Layers that run code the walk cannot see (a loaded SavedModel, another framework's module).
FOREIGN_LAYERS = frozenset({"TFSMLayer", "TorchModuleWrapper", "JaxLayer", "FlaxLayer"})
# Methods of a user layer that Keras runs outside a predict trace: they may assign attributes.
SETUP_METHODS = frozenset({"__init__", "__new__", "build", "get_config", "from_config", "build_from_config",
                           "get_build_config", "compile", "compile_from_config", "get_compile_config",
                           "save_own_variables", "load_own_variables", "__repr__", "__str__", "__setattr__"})
KERAS_SWITCHES = ("is_flash_attention_enabled", "is_nnx_enabled")  # keras.config switches layers read at call time
SCALAR_PREFIXES = {kind: kind.__name__[0] for kind in CONFIG_SCALARS}  # a scalar's text: N, b, i, f, s + its repr
# What held() keys or refuses (anything else held is keyed by the config, the layer walk or the variables)
HELD_KINDS = (types.FunctionType, ops.EagerTensor, types.MethodType, functools.partial)
LAYER_FLAGS = ("built", "trainable", "autocast", "supports_masking", "_call_has_training_arg", "_call_has_mask_arg")


@dataclass
class PredictStep:
    """A trace of Keras' predict step: the model it closes over and the step function itself."""

    model: Any
    function: types.FunctionType


def predict_step(target: Any) -> PredictStep | None:
    """The predict step ``target`` is (tf.function's target, under Keras' do_not_convert wrapper), or None
    when it is not Keras' predict step. Raises Uncacheable for the predict steps this slice leaves alone."""
    if getattr(target, "__module__", None) != TRAINER_MODULE:
        return None
    qualname = getattr(target, "__qualname__", "")
    if qualname.endswith(MULTI_STEP):
        raise Uncacheable(REASON, "the model runs several steps per execution (steps_per_execution > 1)")
    if not qualname.endswith(PREDICT_STEP):
        return None
    inner = unwrapped(target)
    cells = closure_cells(inner)
    keras = sys.modules.get("keras")
    model = cells.get("self")
    if keras is None or not isinstance(model, keras.Model):
        raise Uncacheable(REASON, f"the predict step closes over a {type(model).__name__}, not a keras.Model")
    return PredictStep(model, inner)


def unwrapped(function: Any) -> Any:
    """``function`` under its Python decorators (Keras' do_not_convert, functools.wraps chains)."""
    while isinstance(getattr(function, "__wrapped__", None), types.FunctionType):
        function = function.__wrapped__
    return function


def closure_cells(function: Any) -> dict[str, Any]:
    """A Python function's closure by free-variable name ({} for anything else)."""
    if not isinstance(function, types.FunctionType):
        return {}
    return dict(zip(function.__code__.co_freevars, (cell.cell_contents for cell in function.__closure__ or ()),
                    strict=True))


def after_hit(step: PredictStep) -> None:
    """What the predict trace does to Python objects, done again when the trace came from the cache."""
    import keras

    if type(step.model).predict_step is keras.Model.predict_step:  # which calls the model: Layer.__call__
        step.model._called = True


def walk_step(step: PredictStep, reuse_configs: dict[str, Any] | None = None,
              before: dict[Any, Any] | None = None) -> Walk:
    """The walk of a predict trace's model (see the module docstring); raises Uncacheable. ``reuse_configs``:
    the walk before the trace's ``configs``, ``before``: the layers' ``_called`` before the trace
    (objects.before_trace), both for the walk after it (keying.same_reads)."""
    model = step.model
    check_model(model)
    walk = Walk(before=before, reuse_configs=reuse_configs)
    walk.packages.update({"keras", "tensorflow"})
    walk.value(("keras predict step", step.function.__qualname__, *keras_settings(model)), "settings")
    walk_model(walk, model, model_objects(model))
    return walk


def keras_settings(model: Any) -> list[Any]:
    """Keras' global settings a step's trace reads, and the model's compile switches."""
    import keras

    switches = [getattr(keras.config, name)() for name in KERAS_SWITCHES if hasattr(keras.config, name)]
    return [keras.config.floatx(), keras.config.epsilon(), keras.config.image_data_format(),
            keras.config.dtype_policy().name, keras.config.backend(), switches, bool(model.jit_compile),
            int(model.steps_per_execution)]


def model_objects(model: Any) -> dict[int, str]:
    """The model's variables and layers by id, labelled as the walk keys them (``_keras_state``'s ``known``)."""
    known: dict[int, str] = {}
    for index, variable in enumerate(model.variables):
        known[id(variable)] = f"variable {index}"
    for index, layer in enumerate(model._flatten_layers(include_self=True, recursive=True)):
        known[id(layer)] = f"layer {index}"
    return known


def walk_model(walk: Walk, model: Any, known: dict[int, str], where: str = "",
               called: Callable[[Any], bool] | None = None) -> None:
    """Every layer and variable of ``model`` into ``walk`` (see the module docstring); ``known`` labels the
    objects a user class may read off ``self`` (model_objects(), and a train step's optimizer and metrics).
    ``where`` prefixes the paths (layers ``<where>layer<i>``, bindings ``<where>keras:<i>:<path>``); ``called``
    says what a layer's ``_called`` is keyed as (Keras' steps: the model as called, a sublayer as it was before
    the trace: one the trace calls first, MultiHeadAttention's projections, is set by it, and set again by a
    hit from the entry's ``called``). Each layer is the walk's object ``<where>layer<i>``."""
    layers = model._flatten_layers(include_self=True, recursive=True)
    for index, layer in enumerate(layers):
        flag = (index == 0 or called_before(walk, layer)) if called is None else called(layer)
        _layer(walk, layer, index, known, f"{where}layer{index}", flag)
        walk.objects.setdefault(f"{where}layer{index}", layer)
    bind_variables(walk, model.variables, f"{where}keras", "the model")


def called_before(walk: Walk, layer: Any) -> bool:
    """A layer's ``_called`` as keyed: as it was before the miss's trace (``walk.before``), else as it is."""
    before = walk.before.get(id(layer))
    return bool(layer._called) if before is None else bool(before)


def bind_variables(walk: Walk, variables: list[Any], prefix: str, whose: str) -> None:
    """Keras variables by index, path, shape, dtype and trainable; their tf.Variables are the walk's bindings
    (``<prefix>:<index>:<path>``): a hit binds this process's by path, each checked by dtype and shape."""
    for index, variable in enumerate(variables):
        value = getattr(variable, "_value", None)
        if not isinstance(value, resource_variable_ops.BaseResourceVariable):
            raise Uncacheable(REASON, f"{whose}'s variable {variable.path} is a {type(value).__name__}, not a "
                                      "resource variable (uninitialized, or another backend's)")
        walk.value(("variable", index, variable.path, bool(variable.trainable), variable.constraint is None,
                    variable.regularizer is None), f"{prefix}:{index}")
        if variable.constraint is not None or variable.regularizer is not None:
            attached_objects(walk, variable, f"{prefix}:{index}")
        walk.value(value, f"{prefix}:{index}:{variable.path}")  # dtype, shape, device: a binding of the walk
        walk.objects.setdefault(f"{prefix}:{index}:{variable.path}", variable)


def check_model(model: Any) -> None:
    """Refuses models whose steps the key cannot cover (eager, several steps per execution, distributed)."""
    import keras
    import tensorflow as tf

    if model.run_eagerly:
        raise Uncacheable(REASON, "the model runs eagerly")
    if model.steps_per_execution != 1:
        raise Uncacheable(REASON, "the model runs several steps per execution (steps_per_execution > 1)")
    if getattr(model, "_distribute_strategy", None) is not None or tf.distribute.has_strategy():
        raise Uncacheable(REASON, "the model runs under a distribution strategy")
    if keras.distribution.distribution() is not None:
        raise Uncacheable(REASON, "a Keras distribution is set")


def _layer(walk: Walk, layer: Any, index: int, known: dict[int, str], path: str, called: bool) -> None:
    import keras

    cls = type(layer)
    where = f"layer {index} ({layer.name}, {cls.__name__})"
    if cls.__name__ in FOREIGN_LAYERS:
        raise Uncacheable(REASON, f"{where} runs code the key cannot see")
    if not layer.built and not modelstate.builds_nothing(layer):
        raise Uncacheable(REASON, f"{where} is not built (it would create its variables inside the trace)")
    walk.value(cls, f"{path}/class")
    text = _layer_config(walk, layer, path, where, known)
    if is_graph_model(layer):  # its operations that are not layers: their code (their configs are in the text)
        for number, operation in enumerate(operations(layer)):
            walk.value(type(operation), f"{path}/operation{number}/class")
    try:
        walk.value(("layer", index, layer.name, layer.dtype_policy.name, text,
                    *[getattr(layer, flag, None) for flag in LAYER_FLAGS], called), path)  # flat: one record
    except Uncacheable as exc:
        raise Uncacheable(REASON, f"{where}: its config is not plain ({exc.detail})") from None
    held(walk, layer, path, where, known)
    preprocessing.key_lookup(walk, layer, path)
    if isinstance(layer, keras.layers.Lambda):
        walk.value(layer.function, f"{path}/function")
    for owner in cls.__mro__:
        if not is_library(owner.__module__):
            instance_reads(walk, layer, owner, where, known)


def _layer_config(walk: Walk, layer: Any, path: str, where: str, known: dict[int, str]) -> Any:
    """The layer's config and build config as config_text (of Keras' functional and sequential models, their graph
    of layer calls: topology.py); in the walk after a miss's trace, a library layer's is the walk before's
    (trust.LIBRARY_STEPS_KEEP_CONFIGS: configs are most of a walk's time). A user class whose get_config() fails
    is keyed by its state instead (modelstate.py)."""
    reused = walk.reuse_configs
    if reused is not None and path in reused and is_library(type(layer).__module__):
        text = reused[path]
    else:
        try:
            text = config_text(graph_config(layer) if is_graph_model(layer) else
                               (layer.get_config(), layer.get_build_config()))
        except Exception as exc:  # NotImplementedError for subclassed layers without a config, and any other
            text = modelstate.state(walk, layer, path, where, state_rule(known), exc)
    walk.configs[path] = text
    return text


def held(walk: Walk, layer: Any, path: str, where: str, known: dict[int, str]) -> None:
    """What any layer holds that its config names only, or not at all: eager tensors it made at build
    (Normalization's mean), by value; functions (an ``activation`` of user code is in the config by name
    only: walked as user code; Keras' own named), also in lists, tuples and dicts; partials and bound methods
    of them; objects of user classes Keras calls (``called_kind``), as Keras objects; lookup tables, by content
    (preprocessing.key_table). What to do with an attribute, or an item of a container attribute, is looked up by
    its class (``_role``, cached: a walk meets ~70 attributes a layer, twice for a miss)."""
    for name, value in vars(layer).items():
        kind = type(value)
        if kind in PLAIN_SCALAR_TYPES:  # most of a layer's attributes: nothing to key (a hot loop)
            continue
        role = _role(kind) if value.__class__ is kind else _role_of(value)  # _role_of, inlined: the hot loop
        if role == _SKIP:
            continue
        if role == _TABLE:
            preprocessing.key_table(walk, value, f"{path}.{name}", f"{where}.{name}")
            continue
        items = (value.values() if isinstance(value, dict) else value) if role == _CONTAINER else (value,)
        for index, item in enumerate(items):
            item_role = role if item is value else _role_of(item)
            if item_role in (_SKIP, _CONTAINER, _TABLE):
                continue  # plain values, layers, variables, trackers (and containers in containers): nothing to key
            at = f"{path}.{name}" if item is value else f"{path}.{name}[{index}]"
            _held_item(walk, layer, item, item_role, name, at, known, where)


def _held_item(walk: Walk, layer: Any, item: Any, role: int, name: str, at: str, known: dict[int, str],
               where: str) -> None:
    if role == _CALLED:  # an object of a user class Keras calls (a regularizer, a constraint)
        if walk.once(item, at):
            keras_object(walk, item, at, known)
    elif isinstance(item, types.FunctionType):
        if not _method_wrapper(item, layer):  # Keras' per-instance build and quantize: the class's is walked
            walk.value(item, at)
    elif isinstance(item, ops.EagerTensor):
        walk.value(item, at)
    elif isinstance(item, types.MethodType) and id(item.__self__) in known:
        walk.value(item.__func__, at)
    else:  # a partial, or a method of an object the walk does not key
        raise Uncacheable(REASON, f"{where} holds a {type(item).__name__} as {name} (what it calls is not keyed)")


# What held() does with an attribute, or an item of a list, tuple or dict attribute, by its class.
_SKIP, _CONTAINER, _TABLE, _HELD, _CALLED = range(5)


@functools.cache  # by class: held() asks for each of a layer's ~70 attributes, and a model holds few classes
def _role(kind: type) -> int:
    if issubclass(kind, (dict, list, tuple)):
        return _CONTAINER
    if issubclass(kind, HELD_KINDS):
        return _HELD
    if issubclass(kind, preprocessing.TABLE_INTERFACE):
        return _TABLE
    return _CALLED if called_kind(kind) else _SKIP


def _role_of(value: Any) -> int:
    """``_role`` of an object's class; of a proxy's (its ``__class__`` is not its type) the first in ``_role``'s order
    of its two classes' roles, as isinstance sees both."""
    kind = type(value)
    if value.__class__ is kind:
        return _role(kind)
    both = (_role(kind), _role(value.__class__))
    return next((role for role in _ROLE_ORDER if role in both), _SKIP)


_ROLE_ORDER = (_CONTAINER, _HELD, _TABLE, _CALLED)


def keras_object(walk: Walk, obj: Any, where: str, known: dict[int, str]) -> None:
    """A Keras object a step reads (optimizer, schedule, loss, metric, or a user regularizer, constraint or
    activation object a layer or variable holds): class, config, held functions, and a user class's reads off
    ``self`` (this module's rules for layers)."""
    cls = type(obj)
    walk.value(cls, f"{where}/class")
    try:
        config = obj.get_config()
    except Exception as exc:  # a user schedule without get_config (the Transformer tutorial's): its state
        config = _without_config(walk, obj, where, known, exc)
    try:
        walk.value(("config", config_text(config)), where)
    except Uncacheable as exc:
        raise Uncacheable(REASON, f"{where} ({cls.__name__}): its config is not plain ({exc.detail})") from None
    held(walk, obj, where, f"{where} ({cls.__name__})", known)
    for owner in cls.__mro__:
        if not is_library(owner.__module__):
            instance_reads(walk, obj, owner, f"{where} ({cls.__name__})", known)


def _without_config(walk: Walk, obj: Any, where: str, known: dict[int, str], failure: BaseException) -> Any:
    """What keras_object keys in place of a config that fails: an optimizer's config without its schedule (keyed
    apart), a user schedule's state (modelstate.py); else refused."""
    import keras

    label = f"{where} ({type(obj).__name__})"
    if isinstance(obj, keras.optimizers.Optimizer):
        return modelstate.optimizer_config(obj, label, failure)
    return modelstate.state(walk, obj, where, label, state_rule(known), failure)


@functools.cache  # by class: held() asks for each of a layer's ~70 attributes, and a model holds few classes
def called_kind(kind: type) -> bool:
    """Whether objects of ``kind`` are of a user class that Keras' own code may call inside a trace: a callable one
    (an activation), or one of a Keras base class (a regularizer, a constraint, ...). Such an object's config names
    its class only; its code is what runs (keras_object walks it). Layers and models are keyed as layers."""
    import keras

    if is_library(kind.__module__) or issubclass(kind, (type, keras.layers.Layer)):
        return False
    return any("__call__" in vars(klass) for klass in kind.__mro__[:-1]) or any(
        is_library(base.__module__) and base.__module__.startswith("keras") for base in kind.__mro__[1:])


def attached_objects(walk: Walk, variable: Any, path: str) -> None:
    """A Keras variable's constraint (applied after each optimizer update) and regularizer (in the loss): set by
    ``add_weight``, not always in the layer's config (a user layer's build), so keyed here, as Keras objects."""
    for name in ("constraint", "regularizer"):
        attached = getattr(variable, name, None)
        if attached is not None and walk.once(attached, f"{path}/{name}"):
            keras_object(walk, attached, f"{path}/{name}", {})


def _method_wrapper(item: types.FunctionType, layer: Any) -> bool:
    wrapped = getattr(item, "__wrapped__", None)
    return isinstance(wrapped, types.MethodType) and wrapped.__self__ is layer


def instance_reads(walk: Walk, layer: Any, owner: type, where: str, known: dict[int, str]) -> None:
    """Each ``self.<name>`` the methods of ``owner`` (a user class) read, keyed (see the module docstring)."""
    names: dict[str, None] = {}
    chains: dict[tuple[str, ...], None] = {}
    for name, attr in vars(owner).items():
        if name in SETUP_METHODS:
            continue
        functions = [attr.__func__] if isinstance(attr, (staticmethod, classmethod)) else \
            [f for f in (attr.fget, attr.fset, attr.fdel) if f] if isinstance(attr, property) else [attr]
        for function in functions:
            if isinstance(function, types.FunctionType) and not isinstance(attr, staticmethod):
                names.update(dict.fromkeys(self_reads(function, f"{where}: {owner.__qualname__}.{name}", REASON)))
                chains.update(dict.fromkeys(self_chains(function)))
    key_self_reads(walk, layer, list(names), list(chains), where, known)


def key_self_reads(walk: Walk, layer: Any, names: list[str], chains: list[tuple[str, ...]], where: str,
                   known: dict[int, str]) -> None:
    """Each ``self.<name>`` (and ``self.<a>.<b>`` chain) user code reads off a Keras ``layer``, keyed: the model's
    objects by label (``known``), other values by instance.keyed_state's rules."""
    rule = state_rule(known)
    for name in names:
        if name in vars(layer):
            keyed_state(walk, vars(layer)[name], f"{where} self.{name}", 0, rule, REASON)
        elif not any(name in vars(cls) for cls in type(layer).__mro__):
            raise Uncacheable(REASON, f"{where} reads self.{name}, which no class defines (a __getattr__)")
    for chain in chains:  # self.inner.k: what a labelled object (a layer) holds is read too, not only the label
        held_value = vars(layer).get(chain[0])
        if held_value is not None and id(held_value) in known:
            _known_chain(walk, held_value, chain[1:], f"{where} self.{chain[0]}", known, rule)


def _known_chain(walk: Walk, current: Any, chain: tuple[str, ...], where: str, known: dict[int, str],
                 rule: Any) -> None:
    """An attribute chain read off a model object: through labelled objects, to the first value ``rule`` keys; a
    method of a labelled object ends it (its code is that object's class walk)."""
    for index, attribute in enumerate(chain):
        try:
            current = getattr(current, attribute)
        except Exception as exc:  # the trace fails the same way: keyed as missing
            walk.value(("missing attribute", attribute, type(exc).__name__), where)
            return
        where = f"{where}.{attribute}"
        if isinstance(current, types.MethodType) and id(current.__self__) in known:
            return
        if id(current) in known and index < len(chain) - 1:
            continue
        keyed_state(walk, current, where, 0, rule, REASON)
        return


def state_rule(known: dict[int, str]) -> Callable[[Walk, Any, str, int], bool]:
    """The rule (instance.keyed_state's) for what a user Keras object holds: the model's objects by label."""
    return functools.partial(_keras_state, known)


def _keras_state(known: dict[int, str], walk: Walk, value: Any, where: str, depth: int) -> bool:
    """The objects of a model a user layer's code may read off ``self``: keyed by their label in the walk (a layer,
    a variable), a dtype policy by name, a seed generator by its state variable; False for anything else."""
    import keras

    label = known.get(id(value))
    if label is not None:
        walk.value(("model object", label), where)
    elif isinstance(value, keras.DTypePolicy):
        walk.value(("dtype policy", type(value).__name__, value.name), where)
    elif isinstance(value, keras.random.SeedGenerator):
        state = known.get(id(value.state))
        if state is None:
            raise Uncacheable(REASON, f"{where} is a seed generator whose state is not a model variable")
        walk.value(("seed generator", state), where)
    else:
        return False
    return True


def config_text(value: Any) -> Any:
    """A config as exact text when it is made of plain JSON-like values only (``repr`` tells tuple from list,
    int from float, and keeps dict order; Keras' and TensorFlow's tracked lists and dicts as the list and dict
    they stand for), else the config itself (walk.py keys it, or refuses what is not plain)."""
    parts: list[str] = []
    return "".join(parts) if _config_repr(value, parts, 0) else value


def _config_repr(value: Any, parts: list[str], depth: int) -> bool:
    kind = type(value)
    prefix = SCALAR_PREFIXES.get(kind)
    if prefix is not None:
        parts.append(prefix + repr(value))
        return True
    if depth > 64:
        return False
    if isinstance(value, dict) and (kind is dict or is_library(kind.__module__)):
        parts.append("{")
        for key, item in value.items():
            if type(key) is not str:
                return False
            parts.append(f"{key!r}:")
            if not _config_repr(item, parts, depth + 1):
                return False
            parts.append(",")
        parts.append("}")
        return True
    if kind is tuple or (isinstance(value, list) and (kind is list or is_library(kind.__module__))):
        parts.append("(" if kind is tuple else "[")
        for item in value:
            if not _config_repr(item, parts, depth + 1):
                return False
            parts.append(",")
        parts.append(")" if kind is tuple else "]")
        return True
    return False


__all__ = ["PredictStep", "after_hit", "bind_variables", "check_model", "config_text", "held", "instance_reads",
           "keras_settings", "model_objects", "predict_step", "state_rule", "walk_model", "walk_step", "called_before"]
