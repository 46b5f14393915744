"""Precision variants: which Grappler mixed-precision rewriter a mode turns on, on this machine's device.

=====  ======================================  ===========================================
TYPE   CPU                                     GPU
=====  ======================================  ===========================================
fast   auto_mixed_precision_cpu (float16,      auto_mixed_precision (float16)
       emulated: fidelity, not speed)
fast1  auto_mixed_precision_onednn_bfloat16    float16 + one warning (Grappler's bfloat16
       (bfloat16, oneDNN)                      rewriter only rewrites CPU nodes)
=====  ======================================  ===========================================

The rewriter goes into the compile options (a copy of the session's ConfigProto), so each precision
variant is its own cache entry. Grappler's mixed-precision passes place unplaced nodes with its virtual
placer (the cluster's default device), so the graph is compiled as it is, unplaced: verified on CPU,
where an unplaced graph gets its MatMuls in bfloat16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .mode import AccelerateMode

CPU_REWRITERS = {"fast": "auto_mixed_precision_cpu", "fast1": "auto_mixed_precision_onednn_bfloat16"}
GPU_REWRITER = "auto_mixed_precision"


@dataclass(frozen=True)
class Variant:
    """One reduced-precision compile: the RewriterConfig field turned ON and what it produces."""

    rewriter: str
    dtype: str  # "float16" | "bfloat16": what the rewritten graph casts to
    device: str  # "CPU" | "GPU"

    @property
    def loss_scaling(self) -> bool:
        return self.dtype == "float16"


def gpu_in_use(config: Any = None) -> bool:
    """Whether the session will run on a GPU: one is visible and the config does not hide it."""
    import tensorflow as tf

    if config is not None and config.device_count.get("GPU", 1) == 0:
        return False
    try:
        return bool(tf.config.list_physical_devices("GPU"))
    except Exception:  # a broken driver setup reads as no GPU
        return False


def variant_for(mode: AccelerateMode, config: Any = None) -> Variant:
    """The rewriter for ``mode`` on this machine's device (see the module docstring's table)."""
    from ..core.failures import warn_once

    if not gpu_in_use(config):
        return Variant(CPU_REWRITERS[mode.type], mode.dtype, "CPU")
    if mode.type == "fast1":
        warn_once("accelerate_bf16_gpu",
                  f"graphcache: accelerate_train_mode={mode.text!r} asks for bfloat16, but TensorFlow's Grappler "
                  "has no bfloat16 rewriter for GPUs (auto_mixed_precision_onednn_bfloat16 rewrites CPU nodes "
                  "only): the accelerated phase trains in float16 (auto_mixed_precision) with loss scaling")
    return Variant(GPU_REWRITER, "float16", "GPU")


def variant_options(config: Any, variant: Variant):
    """A copy of ``config`` (a ConfigProto or None) with the variant's rewriter ON: part of the cache key."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    options = config_pb2.ConfigProto()
    if config is not None:
        options.CopyFrom(config)
    setattr(options.graph_options.rewrite_options, variant.rewriter, rewriter_config_pb2.RewriterConfig.ON)
    return options


def low_precision_casts(graph_def, dtype: str) -> int:
    """How many Cast nodes of a compiled graph cast to ``dtype``: 0 means the rewriter changed nothing."""
    from tensorflow.python.framework import dtypes

    target = dtypes.as_dtype(dtype).as_datatype_enum
    return sum(1 for node in graph_def.node if node.op == "Cast" and node.attr["DstT"].type == target)


def variant_signature(variant: Variant, config: Any, graph_def: Any, tf_graph: Any, feeds: tuple, fetches: tuple,
                      targets: tuple, label: str) -> tuple[Any, tuple, tuple, Any, str, bool]:
    """A Session signature's variant: (graph_def, feeds, fetches, options, label, loss_scaled), with dynamic
    loss scaling added to the graph (and its feed and fetch to the signature) where the variant asks for it
    and the graph allows it; where it does not, a warning says why."""
    from ..core.failures import warn_once
    from .loss_scaling import ALL_FINITE_FETCH, LOSS_SCALE_FEED, add_loss_scaling

    options = variant_options(config, variant)
    label = f"{label[:80]}@{variant.dtype}"
    if not variant.loss_scaling:
        return graph_def, feeds, fetches, options, label, False
    roots = [name.rpartition(":")[0] for name in fetches] + list(targets)
    graph_def, why_not = add_loss_scaling(graph_def, tf_graph, roots)
    if why_not is not None:
        warn_once("accelerate_no_loss_scale", f"graphcache: accelerate_train_mode trains {label} in float16 "
                  f"without graphcache's loss scaling: {why_not}")
        return graph_def, feeds, fetches, options, label, False
    return graph_def, (*feeds, LOSS_SCALE_FEED), (*fetches, ALL_FINITE_FETCH), options, label, True
