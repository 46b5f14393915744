"""The compiler identity: everything besides the graph that decides what a compile produces.

``version`` = TensorFlow version and git version, graphcache's entry-format version, the key scheme
(``KEY_SCHEME``) and the user's identity salt. A different version means an upgrade (or a deliberate
salt change): its entries are purged once that version has not been opened for ``stale_after`` (see
versioning.py).
``identity`` = version + the backend and its options + the device kind + the oneDNN switch. Identities of one
version never purge each other (a GPU trainer and a CPU server can share a cache dir).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, NamedTuple

from ..entry import codec
from ..entry.keyparts import version_id

# The version of the key scheme (keys.py, canonical.py). A new scheme gives every graph a new key, so entries under
# the old one could never hit again: being part of the version, they are purged as a stale version.
# 2: nodes named by structure (Merkle ids), not by their names.
# 3: the identity holds the oneDNN switch as TensorFlow resolved it (onednn_enabled), not only its variable.
KEY_SCHEME = 3

# Environment variables that change what TensorFlow's graph rewriters produce.
_TF_ENV_IN_IDENTITY = ("TF_ENABLE_ONEDNN_OPTS",)


@functools.cache
def _tf_versions() -> tuple[str, str]:
    import tensorflow as tf

    return tf.version.VERSION, tf.version.GIT_VERSION


def compiler_version(salt: str = "") -> dict[str, Any]:
    tf_version, git_version = _tf_versions()
    return {"tensorflow": tf_version, "tf_git": git_version, "format": codec.FORMAT_VERSION, "keys": KEY_SCHEME,
            "salt": salt}


class Gpu(NamedTuple):
    """One physical GPU as TensorFlow describes it (``tf.config.experimental.get_device_details``)."""

    name: str  # "" when TensorFlow gives none
    compute_capability: str  # "9.0"; "" when TensorFlow gives none (ROCm, pluggable devices)


@functools.cache
def gpus() -> tuple[Gpu, ...]:
    """TensorFlow's physical GPUs, in its order: ``TF_GetDeviceDetails(index)``, the call
    ``tf.config.experimental.get_device_details`` makes, for each index TensorFlow gives a GPU.

    Safe before XLA binding (xla/binding.py: TensorFlow reads TF_XLA_FLAGS once), as far as TensorFlow
    allows. Listing devices (``tf.config.list_physical_devices``) asks every device factory, XLA's
    included, and XLA's factory parses TF_XLA_FLAGS; ``TF_GetDeviceDetails(index)`` asks the CPU factory
    alone for index 0 (the CPU: no details) and walks the other factories for a higher index, so asking
    past the last GPU (or, on a machine without GPUs, past the CPU) parses the flags too (measured on TF
    2.21). The GPUs are therefore counted first without TensorFlow's factories (the CUDA driver, and
    pluggable devices through their own factories) and only that many indices are asked: a machine
    without GPUs never asks past the CPU. Whether the GPU factory comes before XLA's in TensorFlow's
    factory map decides whether a GPU machine's walk parses the flags; if it does, XLA binding reports
    "too late" (and XLA compiles uncached) instead of keying executables by the wrong device kind. A ROCm
    build has no such count: its walk runs to the end.
    """
    try:
        expected = _gpu_count()
        if expected == 0:
            return ()
        from tensorflow.python import pywrap_tfe

        found: list[Gpu] = []
        for index in range(1, 257):  # index 0 is the CPU (its factory always lists exactly one)
            if expected is not None and len(found) >= expected:
                break
            try:
                details = pywrap_tfe.TF_GetDeviceDetails(index)
            except Exception:  # past the last device
                break
            if details:  # GPUs describe themselves; the CPU and XLA's devices do not
                found.append(Gpu(str(details.get("device_name") or ""),
                                 str(details.get("compute_capability") or "")))
        return tuple(found)
    except Exception:  # no usable GPU runtime: a CPU identity is the truth
        return ()


def _gpu_count() -> int | None:
    """How many GPUs TensorFlow will list, found without asking its device factories (see ``gpus``); None
    when only they can tell (ROCm)."""
    import tensorflow as tf
    from tensorflow.python import pywrap_tfe

    count = sum(1 for name in pywrap_tfe.TF_ListPluggablePhysicalDevices() if b":GPU:" in name)
    if tf.test.is_built_with_cuda():
        return count + _cuda_device_count()
    if tf.test.is_built_with_rocm():
        return None
    return count


def _cuda_device_count() -> int:
    """The GPUs the CUDA driver shows this process (CUDA_VISIBLE_DEVICES applied, as for TensorFlow's GPU
    factory, which asks the same driver): 0 without a driver. ``cuInit`` creates no context; TensorFlow
    calls it again at its first GPU use."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return max(0, count.value)


@functools.cache
def device_kind() -> str:
    """``cpu`` or ``gpu:<name>:cc<major.minor>,...``: where the compiled graph will run."""
    return ",".join(f"gpu:{gpu.name or 'unknown'}:cc{gpu.compute_capability or '?'}" for gpu in gpus()) or "cpu"


@functools.cache
def onednn_enabled() -> bool | None:
    """Whether TensorFlow's oneDNN rewrites are on in this process, as TensorFlow decides it (its C++
    IsMklEnabled, in core/util): TF_ENABLE_ONEDNN_OPTS where it is set, else TensorFlow's default for this
    CPU (on for x86 Linux CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX), or TF_DISABLE_MKL in builds
    with ENABLE_MKL. So two hosts with the same TensorFlow and the same environment can differ here, and a
    Session's collected graph carries oneDNN's rewrites and its numerics (compile/collected.py): the variable
    alone would let one host hit the other's entries. None where this TensorFlow does not say."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    is_enabled = getattr(_pywrap_util_port, "IsMklEnabled", None)
    return bool(is_enabled()) if is_enabled is not None else None


def compiler_identity(salt: str, backend_name: str, backend_options: dict[str, Any]) -> dict[str, Any]:
    version = compiler_version(salt)
    return {
        "version": version_id(version),
        "version_info": version,
        "backend": backend_name,
        "backend_options": backend_options,
        "device": device_kind(),
        "env": {name: os.environ.get(name, "") for name in _TF_ENV_IN_IDENTITY},
        "onednn": onednn_enabled(),
    }


def installed_version(salt: str | None = None) -> str:
    """The compiler version id of this installation (``identity_salt`` default: GRAPHCACHE_IDENTITY_SALT)."""
    from ..core import settings

    return version_id(compiler_version(settings.resolve_str(salt, settings.ENV_IDENTITY_SALT)))
