"""User-class objects Keras' own code calls inside a trace (kerasstep.called_kind, attached_objects): a regularizer,
a constraint or a callable activation is keyed by its code, not by the class name its config gives. In-process
keys of one model whose object's class differs only in a constant; tests/hunt/sc_keras_objects.py runs the same
attacks across processes (slow)."""

from __future__ import annotations

from typing import Any

import pytest

keras = pytest.importorskip("keras")

CLASSES = '''
import keras


class Penalty(keras.regularizers.Regularizer):
    def __call__(self, x):
        return FACTOR * keras.ops.sum(keras.ops.abs(x))

    def get_config(self):
        return {}


class Clip(keras.constraints.Constraint):
    def __call__(self, w):
        return keras.ops.clip(w, -FACTOR, FACTOR)


class Shifted:
    def __call__(self, x):
        return x + FACTOR

    def get_config(self):
        return {}


class Scale(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.w
'''


def _classes(factor: float) -> dict[str, Any]:
    """The classes, defined afresh with ``FACTOR`` in their code (as an edited module would be)."""
    scope: dict[str, Any] = {"__name__": "user_objects"}
    exec(compile(CLASSES.replace("FACTOR", repr(factor)), "user_objects.py", "exec"), scope)
    return scope


def _key(build: Any, factor: float) -> str:
    from graphcache.traces import kerasstep
    from graphcache.traces.walk import Walk

    keras.backend.clear_session()  # Keras names layers and models by process-wide counters
    keras.utils.set_random_seed(0)
    model = build(_classes(factor))
    walk = Walk()
    kerasstep.walk_model(walk, model, kerasstep.model_objects(model))
    return walk.digest()


def _regularized(scope: dict[str, Any]) -> Any:
    inputs = keras.Input((4,))
    dense = keras.layers.Dense(2, activity_regularizer=scope["Penalty"](), name="dense")
    return keras.Model(inputs, dense(inputs))


def _constrained_variable(scope: dict[str, Any]) -> Any:
    inputs = keras.Input((4,))
    scale = scope["Scale"](name="scale")
    model = keras.Model(inputs, scale(inputs))
    scale.w.constraint = scope["Clip"]()  # on the variable only (as add_weight(constraint=...) puts it): no config
    return model


def _activation_set_after(scope: dict[str, Any]) -> Any:
    dense = keras.layers.Dense(2, name="dense")
    inputs = keras.Input((4,))
    model = keras.Model(inputs, dense(inputs))
    dense.activation = scope["Shifted"]()
    return model


@pytest.mark.parametrize("build", [_regularized, _constrained_variable, _activation_set_after],
                         ids=["regularizer", "constraint_on_variable", "activation_set_after"])
def test_an_object_keras_calls_is_keyed_by_its_code(build):
    assert _key(build, 0.5) == _key(build, 0.5), "the same code: one key"
    assert _key(build, 0.5) != _key(build, 2.0), "another constant in the class's code: another key"


def test_called_kind_is_for_user_objects_keras_calls_only():
    from graphcache.traces.kerasstep import called_kind

    scope = _classes(1.0)
    assert called_kind(scope["Penalty"]) and called_kind(scope["Clip"]) and called_kind(scope["Shifted"])
    assert not called_kind(keras.regularizers.L2), "Keras' own: named, its config keyed"
    assert not called_kind(keras.layers.Dense), "a layer is keyed as a layer"
    assert not called_kind(type("Plain", (), {"__module__": "user_objects"})), "neither callable nor Keras'"



class _Proxy:
    """A stand-in whose ``__class__`` is the wrapped object's and whose attributes are its (as wrapt's ObjectProxy):
    ``isinstance`` believes it, ``type`` does not."""

    def __init__(self, wrapped: Any) -> None:
        object.__setattr__(self, "_wrapped", wrapped)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def __call__(self, *args: Any) -> Any:
        return self._wrapped(*args)


def _held_key(helper: Any) -> str:
    from graphcache.traces import kerasstep
    from graphcache.traces.walk import Walk

    keras.backend.clear_session()
    inputs = keras.Input((4,))
    dense = keras.layers.Dense(2, name="dense")
    model = keras.Model(inputs, dense(inputs))
    dense.helper = helper
    walk = Walk()
    kerasstep.walk_model(walk, model, kerasstep.model_objects(model))
    return walk.digest()


def test_a_proxy_a_layer_holds_is_judged_as_isinstance_judges_it():
    """held() looks a held object's role up by class; a proxy's type is not its ``__class__``, so it is asked as
    isinstance asks: a proxied function is keyed as the function it stands for, never passed over."""
    one, two = (_classes(factor)["Shifted"]().__call__.__func__ for factor in (1.0, 2.0))
    assert _held_key(_Proxy(one)) == _held_key(_Proxy(one))
    assert _held_key(_Proxy(one)) != _held_key(_Proxy(two)), "another function behind the proxy: another key"
