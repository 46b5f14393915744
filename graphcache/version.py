"""graphcache's own version, read from its installed package metadata once, when first asked for."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache
def package_version() -> str:
    """The installed graphcache's version ("0.0.0" when running from a source tree that is not installed)."""
    try:
        return version("graphcache")
    except PackageNotFoundError:
        return "0.0.0"
