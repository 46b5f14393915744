"""The settings of trusted libraries a trace can read: one keyed snapshot (the ``settings`` part of a trace's key).

trust.py names TensorFlow, Keras and NumPy by identity instead of walking them, which is sound only if
everything their code reads while tracing is in the key too. Besides the arguments and the values the walk
keys, that is their process-wide configuration. Each entry of ``SETTINGS`` reads one setting, with where its
library reads it while tracing; ``snapshot()`` reads them all and keying.py hashes that. The analogue of PyTorch Dynamo's ``GLOBAL_STATE`` guard.

Left out on purpose (they change no traced graph): logging verbosity and traceback filtering, memory
growth, threading, the visible devices' memory limits. Op callbacks other than TensorFlow's own
check-numerics refuse the trace (``check_op_callbacks``): a callback can add any op to the graph.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .walk import Uncacheable


@dataclass(frozen=True)
class Setting:
    name: str
    read: Callable[[], Any]  # returns a JSON-able value
    why: str  # where the traced code reads it


def _keras() -> Any:
    return sys.modules.get("keras")


def _keras_setting(name: str) -> Callable[[], Any]:
    def read() -> Any:
        keras = _keras()
        if keras is None:  # not imported: nothing traced can have read it
            return None
        reader = getattr(keras.config, name, None)
        value = reader() if reader is not None else None
        return getattr(value, "name", value)  # dtype_policy() is an object; its name says all it is

    return read


def _tf_ops() -> Any:
    from tensorflow.python.framework import ops

    return ops


def _numpy_behaviour() -> list[Any]:
    from tensorflow.python.framework import tensor as tensor_lib
    from tensorflow.python.ops.numpy_ops import np_dtypes

    ops = _tf_ops()
    return [ops.is_auto_dtype_conversion_enabled(), ops.is_numpy_style_type_promotion(),
            ops.get_dtype_conversion_mode().name, bool(np_dtypes.is_prefer_float32()),
            bool(getattr(ops, "_numpy_style_slicing", False)),
            hasattr(tensor_lib.Tensor, "reshape")]  # enable_numpy_methods_on_tensor: x.reshape, x.T, ...


def _context() -> Any:
    from tensorflow.python.eager import context

    return context.context()


def _config() -> Any:
    from tensorflow.python.framework import config

    return config


def _op_callbacks() -> list[Any]:
    """TensorFlow's check-numerics callback by its limits; any other callback refuses the trace."""
    described = []
    for callback in _context().op_callbacks:
        owner = getattr(callback, "__self__", None)
        if type(owner).__name__ == "CheckNumericsCallback" and \
                type(owner).__module__ == "tensorflow.python.debug.lib.check_numerics_callback":
            described.append(["check_numerics", owner._stack_height_limit, owner._path_length_limit])
        else:
            raise Uncacheable("context", f"an op callback is registered ({getattr(callback, '__qualname__', callback)}"
                                         "): it may add ops to the trace that the key cannot see")
    return described


def _global_seed() -> Any:
    from tensorflow.python.eager import context

    return context.global_seed()


def _run_eagerly() -> bool:
    from tensorflow.python.eager.polymorphic_function import eager_function_run

    return bool(eager_function_run.functions_run_eagerly())


def _compat_switches() -> list[Any]:
    """TensorFlow 1 compatibility switches that change what Python code does with tensors while it is traced."""
    from tensorflow.python import tf2
    from tensorflow.python.framework import tensor, tensor_shape
    from tensorflow.python.ops import control_flow_util

    return [bool(tensor.Tensor._USE_EQUALITY), bool(tensor_shape.TensorShape([1])._v2_behavior), bool(tf2.enabled()),
            bool(control_flow_util.ENABLE_CONTROL_FLOW_V2)]


def _numpy_state() -> list[Any]:
    import numpy as np

    return [sorted(np.geterr().items()), repr(sorted(np.get_printoptions().items()))]


SETTINGS: tuple[Setting, ...] = (
    Setting("keras.floatx", _keras_setting("floatx"), "layers' and keras.ops' default dtype"),
    Setting("keras.epsilon", _keras_setting("epsilon"), "losses, metrics, normalization and optimizers"),
    Setting("keras.image_data_format", _keras_setting("image_data_format"), "convolution and pooling layouts"),
    Setting("keras.backend", _keras_setting("backend"), "which ops keras.ops builds"),
    Setting("keras.dtype_policy", _keras_setting("dtype_policy"), "mixed precision: compute and variable dtypes"),
    Setting("keras.flash_attention", _keras_setting("is_flash_attention_enabled"), "attention layers"),
    Setting("keras.nnx", _keras_setting("is_nnx_enabled"), "layers' variable handling"),
    Setting("tf.numpy_behavior", _numpy_behaviour,
            "experimental_enable_numpy_behavior: type promotion, dtype conversion mode, prefer_float32, slicing"),
    Setting("tf.op_determinism", lambda: bool(_config().is_op_determinism_enabled()),
            "ops that refuse to trace, or pick deterministic kernels, under enable_op_determinism"),
    Setting("tf.op_callbacks", _op_callbacks, "enable_check_numerics adds CheckNumerics ops while tracing"),
    Setting("tf.global_seed", _global_seed, "stateful random ops take their seeds at trace time"),
    Setting("tf.run_functions_eagerly", _run_eagerly, "tf.config.run_functions_eagerly"),
    Setting("tf.optimizer_jit", lambda: str(_config().get_optimizer_jit()), "XLA auto-clustering"),
    Setting("tf.optimizer_options", lambda: sorted(_config().get_optimizer_experimental_options().items()),
            "Grappler options the function's attributes carry"),
    Setting("tf.device_policy", lambda: str(_context().device_policy), "device placement of traced ops"),
    Setting("tf.soft_device_placement", lambda: bool(_context().soft_device_placement), "device placement"),
    Setting("tf.logical_devices", lambda: [device.name for device in _context().list_logical_devices()],
            "tf.config.list_logical_devices and device strings read while tracing"),
    Setting("tf.tensor_float_32", lambda: bool(_config().tensor_float_32_execution_enabled()),
            "matmul and convolution precision"),
    Setting("tf.compat_v1", _compat_switches,
            "disable_tensor_equality (== compares identities, not values), disable_v2_tensorshape (shape[i] is a "
            "Dimension), disable_v2_behavior, disable_control_flow_v2"),
    Setting("numpy.state", _numpy_state, "NumPy's error handling and print options for values computed at trace time"),
)


def snapshot() -> dict[str, Any]:
    """Every setting's current value, by name (raises Uncacheable for an op callback the key cannot cover)."""
    return {setting.name: setting.read() for setting in SETTINGS}


__all__ = ["SETTINGS", "Setting", "snapshot"]
