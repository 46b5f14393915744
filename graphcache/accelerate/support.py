"""Whether a variant's rewriter can run in this process, and if not, why and what would make it run.

Grappler's CPU bfloat16 rewriter (``auto_mixed_precision_onednn_bfloat16``) rewrites nothing unless
TensorFlow's oneDNN rewrites are on, and oneDNN has bfloat16 only on CPUs with AVX512F or AVX_NE_CONVERT
(TensorFlow's IsDataTypeSupportedByOneDNNOnThisCPU). TensorFlow 2.21 leaves oneDNN off by default on x86
CPUs without AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX (an AVX2-only AMD EPYC, for one), so there
``fast1`` would compile a second variant identical to the first and train at full precision without
saying why. Asking first lets the session skip that compile, say why once, before the first step, and
count the runs as what they are. The float16 rewriters need nothing of the CPU: ``auto_mixed_precision_cpu``
emulates float16 in float32 on any CPU, and the GPU rewriter is TensorFlow's to apply per GPU.

The oneDNN switch comes from the caller (the session passes ``compile.identity.onednn_enabled()``, the
switch as the cache identity records it): this wing does not import compile/, its sibling.
"""

from __future__ import annotations

import os

from .variants import CPU_REWRITERS, Variant

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# What turns the bfloat16 rewriter on, as the warning says it.
BFLOAT16_FIX = (f"set {ONEDNN_VARIABLE}=1 in the environment before TensorFlow is imported, on a CPU with "
                "AVX512_BF16 or AMX (bfloat16 in hardware)")
_FALSE = ("0", "false", "off", "no")  # what TensorFlow's ReadBoolFromEnvVar reads as false (case aside)


def bfloat16_supported_by_onednn() -> bool | None:
    """TensorFlow's answer to whether oneDNN can compute in bfloat16 on this CPU; None where it does not say."""
    try:
        from tensorflow.python.framework import dtypes
        from tensorflow.python.util import _pywrap_utils
    except ImportError:
        return None
    check = getattr(_pywrap_utils, "IsDataTypeSupportedByOneDNNOnThisCPU", None)
    return bool(check(dtypes.bfloat16)) if check is not None else None


def unavailable(variant: Variant, onednn: bool | None) -> str | None:
    """Why ``variant``'s rewriter cannot rewrite anything in this process, naming what to set; None when it
    can, as far as TensorFlow says (``onednn``: its oneDNN switch as it resolved it, None when unknown)."""
    if variant.rewriter != CPU_REWRITERS["fast1"]:
        return None
    if onednn is False:
        value = os.environ.get(ONEDNN_VARIABLE)
        if value is not None and value.strip().lower() in _FALSE:
            cause = f"{ONEDNN_VARIABLE}={value} turns it off"
        elif value is not None:
            cause = f"this TensorFlow did not turn it on although {ONEDNN_VARIABLE}={value} (a build without oneDNN)"
        else:
            cause = (f"{ONEDNN_VARIABLE} is not set and TensorFlow leaves oneDNN off by default on this CPU (it turns "
                     "it on for x86 CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX)")
        return f"TensorFlow's oneDNN is off in this process ({cause}), and {variant.rewriter} needs it"
    if onednn and bfloat16_supported_by_onednn() is False:
        return (f"oneDNN is on but has no bfloat16 on this CPU (TensorFlow needs AVX512F or AVX_NE_CONVERT), "
                f"and {variant.rewriter} needs it")
    return None
