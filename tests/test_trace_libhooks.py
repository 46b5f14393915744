"""Functions a program registers in TensorFlow's registries are in the trace key (graphcache/traces/libhooks.py).

The hunt's ``registered_gradient_function`` is the end-to-end check (stale before libhooks.py: a gradient function
that read a global, registered with ``tf.RegisterGradient``, hit after the global changed). Here: TensorFlow's and
Keras' own registrations key nothing; a registered user function is keyed by what it reads; each kind of registry is
listed; a user dispatcher object is keyed whole.
"""

from __future__ import annotations

import itertools

import pytest

_names = itertools.count()


def _hooks_digest() -> str:
    from graphcache.traces import libhooks
    from graphcache.traces.walk import Walk

    walk = Walk()
    libhooks.key(walk)
    return walk.digest()


def _nothing_keyed() -> str:
    from graphcache.traces.walk import Walk

    return Walk().digest()


def test_the_libraries_own_registrations_key_nothing():
    import keras  # noqa: F401  (Keras registers its own dispatcher and conversion functions)
    import tensorflow as tf  # noqa: F401

    assert _hooks_digest() == _nothing_keyed()


def test_a_registered_gradient_function_is_keyed_by_what_it_reads():
    import tensorflow as tf

    scale = {"value": 2.0}
    name = f"GraphcacheTestGrad{next(_names)}"

    @tf.RegisterGradient(name)
    def scaled(op, grad):
        return grad * scale["value"]

    try:
        keyed = _hooks_digest()
        assert keyed != _nothing_keyed()
        scale["value"] = 3.0
        assert _hooks_digest() != keyed, "a gradient function's closure value changed: another key"
        scale["value"] = 2.0
        assert _hooks_digest() == keyed, "and back: the same key (a program run again hits)"
    finally:  # TensorFlow has no unregister: the test's own entry is taken out again
        from tensorflow.python.framework import ops

        ops._gradient_registry._registry.pop(name)
    assert _hooks_digest() == _nothing_keyed()


def test_a_conversion_function_for_a_library_type_is_keyed():
    import fractions

    import tensorflow as tf
    from tensorflow.python.framework import tensor_conversion_registry

    def to_tensor(value, dtype=None, name=None, as_ref=False):
        return tf.constant(float(value), dtype=dtype or tf.float32)

    before = _hooks_digest()
    tf.register_tensor_conversion_function(fractions.Fraction, to_tensor, priority=97)
    try:
        assert _hooks_digest() != before
    finally:  # TensorFlow has no unregister: the test's own entry is taken out again
        registered = tensor_conversion_registry._tensor_conversion_func_registry[97]
        registered[:] = [entry for entry in registered if entry[1] is not to_tensor]
        tensor_conversion_registry._tensor_conversion_func_cache.clear()
    assert _hooks_digest() == before


def test_a_user_dispatcher_is_keyed_whole_and_refused():
    from tensorflow.python.util import dispatch

    from graphcache.traces.walk import Uncacheable

    class Dispatcher(dispatch.GlobalOpDispatcher):
        def __init__(self) -> None:
            self.scale = 2.0

        def handle(self, op, args, kwargs):
            return self.NOT_SUPPORTED

    dispatcher = Dispatcher()
    dispatch._GLOBAL_DISPATCHERS.append(dispatcher)
    try:
        with pytest.raises(Uncacheable):  # an object of a user class handed to TensorFlow: not walked through
            _hooks_digest()
    finally:
        dispatch._GLOBAL_DISPATCHERS.remove(dispatcher)
    assert _hooks_digest() == _nothing_keyed()


def test_every_registry_is_listed():
    from graphcache.traces import libhooks

    registries = {registry for registry, _name, _value in libhooks._entries()}
    assert registries == set(libhooks.REGISTRIES)
