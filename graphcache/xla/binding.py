"""Binding TensorFlow's process state: its XLA flags, read once per process.

TensorFlow parses ``TF_XLA_FLAGS`` once per process (``absl::call_once``), the first time any XLA flag is
read: on the first device listing (``tf.config.list_physical_devices``), the first eager op or the first
``tf.function`` call, not merely on the first XLA compile. A change after that is silently ignored.
``bind`` detects it reliably: it sets ``TF_XLA_FLAGS`` (the user's flags kept, the directory flag
replaced) plus a sentinel value of ``--tf_xla_disable_constant_folding`` and reads that flag back through
TensorFlow's own getter, which parses the flags if they were not parsed yet. Seeing the sentinel means
TensorFlow parsed our string now: the real constant-folding setting is restored through the setter and
``TF_XLA_FLAGS`` is restored to the user's value (child processes enable their own cache; they must not
inherit a directory keyed for this process's TensorFlow). Not seeing it means the flags were parsed
earlier: "too late". (The device kind that keys the directory is computed before binding without parsing
the flags: graphcache/compile/identity.py.)

``tf_xla_cpu_global_jit`` (CPU auto-clustering for sessions asking for ``global_jit_level``) has a setter;
TensorFlow reads it once, before its first op, so a late switch warns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..compile.identity import gpus
from ..core.failures import warn_once
from .flags import TF_XLA_FLAGS, Flag, flag_bool, flags_with_directory

SENTINEL_FLAG = "tf_xla_disable_constant_folding"


def bind(directory: Path, flags: list[Flag]) -> str:
    """Make TensorFlow parse TF_XLA_FLAGS with our directory now: ``bound``, ``assumed`` or ``too_late``."""
    from tensorflow.python import pywrap_tfe

    original = os.environ.get(TF_XLA_FLAGS)
    text = flags_with_directory(flags, directory)
    getter = getattr(pywrap_tfe, "TF_GetXlaConstantFoldingDisabled", None)
    setter = getattr(pywrap_tfe, "TF_SetXlaConstantFoldingDisabled", None)
    if getter is None or setter is None:  # pragma: no cover - a TensorFlow without the getter
        if _flags_probably_parsed():
            return "too_late"
        os.environ[TF_XLA_FLAGS] = text  # left in place: TensorFlow reads it later
        return "assumed"
    wanted = flag_bool(flags, SENTINEL_FLAG)
    sentinel = not wanted
    os.environ[TF_XLA_FLAGS] = f"{text} --{SENTINEL_FLAG}={'true' if sentinel else 'false'}"
    try:
        parsed_now = bool(getter()) == sentinel
    finally:
        if original is None:
            os.environ.pop(TF_XLA_FLAGS, None)
        else:
            os.environ[TF_XLA_FLAGS] = original
    if not parsed_now:
        return "too_late"
    setter(wanted)
    return "bound"


def _flags_probably_parsed() -> bool:  # pragma: no cover - only without TensorFlow's flag getter
    # A GPU walk (identity.gpus) may have parsed them; a machine without GPUs never asks past the CPU.
    return bool(gpus.cache_info().currsize and gpus()) or eager_started()


def cpu_jit_on() -> None:
    """Switch on TensorFlow's ``tf_xla_cpu_global_jit``; warn once when TensorFlow may have read it already."""
    from tensorflow.python import pywrap_tfe

    setter = getattr(pywrap_tfe, "TF_SetTfXlaCpuGlobalJit", None)
    if setter is None:  # pragma: no cover - a TensorFlow without the setter
        warn_once("xla_cpu_jit", "graphcache: this TensorFlow cannot switch on CPU auto-clustering at run time; "
                                 "set TF_XLA_FLAGS=--tf_xla_cpu_global_jit before starting the process")
        return
    was_on = bool(setter(True))
    if not was_on and eager_started():
        warn_once("xla_cpu_jit", "graphcache: CPU auto-clustering was switched on after TensorFlow ran its first "
                                 "op; TensorFlow reads that switch once, so CPU ops may not be clustered in this "
                                 "process. Ask for jit (jit_config, Session(jit=True)) before running anything.")


def eager_started() -> bool:
    """Whether TensorFlow's eager context exists (it does after the first eager op; a TF1 session alone
    does not create it, so this can miss a session that already ran)."""
    try:
        from tensorflow.python.eager import context

        return context.context()._context_handle is not None
    except Exception:  # pragma: no cover
        return False


def auto_clustering(config: Any = None) -> Any:
    """A copy of ``config`` (a tf.compat.v1.ConfigProto, or None) with XLA auto-clustering on
    (``global_jit_level=ON_1``)."""
    from tensorflow.core.protobuf import config_pb2

    out = config_pb2.ConfigProto()
    if config is not None:
        out.CopyFrom(config)
    out.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.ON_1
    return out
