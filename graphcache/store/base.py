"""The storage interface: bytes in, bytes out, by key. Policies (eviction, versions, stats) live elsewhere."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..entry import codec


@dataclass(frozen=True)
class StoredFile:
    key: str
    path: str
    size: int
    mtime: float


class Store(abc.ABC):
    """A key -> bytes store. ``read`` returns None for a missing key; races with deleters are misses."""

    read_only: bool = False

    @abc.abstractmethod
    def read(self, key: str) -> bytes | None: ...

    def read_parts(self, key: str, hasher: Any = None) -> tuple[bytes | memoryview, bytes | memoryview] | None:
        """The entry as (prefix + header, stored payload), or None when missing (core/checked.py reads
        entries this way); ``hasher``, when given, is fed the stored payload. Stores that can read the two
        pieces separately override this to skip a copy (and hash while reading)."""
        data = self.read(key)
        return None if data is None else split_hashed(data, hasher)

    @abc.abstractmethod
    def write(self, key: str, data: bytes) -> None: ...

    def write_parts(self, key: str, parts: Iterable[bytes | memoryview]) -> None:
        """Write the concatenation of ``parts`` (stores that can, write them without joining)."""
        self.write(key, b"".join(parts))

    @abc.abstractmethod
    def delete(self, key: str) -> int:
        """Remove an entry; returns the bytes freed (0 if it was already gone)."""

    @abc.abstractmethod
    def scan(self) -> Iterator[StoredFile]: ...


def split_hashed(data: bytes | memoryview, hasher: Any = None) -> tuple[memoryview, memoryview]:
    """``codec.split(data)``, with the stored payload fed to ``hasher`` when one is given."""
    head, stored = codec.split(data)
    if hasher is not None:
        hasher.update(stored)
    return head, stored
