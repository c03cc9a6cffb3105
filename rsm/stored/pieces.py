"""What a stored piece is: its kind and number, the tag that binds a checksum to it, and its check.

A segment is cut into chunks of `chunk.size` original bytes (the last one shorter), stored back to back in
the `.log` object (`LOG` pieces, numbered from 0); its indexes are stored back to back in the `.indexes`
object (`INDEX` pieces, numbered by their position in `IndexType`). Each piece is transformed on its own
(`rsm.stored.stages`) so a ranged fetch decodes only the pieces it needs.

Unencrypted pieces carry the CRC-32C of their original bytes in the manifest, checked on every decode;
encrypted ones are authenticated by GCM instead (a CRC of the plaintext would leak a little of it). From
manifest version 2 the recorded CRC is "bound" (`bind_crc32c`): the CRC-32C of the original bytes followed
by the piece's tag (segment id, kind, number), so a CRC moved to another chunk, index or segment no longer
matches. It is computed from the plain CRC-32C in a few bytes' work, so a reader that checksums while it
reads (`ObjectStore.get_range_into`) keeps doing so.

The associated data of an encrypted piece names the manifest version the segment was written with
(`AAD_PREFIXES`): pieces written beside an authenticated (version 2) manifest do not decrypt through a
manifest edited to claim version 1, the unauthenticated format.
"""

from __future__ import annotations

import enum
import uuid

import crc32c as _crc32c

DATA_KEY_BYTES = 32
TAG_BYTES = 16
AAD_PREFIX = b"kafka-tiered-rsm/chunk/v1|"  # pieces of segments whose manifest is version 1
AAD_PREFIXES = {1: AAD_PREFIX, 2: b"kafka-tiered-rsm/chunk/v2|"}  # by manifest version
CURRENT_VERSION = 2  # the manifest version new copies are written with


class Codec(enum.IntEnum):
    """How a stored piece is compressed (in the manifest as the integer)."""

    NONE = 0
    ZSTD = 1


class PieceKind(enum.Enum):
    LOG = b"L"
    INDEX = b"I"


class TransformError(Exception):
    """A stored piece does not decode: authentication, decompression or checksum failure."""


def crc32c(data: bytes | memoryview, value: int = 0) -> int:
    return _crc32c.crc32c(data, value)


def piece_tag(segment_id: uuid.UUID, kind: PieceKind, number: int) -> bytes:
    """What a version 2 CRC binds a piece to: segment id (16 bytes), kind (1), number (8, big-endian)."""
    return segment_id.bytes + kind.value + number.to_bytes(8, "big")


def bind_crc32c(crc: int, tag: bytes) -> int:
    """The CRC-32C of (bytes whose CRC-32C is ``crc``) followed by ``tag``: a CRC bound to its piece."""
    return crc32c(tag, crc)


def check_piece(
    data: bytes | memoryview,
    *,
    kind: PieceKind,
    number: int,
    size: int,
    crc: int | None,
    computed_crc: int | None = None,
    tag: bytes | None = None,
) -> None:
    """The decoded piece has the recorded length and (when recorded) CRC-32C, else TransformError.

    ``computed_crc``: the piece's plain CRC-32C when the caller computed it while reading (not recomputed).
    ``tag``: the piece's `piece_tag` when the recorded CRC is bound to it (`bind_crc32c`).
    """
    if len(data) != size:
        raise TransformError(f"{kind.name.lower()} piece {number}: {len(data)} bytes, expected {size}")
    if crc is None:
        return
    actual = crc32c(data) if computed_crc is None else computed_crc
    if (actual if tag is None else bind_crc32c(actual, tag)) != crc:
        raise TransformError(
            f"{kind.name.lower()} piece {number}: CRC-32C mismatch"
            + ("" if tag is None else " (damaged, or recorded for another piece)")
        )
