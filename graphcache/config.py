"""ExperimentalConfig: the Ascend TF adapter's name for graphcache's switches.

Parsing and validation only (no TensorFlow import): the mode string is parsed by
graphcache/accelerate/mode.py, the training-time machinery behind ``accelerate_train_mode`` lives in the
rest of graphcache/accelerate/.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .accelerate.mode import AccelerateMode, parse_accelerate_mode


@dataclass(frozen=True)
class ExperimentalConfig:
    """``ExperimentalConfig(graph_compiler_cache_dir=..., accelerate_train_mode=...)``, the adapter's names.

    ``graph_compiler_cache_dir=None`` means graphcache's default ($GRAPHCACHE_DIR, else the user cache
    dir). ``accelerate_train_mode`` (``"TYPE|SPLIT|RATIO"``, see ``parse_accelerate_mode``) trains the
    first part at reduced precision through ``graphcache.Session``; it needs a
    ``graphcache.TellMeStepOrLossHook``. ``precision_mode`` / ``precision_mode_v2`` are the adapter's
    precision switches: graphcache does not act on them, but acceleration is refused unless they keep the
    original dtypes ("allow_fp32_to_fp16" / "must_keep_origin_dtype" / empty, and "origin" / empty).
    Invalid values raise ValueError here, at construction.
    """

    graph_compiler_cache_dir: str | os.PathLike[str] | None = None
    accelerate_train_mode: str | None = None
    precision_mode: str | None = None
    precision_mode_v2: str | None = None
    accelerate: AccelerateMode | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        parsed = parse_accelerate_mode(self.accelerate_train_mode, self.precision_mode, self.precision_mode_v2)
        object.__setattr__(self, "accelerate", parsed)
