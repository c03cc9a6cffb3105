"""Per-chunk transforms: zstd compression, then AES-256-GCM with a per-segment data key.

A segment is cut into chunks of `chunk.size` original bytes (the last one shorter); each chunk is
transformed on its own so a ranged fetch decodes only the chunks it needs:

1. compression (zstd) unless the topic disables it, the chunk is mostly made of batches that are already
   compressed (compressing them again costs CPU for nothing), or zstd does not make it smaller;
2. encryption, when the topic enables it: AES-256-GCM under a data key drawn fresh for every copy of a
   segment. The 96-bit nonce is (piece kind, chunk number): unique per key because the key is unique per
   copy. The associated data binds each ciphertext to the segment id, the piece kind and the chunk number,
   so chunks cannot be swapped, reordered or moved to another segment without failing authentication.

Pieces are of two kinds: `LOG` chunks of the `.log` object and `INDEX` pieces of the `.indexes` object
(numbered by index type). The data key is stored in the manifest only wrapped by a keyring key.

The associated data also names the manifest version the segment was written with (`.../chunk/v1|` for
version 1, `.../chunk/v2|` from version 2): pieces written beside an authenticated (version 2) manifest do
not decrypt through a manifest edited to claim version 1, the unauthenticated format. The same data key,
through HKDF-SHA256, keys the HMAC-SHA256 seal of a version 2 manifest (`SegmentCipher.seal_manifest`),
so whoever can decrypt a segment can check its manifest, and nobody else can forge one.

Unencrypted chunks carry the CRC-32C of their original bytes in the manifest, checked on every decode;
encrypted ones are authenticated by GCM instead (a CRC of the plaintext would leak a little of it). From
manifest version 2 the recorded CRC is "bound" (`bind_crc32c`): the CRC-32C of the original bytes followed
by the piece's tag (segment id, kind, number), so a CRC moved to another chunk, index or segment no longer
matches. It is computed from the plain CRC-32C in a few bytes' work, so a reader that checksums while it
reads (`ObjectStore.get_range_into`) keeps doing so.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import uuid

import cramjam
import crc32c as _crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from segment_format.buffers import copy_into

DATA_KEY_BYTES = 32
TAG_BYTES = 16
AAD_PREFIX = b"kafka-tiered-rsm/chunk/v1|"  # pieces of segments whose manifest is version 1
AAD_PREFIXES = {1: AAD_PREFIX, 2: b"kafka-tiered-rsm/chunk/v2|"}  # by manifest version
SEAL_KEY_INFO = b"kafka-tiered-rsm/manifest-seal/v2|"  # HKDF info (then the segment id) of the seal key
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


def new_data_key() -> bytes:
    return os.urandom(DATA_KEY_BYTES)


def piece_tag(segment_id: uuid.UUID, kind: PieceKind, number: int) -> bytes:
    """What a version 2 CRC binds a piece to: segment id (16 bytes), kind (1), number (8, big-endian)."""
    return segment_id.bytes + kind.value + number.to_bytes(8, "big")


def bind_crc32c(crc: int, tag: bytes) -> int:
    """The CRC-32C of (bytes whose CRC-32C is ``crc``) followed by ``tag``: a CRC bound to its piece."""
    return crc32c(tag, crc)


class SegmentCipher:
    """AES-256-GCM for the pieces of one segment copy, and the HMAC seal of its manifest.

    ``version``: the associated-data version of the copy's pieces (see the module): the manifest version
    it was copied with.
    """

    def __init__(self, data_key: bytes, segment_id: uuid.UUID, version: int = CURRENT_VERSION) -> None:
        if len(data_key) != DATA_KEY_BYTES:
            raise ValueError("a data key is 32 bytes")
        if version not in AAD_PREFIXES:
            raise ValueError(f"no piece format for manifest version {version}")
        self._aead = AESGCM(data_key)
        self._segment = segment_id.bytes
        self._prefix = AAD_PREFIXES[version]
        self._data_key = data_key
        self._seal_key: bytes | None = None  # derived when first needed: a fetch checks a seal once

    @staticmethod
    def _nonce(kind: PieceKind, number: int) -> bytes:
        return kind.value + b"\0\0\0" + number.to_bytes(8, "big")

    def _aad(self, kind: PieceKind, number: int) -> bytes:
        return self._prefix + self._segment + kind.value + number.to_bytes(8, "big")

    def seal_manifest(self, body: bytes) -> bytes:
        """HMAC-SHA256 of a manifest's canonical bytes under the key derived from the data key."""
        if self._seal_key is None:
            self._seal_key = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=None, info=SEAL_KEY_INFO + self._segment
            ).derive(self._data_key)
        return hmac.new(self._seal_key, body, hashlib.sha256).digest()

    def manifest_seal_matches(self, body: bytes, seal: bytes) -> bool:
        """Whether ``seal`` is this segment's seal of ``body`` (compared in constant time)."""
        return hmac.compare_digest(self.seal_manifest(body), seal)

    def encrypt(self, kind: PieceKind, number: int, data: bytes | memoryview) -> bytes:
        return self._aead.encrypt(self._nonce(kind, number), data, self._aad(kind, number))

    def decrypt(self, kind: PieceKind, number: int, data: bytes | memoryview) -> bytes:
        try:
            return self._aead.decrypt(self._nonce(kind, number), data, self._aad(kind, number))
        except InvalidTag:
            raise TransformError(
                f"{kind.name.lower()} piece {number} does not authenticate (tampered, misplaced or wrong key)"
            ) from None


def encode_piece(
    data: bytes | memoryview,
    *,
    kind: PieceKind,
    number: int,
    compress: bool,
    level: int,
    cipher: SegmentCipher | None,
) -> tuple[bytes | memoryview, Codec]:
    """Transform one chunk for storage; returns the stored bytes and the codec actually used."""
    payload: bytes | memoryview = data
    codec = Codec.NONE
    if compress and len(data):
        packed = cramjam.zstd.compress(data, level=level)
        if len(packed) < len(data):
            payload, codec = memoryview(packed), Codec.ZSTD
    if cipher is not None:
        payload = cipher.encrypt(kind, number, payload)
    return payload, codec


def decode_piece(
    stored: bytes | memoryview,
    *,
    kind: PieceKind,
    number: int,
    codec: Codec,
    size: int,
    cipher: SegmentCipher | None,
    crc: int | None,
    tag: bytes | None = None,
) -> bytes | memoryview:
    """Undo `encode_piece`, checking length and (when recorded) the CRC-32C of the original bytes.

    ``tag``: the piece's `piece_tag` when ``crc`` is bound to it (manifest version 2), else None.

    A decompressed piece comes back as a read-only view of the buffer it was decompressed into (not
    copied into bytes); it must fill exactly ``size`` bytes (see `_decompress_into`).
    """
    data: bytes | memoryview = stored
    if cipher is not None:
        data = cipher.decrypt(kind, number, data)
    if codec is Codec.ZSTD:
        out = bytearray(size)
        _decompress_into(data, memoryview(out), kind=kind, number=number)
        data = memoryview(out).toreadonly()
    elif codec is not Codec.NONE:
        raise TransformError(f"{kind.name.lower()} piece {number}: unknown codec {codec}")
    check_piece(data, kind=kind, number=number, size=size, crc=crc, tag=tag)
    return data


def decode_piece_into(
    stored: bytes | memoryview,
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
    data: bytes | memoryview = stored
    if cipher is not None:
        data = cipher.decrypt(kind, number, data)
    if codec is Codec.ZSTD:
        _decompress_into(data, out, kind=kind, number=number)
        check_piece(out, kind=kind, number=number, size=len(out), crc=crc, tag=tag)
    elif codec is Codec.NONE:
        check_piece(data, kind=kind, number=number, size=len(out), crc=crc, tag=tag)  # before it is copied in
        copy_into(out, [data])
    else:
        raise TransformError(f"{kind.name.lower()} piece {number}: unknown codec {codec}")


def _decompress_into(data: bytes | memoryview, out: memoryview, *, kind: PieceKind, number: int) -> None:
    """Decompress a zstd piece into ``out``, which must come out exactly full, else TransformError.

    Why exactly: asked for an output length, the decompressor pads a shorter piece with zeros, and an
    encrypted piece has no CRC that would notice; so the recorded length is checked here, for every piece.
    """
    name = kind.name.lower()
    try:
        n = cramjam.zstd.decompress_into(data, out)
    except Exception as exc:  # cramjam raises its own DecompressionError; a longer piece does not fit
        raise TransformError(
            f"{name} piece {number} does not decompress into the {len(out)} bytes recorded: {exc}"
        ) from None
    if n != len(out):
        raise TransformError(
            f"{name} piece {number} decompresses to {n} bytes, not the {len(out)} bytes recorded"
        )


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
