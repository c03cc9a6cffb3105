"""Zigzag LEB128 varints as Kafka's ``ByteUtils`` reads and writes them.

Readers take a bytes-like object and a position and return ``(value, next_position)``; they raise
:class:`CorruptRecordError` for a truncated varint or one longer than its type allows (5 bytes for a
varint, 10 for a varlong), as Kafka does.
"""

from __future__ import annotations

from .errors import CorruptRecordError

__all__ = [
    "read_unsigned_varint",
    "read_varint",
    "read_varlong",
    "size_of_varint",
    "size_of_varlong",
    "write_unsigned_varint",
    "write_varint",
    "write_varlong",
    "zigzag_decode",
    "zigzag_encode",
]


def zigzag_encode(value: int, bits: int = 64) -> int:
    """Map a signed integer to an unsigned one (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)


def zigzag_decode(value: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (value >> 1) ^ -(value & 1)


def _read_unsigned(buf: bytes | memoryview, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecordError(f"truncated {what}", position=start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise CorruptRecordError(f"{what} longer than {max_bytes} bytes", position=start)


def read_unsigned_varint(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """An unsigned LEB128 int (at most 5 bytes)."""
    value, pos = _read_unsigned(buf, pos, 5, "unsigned varint")
    return value & 0xFFFFFFFF, pos


def read_varint(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """A zigzag varint (int32, at most 5 bytes)."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:  # fast path: one byte
        return (b >> 1) ^ -(b & 1), pos + 1
    value, pos = _read_unsigned(buf, pos, 5, "varint")
    value &= 0xFFFFFFFF
    return (value >> 1) ^ -(value & 1), pos


def read_varlong(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """A zigzag varlong (int64, at most 10 bytes)."""
    value, pos = _read_unsigned(buf, pos, 10, "varlong")
    value &= 0xFFFFFFFFFFFFFFFF
    return (value >> 1) ^ -(value & 1), pos


def write_unsigned_varint(value: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative integer."""
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_varint(value: int) -> bytes:
    """Zigzag varint encoding of an int32."""
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of int32 range: {value}")
    return write_unsigned_varint(zigzag_encode(value, 32))


def write_varlong(value: int) -> bytes:
    """Zigzag varlong encoding of an int64."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of int64 range: {value}")
    return write_unsigned_varint(zigzag_encode(value, 64))


def size_of_varint(value: int) -> int:
    """Encoded size of a zigzag varint."""
    return len(write_varint(value))


def size_of_varlong(value: int) -> int:
    """Encoded size of a zigzag varlong."""
    return len(write_varlong(value))
