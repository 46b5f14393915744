"""The ``accelerate_train_mode`` string: parsing and validation, without TensorFlow.

``"TYPE|SPLIT|RATIO"``: TYPE ``fast`` (float16) or ``fast1`` (bfloat16) says which reduced precision the
training signatures run at first; SPLIT ``step`` or ``loss`` and RATIO say when they switch back (at step
floor(total_step x RATIO), or after the first reported loss at or below final_loss x RATIO). The parser
is exact (case, whitespace, field count, RATIO bounds) because a typo that silently trained at the wrong
precision would cost a whole run; ``ExperimentalConfig`` calls it at construction, so a bad value fails
before any graph is built. This module imports nothing of TensorFlow: config.py uses it at import time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

ACCELERATE_TYPES = {"fast": "float16", "fast1": "bfloat16"}
ACCELERATE_SPLITS = ("step", "loss")
# SPLIT -> (lowest ratio, highest ratio, default ratio), bounds inclusive.
RATIO_RANGES = {"step": (0.2, 0.9, 0.9), "loss": (1.01, 1.5, 1.05)}
ACCELERATE_PRECISION_MODES = ("allow_fp32_to_fp16", "must_keep_origin_dtype")
ACCELERATE_PRECISION_MODES_V2 = ("origin",)
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")
_FORMAT = ("TYPE|SPLIT or TYPE|SPLIT|RATIO, with TYPE 'fast' (float16) or 'fast1' (bfloat16), SPLIT "
           "'step' (RATIO in [0.2, 0.9], default 0.9) or 'loss' (RATIO in [1.01, 1.5], default 1.05)")


@dataclass(frozen=True)
class AccelerateMode:
    """A parsed ``accelerate_train_mode``: low precision (``dtype``) until ``split`` reaches ``ratio``."""

    text: str
    type: str  # "fast" | "fast1"
    split: str  # "step" | "loss"
    ratio: float

    @property
    def dtype(self) -> str:
        """The reduced precision asked for: "float16" (fast) or "bfloat16" (fast1)."""
        return ACCELERATE_TYPES[self.type]

    def switch_step(self, total_step: int) -> int:
        """The first step run at the original precision: floor(total_step x ratio), in exact decimal."""
        return math.floor(Decimal(repr(self.ratio)) * Decimal(int(total_step)))

    def switch_loss(self, final_loss: float) -> float:
        """A reported loss at or below this (and not 0) ends the low-precision phase."""
        return float(final_loss) * self.ratio


def _bad(value: object, problem: str) -> ValueError:
    return ValueError(f"accelerate_train_mode={value!r}: {problem}; expected {_FORMAT}, or None/'' for off")


def parse_accelerate_mode(mode: object, precision_mode: object = None,
                          precision_mode_v2: object = None) -> AccelerateMode | None:
    """Validate ``accelerate_train_mode`` exactly; None when it is off (None or "").

    Case-sensitive, no surrounding whitespace, 2 or 3 ``|``-separated fields; an empty RATIO means the
    default. Every failure is a ValueError quoting the bad value and the allowed ones.
    """
    if mode is None or mode == "":
        return None
    if not isinstance(mode, str):
        raise _bad(mode, f"must be a string, not {type(mode).__name__}")
    if mode != mode.strip():
        raise _bad(mode, "has surrounding whitespace")
    fields = mode.split("|")
    if len(fields) not in (2, 3):
        raise _bad(mode, f"has {len(fields)} '|'-separated field(s), not 2 or 3")
    kind, split = fields[0], fields[1]
    if kind not in ACCELERATE_TYPES:
        raise _bad(mode, f"TYPE {kind!r} is not one of {', '.join(map(repr, ACCELERATE_TYPES))}")
    if split not in ACCELERATE_SPLITS:
        raise _bad(mode, f"SPLIT {split!r} is not one of {', '.join(map(repr, ACCELERATE_SPLITS))}")
    low, high, default = RATIO_RANGES[split]
    text = fields[2] if len(fields) == 3 else ""
    if text == "":
        ratio = default
    else:
        if not _DECIMAL.fullmatch(text):
            raise _bad(mode, f"RATIO {text!r} is not a decimal number; for SPLIT {split!r} use a number "
                             f"in [{low}, {high}] (default {default})")
        ratio = float(text)
        if not low <= ratio <= high:
            raise _bad(mode, f"RATIO {text!r} is outside [{low}, {high}] for SPLIT {split!r} (default {default})")
    if precision_mode not in (None, "", *ACCELERATE_PRECISION_MODES) or \
            precision_mode_v2 not in (None, "", *ACCELERATE_PRECISION_MODES_V2):
        raise ValueError(
            f"accelerate_train_mode={mode!r} cannot be used with precision_mode={precision_mode!r} and "
            f"precision_mode_v2={precision_mode_v2!r}: it needs precision_mode in "
            f"{', '.join(map(repr, ACCELERATE_PRECISION_MODES))} or empty, and precision_mode_v2 "
            f"{', '.join(map(repr, ACCELERATE_PRECISION_MODES_V2))} or empty")
    return AccelerateMode(mode, kind, split, ratio)
