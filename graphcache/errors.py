"""The exceptions graphcache raises.

Few types, each carrying the thing it is about, and each message naming the problem and the fix.
"""

from __future__ import annotations


class GraphCacheError(Exception):
    """Base class of every graphcache error."""


class CacheDirError(GraphCacheError):
    """An explicit cache directory does not exist or cannot be used."""

    def __init__(self, message: str, cache_dir: str) -> None:
        super().__init__(message)
        self.cache_dir = cache_dir

    def __reduce__(self):  # keep the path when pickled across processes
        return (type(self), (self.args[0], self.cache_dir))


class InvalidGraphError(GraphCacheError, ValueError):
    """The input is not a usable GraphDef (bad bytes, wrong type, unknown feed or fetch, ...)."""


class UnsupportedGraphError(GraphCacheError):
    """The graph holds resource state that a compiled artifact cannot carry (tables, iterators, ...).

    ``nodes`` lists ``(node name, op)`` pairs of every offending node.
    """

    def __init__(self, message: str, nodes: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.nodes = list(nodes or [])

    def __reduce__(self):
        return (type(self), (self.args[0], self.nodes))


class CorruptEntryError(GraphCacheError):
    """An entry file failed its format, checksum or key check."""


class UntrustedEntryError(CorruptEntryError):
    """An entry is intact but must not be used: unsigned or badly signed while a signing key is set."""


class CacheIOError(GraphCacheError):
    """A cache operation failed (only raised in strict mode; otherwise the cache fails open)."""


class GraphCacheWarning(UserWarning):
    """Category of every warning graphcache emits (a cache problem that did not break the run)."""
