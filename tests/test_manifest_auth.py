"""Issue 15, defect 2: manifests and stored pieces that were edited, truncated or rewritten are refused,
naming the object at fault, and never answered with wrong bytes."""

from __future__ import annotations

import uuid

import pytest

from rsm.transform import (
    Codec,
    PieceKind,
    SegmentCipher,
    TransformError,
    decode_piece,
    decode_piece_into,
    encode_piece,
)

DATA = b"kafka tiered storage " * 300


@pytest.mark.parametrize("encrypted", [False, True])
@pytest.mark.parametrize("delta", [-1, 1, 4096])
def test_a_piece_must_decode_to_exactly_the_recorded_length(encrypted: bool, delta: int) -> None:
    """The decompressor pads to the length asked for: a recorded size larger than the piece must fail,
    not answer zero bytes (encrypted pieces carry no CRC to catch it)."""
    cipher = SegmentCipher(b"\x07" * 32, uuid.uuid4()) if encrypted else None
    stored, codec = encode_piece(DATA, kind=PieceKind.LOG, number=2, compress=True, level=3, cipher=cipher)
    assert codec is Codec.ZSTD
    size = len(DATA) + delta
    with pytest.raises(TransformError, match=rf"log piece 2 .*\bthe {size} bytes recorded"):
        decode_piece(stored, kind=PieceKind.LOG, number=2, codec=codec, size=size, cipher=cipher, crc=None)
    with pytest.raises(TransformError, match=rf"log piece 2 .*\bthe {size} bytes recorded"):
        decode_piece_into(
            stored,
            memoryview(bytearray(size)),
            kind=PieceKind.LOG,
            number=2,
            codec=codec,
            cipher=cipher,
            crc=None,
        )
    good = decode_piece(
        stored, kind=PieceKind.LOG, number=2, codec=codec, size=len(DATA), cipher=cipher, crc=None
    )
    assert bytes(good) == DATA
