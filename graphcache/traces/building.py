"""Optimizer variables a custom training loop's first trace creates: built before the trace in a later process.

Why: in a custom loop (``optimizer.apply_gradients(zip(grads, model.trainable_variables))`` inside a
``@tf.function train_step``) Keras builds the optimizer at its first ``apply``, inside the step's first trace:
that trace creates the optimizer's variables (Adam's moments), so it cannot be served from the cache (a hit runs
no Python: nothing would create them), and TensorFlow traces the step a second time once they exist. Keras' own
trainer builds the optimizer before tracing instead (``_symbolic_build``), as graphcache's fit path does
(kerasfit.build_state); a custom loop's code may build it with any variables, or not at all, so which build is
coming cannot be read off the code.

It is learned instead. The first trace's key (``K1``) covers everything that trace reads, the unbuilt optimizer
included (objects.py), so any process with the same key runs the same Python: it builds the same optimizers
with the same variables. After a miss's first trace (``learn``), when every variable it created is one a Keras
optimizer the key reached made in its build, from variables the key binds, graphcache notes *the build*: each
optimizer by its walk path, the variables it was built with by their walk paths, the paths of what it made,
and the layers the trace called first. That note (a ``Recipe``) is stored under ``K1`` once TensorFlow's
retrace of the same function (the optimizers built) has been cached or hit (``Pending``: a retrace that is not
cacheable, a side effect on what its key reads, leaves no note). A later process that computes ``K1`` finds the
note (``apply``): it builds each optimizer before the trace exactly as ``apply_gradients`` does
(``with backend.name_scope(optimizer.name, caller=optimizer): optimizer.build(variables)``, then ``built``), sets
the layers' ``_called`` as the first trace would, and keys the trace again: that key is the retrace's, a hit.

What makes the build the same as the trace's: the optimizer's class builds with Keras' own code only (a user
class in its MRO may not define ``build``, ``apply``, ``apply_gradients`` or the ``add_variable`` family),
its variables are made by zeros or constant initializers of its config (Keras' optimizers), the variables'
paths are checked (made under the optimizer's own name scope, no outer Keras name scope, then again after the
build against the note), and an eagerly made variable acts as the one tf.function's first trace makes (walk.py
keys both alike). Values, names and results are plain TensorFlow's (tests/test_traces_loops.py: bitwise).
Anything else a first trace creates (a layer built inside it, a ``tf.Variable`` made in user code, a user
optimizer's own build) is refused as before (``creates_variables``): only TensorFlow's retrace is cached.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from tensorflow.python.ops import variable_scope

from ..errors import CorruptEntryError
from .walk import Uncacheable, Walk, is_library

MAGIC = b"GCBUILD1"
REASON = "creates_variables"
# Methods of an optimizer a build or its replay runs (or that decide how apply builds): Keras' own only.
BUILD_METHODS = ("build", "apply", "apply_gradients", "add_variable", "add_variable_from_reference",
                 "add_optimizer_variables", "_var_key", "_track_variable", "_check_variables_are_known")


@dataclass
class Build:
    optimizer: str  # walk path of the optimizer
    variables: list[str]  # walk paths of the variables it was built with (bindings), in order
    made: list[str]  # Keras paths of the variables the build made, in order
    names: dict[str, str]  # Keras name -> the tf.Variable's name the trace gave it (a graph's unique name scope)


@dataclass
class Recipe:
    """What a first trace created and called, to redo before the trace in a later process."""

    builds: list[Build]
    called: list[str] = field(default_factory=list)  # layers (walk paths) the first trace called first


@dataclass
class Pending:
    """A recipe learned from a first trace, stored once the retrace it stands for is cached (hook.py)."""

    key: Any  # keying.TraceKey of the first trace
    recipe: Recipe
    name: str
    root: Any  # the traced function (held: its id is the pending note's)
    seconds: float  # the first trace's


def _keras() -> Any:
    return sys.modules.get("keras")


def unbuilt(walk: Walk) -> dict[str, tuple[Any, set[int]]]:
    """The Keras optimizers the walk keyed that are not built, with the ids of the variables they hold: what a
    first trace may build (snapshot before it)."""
    keras = _keras()
    if keras is None:
        return {}
    return {path: (obj, {id(variable) for variable in obj.variables}) for path, obj in walk.objects.items()
            if isinstance(obj, keras.optimizers.Optimizer) and not obj.built}


def learn(walk: Walk, before: dict[str, tuple[Any, set[int]]], created: list[Any], called: list[str]) -> Recipe:
    """The recipe of a first trace that created ``created`` (tf.Variables), or Uncacheable when the optimizers'
    builds do not explain them exactly (see the module docstring)."""
    built = {path: entry for path, entry in before.items() if entry[0].built}
    inner = {id(getattr(obj, "inner_optimizer", None)) for obj, _ in built.values()}
    by_value = {id(obj): path for path, obj in walk.bindings.items()}
    builds, made_ids = [], set()
    for path, (optimizer, held) in built.items():
        if id(optimizer) in inner:  # a LossScaleOptimizer's inner one: built by its own build
            continue
        _check_library_build(optimizer, path)
        variables = []
        for variable in optimizer._trainable_variables:
            found = by_value.get(id(getattr(variable, "_value", None)))
            if found is None or walk.objects.get(found) is not variable:
                raise Uncacheable(REASON, f"{path} was built with a variable its key does not bind ({variable.path})")
            variables.append(found)
        made = [variable for variable in optimizer.variables if id(variable) not in held]
        prefix = f"{optimizer.name}/"
        if any(not variable.path.startswith(prefix) for variable in made):
            raise Uncacheable(REASON, f"{path} was built under another Keras name scope than its own")
        names = {variable.name: variable._value.name.rpartition(":")[0] for variable in made}
        if len(names) != len(made):
            raise Uncacheable(REASON, f"{path} made two variables of one name")
        made_ids.update(id(variable._value) for variable in made)
        builds.append(Build(path, variables, [variable.path for variable in made], names))
    if not builds or made_ids != {id(variable) for variable in created}:
        names = ", ".join(str(getattr(variable, "name", "?")) for variable in created[:8])
        raise Uncacheable(REASON, f"its trace creates variables ({names}) that are not its optimizers' builds")
    return Recipe(builds, called)


def _check_library_build(optimizer: Any, path: str) -> None:
    current = optimizer
    while current is not None:
        for klass in type(current).__mro__:
            if not is_library(klass.__module__) and any(name in vars(klass) for name in BUILD_METHODS):
                raise Uncacheable(REASON, f"{path}: {klass.__qualname__} defines how it builds (user code)")
        current = getattr(current, "inner_optimizer", None)


def apply(walk: Walk, recipe: Recipe) -> bool:
    """Build what the recipe says before the trace (see the module docstring); False, with nothing changed,
    when this process's objects are not what the recipe names. Raises ValueError when a build made other
    variables than the recipe's (a damaged entry: the optimizer is built then)."""
    from keras.src import backend
    from keras.src.backend.common.name_scope import current_path

    keras = _keras()
    if keras is None or current_path():
        return False
    planned = []
    for build in recipe.builds:
        optimizer = walk.objects.get(build.optimizer)
        variables = [walk.objects.get(path) for path in build.variables]
        if not isinstance(optimizer, keras.optimizers.Optimizer) or optimizer.built or any(
                not isinstance(variable, keras.Variable) or walk.bindings.get(path) is not variable._value
                for path, variable in zip(build.variables, variables, strict=True)):
            return False
        planned.append((build, optimizer, variables))
    layers = [walk.objects.get(path) for path in recipe.called]
    if any(not isinstance(layer, keras.layers.Layer) for layer in layers):
        return False
    for build, optimizer, variables in planned:
        held = {id(variable) for variable in optimizer.variables}
        with variable_scope.variable_creator_scope(_named(build.names)), \
                backend.name_scope(optimizer.name, caller=optimizer):  # as BaseOptimizer.apply builds
            optimizer.build(variables)
        optimizer.built = True
        made = [variable.path for variable in optimizer.variables if id(variable) not in held]
        if made != build.made:
            raise ValueError(f"building {build.optimizer} made {made[:4]}..., its stored first trace {build.made[:4]}...")
    for layer in layers:
        layer._called = True
    return True


def _named(names: dict[str, str]) -> Any:
    """A variable creator giving each variable the name the first trace's graph gave it: inside a graph a name
    scope entered twice is made unique (``adam_1`` becomes ``adam_1_1``), eagerly it is not."""
    def creator(next_creator: Any, **kwargs: Any) -> Any:
        name = names.get(str(kwargs.get("name")))
        if name is None:
            raise ValueError(f"the build makes a variable {kwargs.get('name')!r} its stored first trace did not")
        kwargs["name"] = name + "/"  # a scope name ending in "/" is taken as it is, not under the current scope
        return next_creator(**kwargs)

    return creator


def built_in_trace(walk: Walk, before: dict[str, tuple[Any, set[int]]]) -> list[Any]:
    """The builds (JSON) of the optimizers a trace built without making variables (an SGD without momentum has
    none): stored with the trace, redone on a hit (``redo``); [] when it built none. Raises Uncacheable
    (``side_effect``) when a build is not one ``learn`` can note."""
    if not any(optimizer.built for optimizer, _ in before.values()):
        return []
    try:
        return builds_json(learn(walk, before, [], []).builds)
    except Uncacheable as exc:
        raise Uncacheable("side_effect", f"its trace built an optimizer ({exc.detail})") from None


def redo(walk: Walk, builds: list[Any]) -> bool:
    """A hit's builds (``built_in_trace``), done as its trace did them; False when this process's objects are not
    what they name (then the hit is not used)."""
    return apply(walk, Recipe(builds_from_json(builds)))


def builds_json(builds: list[Build]) -> list[Any]:
    return [[build.optimizer, build.variables, build.made, build.names] for build in builds]


def builds_from_json(data: list[Any]) -> list[Build]:
    return [Build(str(path), [str(item) for item in variables], [str(item) for item in made],
                  {str(key): str(value) for key, value in names.items()})
            for path, variables, made, names in data]


def encode(recipe: Recipe) -> bytes:
    data = {"builds": builds_json(recipe.builds), "called": recipe.called}
    return MAGIC + json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def is_recipe(payload: bytes | memoryview) -> bool:
    return bytes(payload[:len(MAGIC)]) == MAGIC


def decode(payload: bytes | memoryview) -> Recipe:
    """A stored recipe; CorruptEntryError when the bytes are not one."""
    try:
        data = json.loads(bytes(payload[len(MAGIC):]))
        return Recipe(builds_from_json(data["builds"]), [str(path) for path in data["called"]])
    except Exception as exc:  # JSON, a missing field, a wrong shape: the bytes are not what was stored
        raise CorruptEntryError(f"stored build does not decode: {type(exc).__name__}: {exc}") from None


__all__ = ["Build", "Pending", "Recipe", "apply", "builds_from_json", "builds_json", "built_in_trace", "decode",
           "encode", "is_recipe", "learn", "redo", "unbuilt"]
