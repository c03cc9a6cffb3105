"""The piece transforms as stages (`rsm.stored.stages`) write and read exactly the bytes the format had.

Why: the stored format must not change when its code is reorganised; stores hold years of segments. The
reference below is the code that wrote every stored piece before the stages existed (`encode_piece`,
`decode_piece`, `decode_piece_into` as they were, and AES-GCM with the nonce and associated data spelled out
from the format's description), kept here verbatim so that the stages are compared with it byte for byte,
for every combination of compression and encryption, on log and index pieces, both directions, into a
buffer and not; and against a store the release that wrote manifest version 1 really wrote.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import cramjam
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from rsm.config.keyring import Keyring
from rsm.stored.cipher import SegmentCipher
from rsm.stored.data_keys import unwrap_data_key
from rsm.stored.manifest import INDEX_NUMBERS, Manifest
from rsm.stored.pieces import Codec, PieceKind, TransformError, check_piece, crc32c
from rsm.stored.stages import (
    CompressStage,
    EncryptStage,
    Piece,
    Stages,
    decode_piece,
    decode_piece_into,
    encode_piece,
)
from segment_format.buffers import copy_into

V1_STORE = Path(__file__).resolve().parents[1] / "data" / "manifest_v1_store"
TEST_ONLY_KEY = b"kafka-tiered-rsm-TEST-ONLY-key-1"  # the fixture's test key (see its README)
LEVEL = 3  # `compression.zstd.level`'s default


# -- the reference: the format as written before the stages --------------------------------------------------
class RefCipher:
    """AES-256-GCM as the format describes it: nonce = kind + 3 zero bytes + number (8, big-endian);
    associated data = the version's prefix + segment id (16) + kind + number (8, big-endian)."""

    def __init__(self, data_key: bytes, segment_id: uuid.UUID, version: int) -> None:
        self._aead = AESGCM(data_key)
        self._segment = segment_id.bytes
        self._prefix = {1: b"kafka-tiered-rsm/chunk/v1|", 2: b"kafka-tiered-rsm/chunk/v2|"}[version]

    def _nonce_aad(self, kind: PieceKind, number: int) -> tuple[bytes, bytes]:
        n = number.to_bytes(8, "big")
        return kind.value + b"\0\0\0" + n, self._prefix + self._segment + kind.value + n

    def encrypt(self, kind: PieceKind, number: int, data: bytes | memoryview) -> bytes:
        nonce, aad = self._nonce_aad(kind, number)
        return self._aead.encrypt(nonce, data, aad)

    def decrypt(self, kind: PieceKind, number: int, data: bytes | memoryview) -> bytes:
        nonce, aad = self._nonce_aad(kind, number)
        try:
            return self._aead.decrypt(nonce, data, aad)
        except InvalidTag:
            raise TransformError(
                f"{kind.name.lower()} piece {number} does not authenticate (tampered, misplaced or wrong key)"
            ) from None


def ref_encode_piece(data, *, kind, number, compress, level, cipher):  # type: ignore[no-untyped-def]
    payload = data
    codec = Codec.NONE
    if compress and len(data):
        packed = cramjam.zstd.compress(data, level=level)
        if len(packed) < len(data):
            payload, codec = memoryview(packed), Codec.ZSTD
    if cipher is not None:
        payload = cipher.encrypt(kind, number, payload)
    return payload, codec


def ref_decode_piece(stored, *, kind, number, codec, size, cipher, crc, tag=None):  # type: ignore[no-untyped-def]
    data = stored
    if cipher is not None:
        data = cipher.decrypt(kind, number, data)
    if codec is Codec.ZSTD:
        out = bytearray(size)
        ref_decompress_into(data, memoryview(out), kind=kind, number=number)
        data = memoryview(out).toreadonly()
    elif codec is not Codec.NONE:
        raise TransformError(f"{kind.name.lower()} piece {number}: unknown codec {codec}")
    check_piece(data, kind=kind, number=number, size=size, crc=crc, tag=tag)
    return data


def ref_decode_piece_into(stored, out, *, kind, number, codec, cipher, crc, tag=None):  # type: ignore[no-untyped-def]
    data = stored
    if cipher is not None:
        data = cipher.decrypt(kind, number, data)
    if codec is Codec.ZSTD:
        ref_decompress_into(data, out, kind=kind, number=number)
        check_piece(out, kind=kind, number=number, size=len(out), crc=crc, tag=tag)
    elif codec is Codec.NONE:
        check_piece(data, kind=kind, number=number, size=len(out), crc=crc, tag=tag)
        copy_into(out, [data])
    else:
        raise TransformError(f"{kind.name.lower()} piece {number}: unknown codec {codec}")


def ref_decompress_into(data, out, *, kind, number):  # type: ignore[no-untyped-def]
    name = kind.name.lower()
    try:
        n = cramjam.zstd.decompress_into(data, out)
    except Exception as exc:
        raise TransformError(
            f"{name} piece {number} does not decompress into the {len(out)} bytes recorded: {exc}"
        ) from None
    if n != len(out):
        raise TransformError(
            f"{name} piece {number} decompresses to {n} bytes, not the {len(out)} bytes recorded"
        )


# -- the comparison ----------------------------------------------------------------------------------------------
SEGMENT = uuid.UUID("00000000-0000-4000-8000-00000000abcd")
DATA_KEY = bytes(range(32))


def _samples() -> dict[str, bytes]:
    rng = random.Random(7)
    text = b"".join(
        b'{"order":%d,"sku":"item-%d"},' % (rng.randrange(10**6), rng.randrange(50)) for _ in range(3000)
    )
    return {
        "text": text,  # zstd makes it smaller: stored compressed
        "random": rng.randbytes(5000),  # zstd does not: stored as it is even with compression on
        "one-byte": b"x",
        "empty": b"",
    }


SAMPLES = _samples()
COMBINATIONS = [(compress, encrypt) for compress in (False, True) for encrypt in (False, True)]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", list(PieceKind), ids=lambda k: k.name)
@pytest.mark.parametrize(("compress", "encrypt"), COMBINATIONS, ids=["none", "encrypt", "compress", "both"])
@pytest.mark.parametrize("sample", list(SAMPLES))
def test_stages_write_and_read_the_bytes_the_format_had(
    sample: str, compress: bool, encrypt: bool, kind: PieceKind, version: int
) -> None:
    data = SAMPLES[sample]
    number = 3 if kind is PieceKind.LOG else INDEX_NUMBERS[list(INDEX_NUMBERS)[1]]
    cipher = SegmentCipher(DATA_KEY, SEGMENT, version) if encrypt else None
    ref_cipher = RefCipher(DATA_KEY, SEGMENT, version) if encrypt else None
    args = {"kind": kind, "number": number, "compress": compress, "level": LEVEL}

    stored, codec = encode_piece(data, cipher=cipher, **args)
    ref_stored, ref_codec = ref_encode_piece(data, cipher=ref_cipher, **args)
    assert bytes(stored) == bytes(ref_stored)  # GCM is deterministic for a given key, nonce and data
    assert codec is ref_codec
    if compress and sample == "text":
        assert codec is Codec.ZSTD  # the combination really compressed
    if encrypt:
        assert (
            len(stored) == len(data if codec is Codec.NONE else cramjam.zstd.compress(data, level=LEVEL)) + 16
        )

    crc = None if encrypt else crc32c(data)
    tag = None if version == 1 or encrypt else SEGMENT.bytes + kind.value + number.to_bytes(8, "big")
    if tag is not None:
        crc = crc32c(tag, crc32c(data))
    read = {"kind": kind, "number": number, "codec": codec, "crc": crc, "tag": tag}
    # each side decodes what the other wrote, whole and into a buffer
    for blob in (stored, ref_stored):
        assert bytes(decode_piece(blob, size=len(data), cipher=cipher, **read)) == data
        assert bytes(ref_decode_piece(blob, size=len(data), cipher=ref_cipher, **read)) == data
        for decode_into, c in ((decode_piece_into, cipher), (ref_decode_piece_into, ref_cipher)):
            out = bytearray(b"\xee" * len(data))
            decode_into(blob, memoryview(out), cipher=c, **read)
            assert bytes(out) == data


@pytest.mark.parametrize(("compress", "encrypt"), COMBINATIONS, ids=["none", "encrypt", "compress", "both"])
def test_damaged_pieces_fail_as_they_did(compress: bool, encrypt: bool) -> None:
    """A flipped byte, a wrong length or a piece moved to another number: the same TransformError, and a
    buffer decoded into is left alone when the piece does not check."""
    data = SAMPLES["text"]
    cipher = SegmentCipher(DATA_KEY, SEGMENT, 2) if encrypt else None
    ref_cipher = RefCipher(DATA_KEY, SEGMENT, 2) if encrypt else None
    stored, codec = encode_piece(
        data, kind=PieceKind.LOG, number=0, compress=compress, level=LEVEL, cipher=cipher
    )
    tag = SEGMENT.bytes + PieceKind.LOG.value + (0).to_bytes(8, "big")  # bound to chunk 0 (version 2)
    crc = None if encrypt else crc32c(tag, crc32c(data))
    flipped = bytearray(stored)
    flipped[len(flipped) // 2] ^= 1
    cases = [
        (bytes(flipped), 0, len(data)),  # damaged
        (bytes(stored), 0, len(data) + 1),  # recorded length off by one
        (bytes(stored), 1, len(data)),  # read as another chunk
    ]
    for blob, number, size in cases:
        tagged = SEGMENT.bytes + PieceKind.LOG.value + number.to_bytes(8, "big")
        args = {
            "kind": PieceKind.LOG,
            "number": number,
            "codec": codec,
            "crc": crc,
            "tag": None if encrypt else tagged,
        }
        with pytest.raises(TransformError) as new:
            decode_piece(blob, size=size, cipher=cipher, **args)
        with pytest.raises(TransformError) as ref:
            ref_decode_piece(blob, size=size, cipher=ref_cipher, **args)
        if not (compress and "decompress" in str(ref.value)):  # zstd's own words may carry no offsets
            assert str(new.value) == str(ref.value)
        out = bytearray(size)
        if codec is Codec.NONE:  # a plain piece is checked before it is copied in
            with pytest.raises(TransformError):
                decode_piece_into(blob, memoryview(out), cipher=cipher, **args)
            assert out == bytearray(size)


def test_a_new_stage_is_one_class() -> None:
    """Stages compose: a stage that is not compression or encryption runs in the list like them."""

    class Reverse:
        def encode(self, data, piece):  # type: ignore[no-untyped-def]
            return bytes(data)[::-1], piece

        def decode(self, data, piece, into):  # type: ignore[no-untyped-def]
            return bytes(data)[::-1]

    cipher = SegmentCipher(DATA_KEY, SEGMENT, 2)
    stages = Stages([CompressStage(LEVEL), Reverse(), EncryptStage(cipher)])
    data = SAMPLES["text"]
    stored, codec = stages.encode(data, PieceKind.LOG, 0)
    assert codec is Codec.ZSTD
    assert bytes(cipher.decrypt(PieceKind.LOG, 0, stored))[::-1] == bytes(
        cramjam.zstd.compress(data, level=LEVEL)
    )
    out = bytearray(len(data))
    stages.decode(stored, Piece(PieceKind.LOG, 0, len(data), codec), crc=None, tag=None, into=memoryview(out))
    assert out == data


# -- a store the release that wrote manifest version 1 wrote ------------------------------------------------------
def _fixture_segments() -> list[Path]:
    return sorted((V1_STORE / "store").rglob("*.manifest"))


@pytest.mark.parametrize(
    "manifest_path", _fixture_segments(), ids=lambda p: p.parent.parent.name.split("-")[0]
)
def test_pieces_written_before_the_stages_read_and_rewrite_the_same(manifest_path: Path) -> None:
    """Every piece of the fixture decodes through the stages as through the reference, and encoding the
    decoded bytes again with the segment's own data key writes the stored bytes again, byte for byte."""
    manifest = Manifest.from_bytes(manifest_path.read_bytes(), str(manifest_path))
    keyring = Keyring(keys={"test-only-k1": TEST_ONLY_KEY})
    data_key = unwrap_data_key(manifest, keyring)
    uid = manifest.segment_uuid
    cipher = None if data_key is None else SegmentCipher(data_key, uid, manifest.aad_version)
    ref_cipher = None if data_key is None else RefCipher(data_key, uid, manifest.aad_version or 1)
    stem = str(manifest_path)[: -len(".manifest")]
    log, indexes = Path(stem + ".log").read_bytes(), Path(stem + ".indexes").read_bytes()
    configs = {
        s["name"]: s["log_config"] for s in json.loads((V1_STORE / "segments.json").read_text())["segments"]
    }
    compress = configs[manifest.segment.topic].get("unchecked.rsm.compression.enabled", "true") == "true"

    pieces = []
    start = 0
    for i, stored_size in enumerate(manifest.log.stored_sizes):
        size = min(manifest.log.chunk_size, manifest.log.size - i * manifest.log.chunk_size)
        crc = manifest.log.crc32c[i] if manifest.log.crc32c else None
        pieces.append((PieceKind.LOG, i, log[start : start + stored_size], manifest.log.codecs[i], size, crc))
        start += stored_size
    for index_type, e in manifest.indexes.items():
        stored = indexes[e.offset : e.offset + e.stored_size]
        pieces.append((PieceKind.INDEX, INDEX_NUMBERS[index_type], stored, e.codec, e.size, e.crc32c))
    assert {codec for *_, codec, _, _ in pieces} == {Codec.NONE, Codec.ZSTD}  # both kinds of piece seen

    for kind, number, stored, codec, size, crc in pieces:
        read = {
            "kind": kind,
            "number": number,
            "codec": codec,
            "crc": crc,
            "tag": manifest.piece_tag(kind, number),
        }
        original = bytes(decode_piece(stored, size=size, cipher=cipher, **read))
        assert original == bytes(ref_decode_piece(stored, size=size, cipher=ref_cipher, **read))
        out = bytearray(size)
        decode_piece_into(stored, memoryview(out), cipher=cipher, **read)
        assert out == original
        again, again_codec = encode_piece(
            original,
            kind=kind,
            number=number,
            compress=compress and codec is Codec.ZSTD,
            level=LEVEL,
            cipher=cipher,
        )
        assert (bytes(again), again_codec) == (stored, codec), f"{kind.name} piece {number}"
