"""Protobuf's wire format, read and written by hand where parsing a whole message would cost too much.

A serialized GraphDef of a frozen model is mostly weights: reading its op types, or
finding its function library, needs a walk over the field framing only (importing.py). XLA cache files
are checked the same way (xla/files.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes | memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message; raises ValueError when it is not one.

    Length-delimited values are memoryview slices (no copies); varints are ints; fixed32/64 are slices.
    """
    data = memoryview(data)
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        if pos > len(data):
            raise ValueError("field runs past the end")
        yield number, wire, value


def varint(value: int) -> bytes:
    """``value`` encoded as a protobuf varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def length_delimited_tag(number: int) -> bytes:
    """The tag of field ``number`` with wire type 2 (bytes, strings, messages)."""
    return varint(number << 3 | 2)
