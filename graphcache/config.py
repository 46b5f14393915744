"""ExperimentalConfig: the Ascend TF adapter's name for graphcache's switches."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ExperimentalConfig:
    """``ExperimentalConfig(graph_compiler_cache_dir=...)``: where compiled graphs are cached.

    ``graph_compiler_cache_dir=None`` means graphcache's default ($GRAPHCACHE_DIR, else the user cache
    dir). ``accelerate_train_mode``, ``precision_mode`` and ``precision_mode_v2`` are the adapter's names
    for mixed-precision training; they are accepted only when empty until that feature lands.
    """

    graph_compiler_cache_dir: str | os.PathLike[str] | None = None
    accelerate_train_mode: str | None = None
    precision_mode: str | None = None
    precision_mode_v2: str | None = None

    def __post_init__(self) -> None:
        if self.accelerate_train_mode:
            raise NotImplementedError(
                f"accelerate_train_mode={self.accelerate_train_mode!r} is not supported yet by this graphcache "
                "release; leave it empty")
