"""The per-piece transforms as stages: compression, then encryption, composed into `Stages`.

Each stage is one class with an `encode` and a `decode`; `Stages.build` composes the ones a topic's
configuration turns on, in the order they are applied when writing (decoding runs them backwards). A new
transform is one more class here and one more line in `Stages.build`; the bytes a given list of stages
writes are the stored format, so a stage once written must keep decoding what it wrote.

1. `CompressStage` (zstd) unless the topic disables it; it also leaves a piece alone when zstd does not make
   it smaller (a chunk mostly made of batches that are already compressed), and records which it did in the
   piece's codec (`rsm.stored.pieces.Codec`, in the manifest);
2. `EncryptStage` (AES-256-GCM, `rsm.stored.cipher.SegmentCipher`) when the topic enables it.

`encode_piece`, `decode_piece` and `decode_piece_into` are the functions callers use: one piece through the
stages, then (decoding) the length and CRC check of `rsm.stored.pieces.check_piece`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import cramjam

from rsm.stored.cipher import SegmentCipher
from rsm.stored.pieces import Codec, PieceKind, TransformError, check_piece
from segment_format.buffers import copy_into

Data = bytes | memoryview


class Piece(NamedTuple):
    """Which piece a stage transforms and how it is recorded: all a stage needs besides its bytes.

    ``codec``: writing, what the stages applied so far chose; reading, what the manifest records.
    ``size``: the length of the original bytes (reading: as recorded).
    """

    kind: PieceKind
    number: int
    size: int
    codec: Codec = Codec.NONE

    @property
    def name(self) -> str:
        return f"{self.kind.name.lower()} piece {self.number}"


class Stage(Protocol):
    """One transform of a stored piece."""

    def encode(self, data: Data, piece: Piece) -> tuple[Data, Piece]:
        """The piece's bytes after this stage, and the piece as recorded (a stage may set its codec)."""
        ...

    def decode(self, data: Data, piece: Piece, into: memoryview | None) -> Data:
        """Undo `encode`. ``into``: where the original bytes go when this stage produces them (it may write
        them there and return ``into``, or return them elsewhere for the caller to copy)."""
        ...


class CompressStage:
    """zstd at ``level``, kept only when it makes the piece smaller (the codec records which)."""

    __slots__ = ("level",)

    def __init__(self, level: int) -> None:
        self.level = level

    def encode(self, data: Data, piece: Piece) -> tuple[Data, Piece]:
        if not len(data):
            return data, piece
        packed = cramjam.zstd.compress(data, level=self.level)
        if len(packed) >= len(data):
            return data, piece
        return memoryview(packed), Piece(piece.kind, piece.number, piece.size, Codec.ZSTD)

    def decode(self, data: Data, piece: Piece, into: memoryview | None) -> Data:
        if piece.codec is Codec.ZSTD:
            if into is None:
                out = bytearray(piece.size)
                _decompress_into(data, memoryview(out), piece)
                return memoryview(out).toreadonly()
            _decompress_into(data, into, piece)
            return into
        if piece.codec is not Codec.NONE:
            raise TransformError(f"{piece.name}: unknown codec {piece.codec}")
        return data


def _decompress_into(data: Data, out: memoryview, piece: Piece) -> None:
    """Decompress a zstd piece into ``out``, which must come out exactly full, else TransformError.

    Why exactly: asked for an output length, the decompressor pads a shorter piece with zeros, and an
    encrypted piece has no CRC that would notice; so the recorded length is checked here, for every piece.
    """
    try:
        n = cramjam.zstd.decompress_into(data, out)
    except Exception as exc:  # cramjam raises its own DecompressionError; a longer piece does not fit
        raise TransformError(
            f"{piece.name} does not decompress into the {len(out)} bytes recorded: {exc}"
        ) from None
    if n != len(out):
        raise TransformError(f"{piece.name} decompresses to {n} bytes, not the {len(out)} bytes recorded")


class EncryptStage:
    """AES-256-GCM under the segment's data key; nonce and associated data name the piece (`SegmentCipher`)."""

    __slots__ = ("cipher",)

    def __init__(self, cipher: SegmentCipher) -> None:
        self.cipher = cipher

    def encode(self, data: Data, piece: Piece) -> tuple[Data, Piece]:
        return self.cipher.encrypt(piece.kind, piece.number, data), piece

    def decode(self, data: Data, piece: Piece, into: memoryview | None) -> Data:
        return self.cipher.decrypt(piece.kind, piece.number, data)


class Stages:
    """The stages of a segment's pieces, in the order they apply when writing."""

    __slots__ = ("_decompresses", "_stages")

    def __init__(self, stages: Sequence[Stage]) -> None:
        self._stages = tuple(stages)
        self._decompresses = CompressStage in map(type, self._stages)

    @classmethod
    def build(cls, *, compress: bool, level: int, cipher: SegmentCipher | None) -> Stages:
        """The stages a topic's configuration turns on: compression, then encryption.

        Reading, pass ``compress=True``: whether a piece is compressed is recorded per piece (its codec).
        """
        stages: list[Stage] = []
        if compress:
            stages.append(CompressStage(level))
        if cipher is not None:
            stages.append(EncryptStage(cipher))
        return cls(stages)

    def encode(self, data: Data, kind: PieceKind, number: int) -> tuple[Data, Codec]:
        """One piece's original bytes as stored, and the codec to record."""
        piece = Piece(kind, number, len(data))
        for stage in self._stages:
            data, piece = stage.encode(data, piece)
        return data, piece.codec

    def decode(
        self,
        stored: Data,
        piece: Piece,
        *,
        crc: int | None,
        tag: bytes | None,
        into: memoryview | None = None,
    ) -> Data:
        """The piece's original bytes (in ``into`` when given), checked with `check_piece` before use."""
        data = stored
        for i in range(len(self._stages) - 1, -1, -1):
            data = self._stages[i].decode(data, piece, into if i == 0 else None)
        if piece.codec is not Codec.NONE and not self._decompresses:
            raise TransformError(f"{piece.name}: recorded as {piece.codec.name} but not decompressed")
        check_piece(data, kind=piece.kind, number=piece.number, size=piece.size, crc=crc, tag=tag)
        if into is not None and data is not into:
            copy_into(into, [data])  # after the check: a piece that does not check is never copied in
        return data


@functools.lru_cache(maxsize=64)
def _plain(compress: bool, level: int) -> Stages:
    """The stages of an unencrypted segment (they hold no key, so one list serves every piece)."""
    return Stages.build(compress=compress, level=level, cipher=None)


_PLAIN_READ = _plain(True, 0)  # reading an unencrypted segment: whether a piece is compressed is recorded


def encode_piece(
    data: Data,
    *,
    kind: PieceKind,
    number: int,
    compress: bool,
    level: int,
    cipher: SegmentCipher | None,
) -> tuple[Data, Codec]:
    """Transform one chunk for storage; returns the stored bytes and the codec actually used."""
    stages = (
        _plain(compress, level)
        if cipher is None
        else Stages.build(compress=compress, level=level, cipher=cipher)
    )
    return stages.encode(data, kind, number)


def decode_piece(
    stored: Data,
    *,
    kind: PieceKind,
    number: int,
    codec: Codec,
    size: int,
    cipher: SegmentCipher | None,
    crc: int | None,
    tag: bytes | None = None,
) -> Data:
    """Undo `encode_piece`, checking length and (when recorded) the CRC-32C of the original bytes.

    ``tag``: the piece's `piece_tag` when ``crc`` is bound to it (manifest version 2), else None.

    A decompressed piece comes back as a read-only view of the buffer it was decompressed into (not
    copied into bytes); it must fill exactly ``size`` bytes.
    """
    stages = _PLAIN_READ if cipher is None else Stages.build(compress=True, level=0, cipher=cipher)
    return stages.decode(stored, Piece(kind, number, size, codec), crc=crc, tag=tag)


def decode_piece_into(
    stored: Data,
    out: memoryview,
    *,
    kind: PieceKind,
    number: int,
    codec: Codec,
    cipher: SegmentCipher | None,
    crc: int | None,
    tag: bytes | None = None,
) -> None:
    """`decode_piece` writing the original bytes into ``out`` (exactly their size): a shared arena block."""
    stages = _PLAIN_READ if cipher is None else Stages.build(compress=True, level=0, cipher=cipher)
    stages.decode(stored, Piece(kind, number, len(out), codec), crc=crc, tag=tag, into=out)
