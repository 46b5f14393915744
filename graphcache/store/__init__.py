"""Where entry bytes live: a small interface (base.py) and its implementations."""

from .base import Store
from .local import LocalStore

__all__ = ["LocalStore", "Store"]
