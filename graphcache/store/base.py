"""The storage contract: bytes in, bytes out, by key. Every caller stays inside it; no caller tests a class.

A store moves an entry's bytes, verified or not: it never decodes, checks, counts or warns (the entry
service in core/service.py does, once, for every store). What a store must answer:

- ``read(key)`` / ``read_parts(key, hasher)`` / ``read_head(key)``: the entry file's bytes, whole, as
  (prefix + header, stored payload), or the prefix + header alone; None when the key is missing. A reader
  racing a deleter sees a miss. ``read_parts`` feeds ``hasher`` the stored payload (stores that can, while
  they read it).
- ``write(key, data)`` / ``write_parts(key, parts)``: publish an entry whole: a reader sees the old state
  or all of the new bytes, never part of them. Raises OSError (or the store's error) when it cannot.
- ``delete(key)``: the bytes freed, 0 when it was already gone (racing deleters are not an error).
- ``scan()``: every entry (``StoredFile``: key, path, size, mtime), in no particular order.
- ``stat(key)``: one entry's ``StoredFile``, or None.
- ``lock(key, timeout)``: a lock guarding ``key``'s compile across processes (``acquire()``/``release()``
  and a context manager; acquiring raises ``TimeoutError`` after ``timeout`` seconds), or None where the
  store has no locks.
- ``mark(group, key)`` / ``marked(group)``: list an entry in a named group and list a group's keys, for
  stores that keep groups (``keeps_groups``); a store without them lists nothing.
- ``read_only``: True when writes, deletes and marks are refused.

Stores that can coordinate machines (store/redis.py) also answer ``Leases``: a compile lease per key with a
time to live, taken only when free, renewed and released only by the token that took it. The policy built on
them (waiting, renewing, hedging: one compile per fleet) is core/flight.py's.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from ..entry import codec

Piece = bytes | memoryview


class StoredFile(NamedTuple):
    key: str
    path: str
    size: int
    mtime: float


class Lock(Protocol):
    """A cross-process lock (filelock's FileLock answers it)."""

    def acquire(self) -> Any: ...

    def release(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc_info: Any) -> Any: ...


class Leases(Protocol):
    """Compile leases, one per key (and a second, ``hedge``, for one extra compiler): ``acquire_lease`` takes
    it for ``ttl`` seconds if nobody holds it; ``renew_lease``/``release_lease`` act only while ``token``
    holds it (False otherwise); ``lease_holder`` is the holder's token or None. Failures raise OSError."""

    def acquire_lease(self, key: str, token: str, ttl: float, hedge: bool = False) -> bool: ...

    def renew_lease(self, key: str, token: str, ttl: float, hedge: bool = False) -> bool: ...

    def release_lease(self, key: str, token: str, hedge: bool = False) -> bool: ...

    def lease_holder(self, key: str, hedge: bool = False) -> str | None: ...


class Store(abc.ABC):
    """A key -> bytes store: see the module docstring for the contract."""

    read_only: bool = False
    keeps_groups: bool = False

    @abc.abstractmethod
    def read(self, key: str) -> bytes | None: ...

    def read_parts(self, key: str, hasher: Any = None) -> tuple[Piece, Piece] | None:
        """The entry as (prefix + header, stored payload), or None; stores that can read the two pieces
        apart override this to skip a copy (and hash while reading)."""
        data = self.read(key)
        return None if data is None else split_hashed(data, hasher)

    def read_head(self, key: str) -> Piece | None:
        """The entry's prefix + header alone (its payload unread where the store can), or None."""
        parts = self.read_parts(key)
        return None if parts is None else parts[0]

    def write(self, key: str, data: bytes) -> None:
        self.write_parts(key, (data,))

    @abc.abstractmethod
    def write_parts(self, key: str, parts: Iterable[Piece]) -> None:
        """Publish the concatenation of ``parts`` whole (stores that can, without joining them)."""

    @abc.abstractmethod
    def delete(self, key: str) -> int:
        """Remove an entry; returns the bytes freed (0 if it was already gone)."""

    @abc.abstractmethod
    def scan(self) -> Iterator[StoredFile]: ...

    @abc.abstractmethod
    def stat(self, key: str) -> StoredFile | None: ...

    def lock(self, key: str, timeout: float) -> Lock | None:
        """The lock guarding ``key``'s compile, or None: this store has no locks."""
        return None

    def mark(self, group: str, key: str) -> None:
        """List ``key`` in ``group`` (call it once the entry is published); a store without groups refuses."""
        raise NotImplementedError(f"{type(self).__name__} keeps no groups")

    def marked(self, group: str) -> list[str]:
        """The keys listed in ``group``; [] where the store keeps no groups."""
        return []


def split_hashed(data: Piece, hasher: Any = None) -> tuple[memoryview, memoryview]:
    """``codec.split(data)``, with the stored payload fed to ``hasher`` when one is given."""
    head, stored = codec.split(data)
    if hasher is not None:
        hasher.update(stored)
    return head, stored
