"""accelerate_train_mode: train the first part at reduced precision, the rest at the original precision.

``ExperimentalConfig(accelerate_train_mode="fast1|step|0.9")`` makes a ``graphcache.Session`` compile each
*training* signature a second time, with one of Grappler's mixed-precision rewriters on, and run that
variant until the split is reached; a ``TellMeStepOrLossHook`` says when. Both variants of a signature are
imported into the session's one run graph, whose variables have pinned shared names, so variables,
optimizer slots and the global step carry across the switch: nothing is re-initialized.

One module per job, importing one way (the controller imports mode, variants, support, training and
loss_scaling; support imports variants; variants imports loss_scaling for a signature's variant; the hook
imports the controller; nothing imports back):

==============  ===========================================================================================
mode            the ``"TYPE|SPLIT|RATIO"`` parser (``AccelerateMode``), TensorFlow-free, used by config.py
variants        which rewriter a mode turns on, CPU or GPU (``Variant``), the compile options it makes, a
                signature's variant (``variant_signature``: loss scaling added where it applies)
support         whether a variant's rewriter can run in this process (``unavailable``: oneDNN off, no bfloat16
                in oneDNN on this CPU), and what to set
training        which signatures train (an optimizer update or a ``tf.gradients`` scope in their fan-in)
loss_scaling    the float16 variant's dynamic loss scaling: the GraphDef rewrite and ``LossScale``
controller      ``Accelerator``: one session's state, the precision of each run, the one-way switch
hook            ``TellMeStepOrLossHook``, which reports the step or the loss to the controller
==============  ===========================================================================================

Names are imported lazily (PEP 562), like the top-level package's: ``import graphcache.accelerate`` and
``graphcache.accelerate.mode`` do not import TensorFlow (config.py parses the mode at import time).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "ACCELERATE_PRECISION_MODES": "mode",
    "ACCELERATE_PRECISION_MODES_V2": "mode",
    "ACCELERATE_SPLITS": "mode",
    "ACCELERATE_TYPES": "mode",
    "AccelerateMode": "mode",
    "RATIO_RANGES": "mode",
    "parse_accelerate_mode": "mode",
    "CPU_REWRITERS": "variants",
    "GPU_REWRITER": "variants",
    "Variant": "variants",
    "gpu_in_use": "variants",
    "low_precision_casts": "variants",
    "variant_for": "variants",
    "variant_options": "variants",
    "variant_signature": "variants",
    "BFLOAT16_FIX": "support",
    "ONEDNN_VARIABLE": "support",
    "bfloat16_supported_by_onednn": "support",
    "unavailable": "support",
    "fan_in_trains": "training",
    "fetch_op_names": "training",
    "ALL_FINITE_FETCH": "loss_scaling",
    "INITIAL_LOSS_SCALE": "loss_scaling",
    "LOSS_SCALE_FEED": "loss_scaling",
    "LOSS_SCALE_GROWTH_STEPS": "loss_scaling",
    "LOSS_SCALE_SCOPE": "loss_scaling",
    "LossScale": "loss_scaling",
    "MAX_LOSS_SCALE": "loss_scaling",
    "add_loss_scaling": "loss_scaling",
    "Accelerator": "controller",
    "accelerator_of": "controller",
    "TellMeStepOrLossHook": "hook",
    "readable_tensor": "hook",
}

if TYPE_CHECKING:
    from .controller import Accelerator, accelerator_of
    from .hook import TellMeStepOrLossHook, readable_tensor
    from .loss_scaling import (
        ALL_FINITE_FETCH,
        INITIAL_LOSS_SCALE,
        LOSS_SCALE_FEED,
        LOSS_SCALE_GROWTH_STEPS,
        LOSS_SCALE_SCOPE,
        MAX_LOSS_SCALE,
        LossScale,
        add_loss_scaling,
    )
    from .mode import (
        ACCELERATE_PRECISION_MODES,
        ACCELERATE_PRECISION_MODES_V2,
        ACCELERATE_SPLITS,
        ACCELERATE_TYPES,
        RATIO_RANGES,
        AccelerateMode,
        parse_accelerate_mode,
    )
    from .support import BFLOAT16_FIX, ONEDNN_VARIABLE, bfloat16_supported_by_onednn, unavailable
    from .training import fan_in_trains, fetch_op_names
    from .variants import (
        CPU_REWRITERS,
        GPU_REWRITER,
        Variant,
        gpu_in_use,
        low_precision_casts,
        variant_for,
        variant_options,
        variant_signature,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphcache.accelerate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ACCELERATE_PRECISION_MODES",
    "ACCELERATE_PRECISION_MODES_V2",
    "ACCELERATE_SPLITS",
    "ACCELERATE_TYPES",
    "ALL_FINITE_FETCH",
    "BFLOAT16_FIX",
    "AccelerateMode",
    "Accelerator",
    "CPU_REWRITERS",
    "GPU_REWRITER",
    "INITIAL_LOSS_SCALE",
    "LOSS_SCALE_FEED",
    "LOSS_SCALE_GROWTH_STEPS",
    "LOSS_SCALE_SCOPE",
    "LossScale",
    "MAX_LOSS_SCALE",
    "ONEDNN_VARIABLE",
    "RATIO_RANGES",
    "TellMeStepOrLossHook",
    "Variant",
    "accelerator_of",
    "add_loss_scaling",
    "bfloat16_supported_by_onednn",
    "fan_in_trains",
    "fetch_op_names",
    "gpu_in_use",
    "low_precision_casts",
    "parse_accelerate_mode",
    "readable_tensor",
    "unavailable",
    "variant_for",
    "variant_options",
    "variant_signature",
]
