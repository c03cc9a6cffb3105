"""What the RSM stores and hands back to Kafka binds and bounds itself: the custom metadata within Kafka's
128 bytes, object keys from the layout, data keys wrapped for one segment, pieces bound to their segment
and position, and manifests of an unknown version or shape refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kafka_segments import write_keyring

from rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageException,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException
from rsm.config.keyring import Keyring
from rsm.store.layout import Location, SegmentKeys
from rsm.stored import custom_metadata as cm
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import Manifest, ManifestError
from rsm.stored.pieces import PieceKind, TransformError
from rsm.stored.stages import decode_piece, encode_piece


def test_custom_metadata_round_trip_and_bound() -> None:
    loc = Location("b" * 63, "p" * 60)
    encoded = cm.encode(loc)
    assert len(encoded.value) <= 128 and cm.decode(encoded) == loc
    assert cm.decode(cm.encode(Location("a", ""))) == Location("a", "")
    with pytest.raises(RemoteStorageException, match="over the broker's limit"):
        cm.encode(Location("b" * 63, "p" * 70))
    with pytest.raises(RemoteStorageException, match="not this RSM's"):
        cm.decode(b"\x07garbage")


def test_layout_keys() -> None:
    tip = TopicIdPartition(uuid.UUID(int=1), "orders", 7)
    sid = uuid.UUID(int=2)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, sid), 1234, 2000, 1, 1, 1, 10, {})
    keys = SegmentKeys.of(Location("bkt", "pre/"), md)
    assert keys.log == "pre/orders-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAg.log"
    assert keys.manifest.endswith(".manifest") and keys.indexes.endswith(".indexes")


def test_keyring_wrap_unwrap_and_errors(tmp_path: Path) -> None:
    path = write_keyring(tmp_path / "k.json", ("a", "b"))
    ring = Keyring(path)
    dek = b"\x11" * 32
    wrapped = ring.wrap("a", dek, b"segment-1")
    assert dek not in wrapped and ring.unwrap("a", wrapped, b"segment-1") == dek
    with pytest.raises(RemoteStorageException, match="does not authenticate"):
        ring.unwrap("b", wrapped, b"segment-1")
    with pytest.raises(RemoteStorageException, match="does not authenticate"):
        ring.unwrap("a", wrapped, b"segment-2")
    with pytest.raises(RemoteStorageException, match="not in the keyring"):
        ring.wrap("zz", dek, b"x")
    (tmp_path / "bad.json").write_text(json.dumps({"k": "c2hvcnQ="}))
    with pytest.raises(ConfigException, match="expected 32"):
        Keyring(tmp_path / "bad.json")
    (tmp_path / "notjson.json").write_text("{AAAA secret")
    with pytest.raises(ConfigException) as info:
        Keyring(tmp_path / "notjson.json")
    assert "AAAA" not in str(info.value)


def test_pieces_are_bound_to_segment_and_position() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    key = b"\x01" * 32
    data = b"hello kafka " * 100
    stored, codec = encode_piece(
        data, kind=PieceKind.LOG, number=3, compress=True, level=3, cipher=SegmentCipher(key, a)
    )
    assert b"hello kafka" not in bytes(stored)
    ok = decode_piece(
        stored,
        kind=PieceKind.LOG,
        number=3,
        codec=codec,
        size=len(data),
        cipher=SegmentCipher(key, a),
        crc=None,
    )
    assert ok == data
    for kwargs in ({"number": 4}, {"kind": PieceKind.INDEX}):
        args = {"kind": PieceKind.LOG, "number": 3, **kwargs}
        with pytest.raises(TransformError, match="does not authenticate"):
            decode_piece(stored, codec=codec, size=len(data), cipher=SegmentCipher(key, a), crc=None, **args)  # type: ignore[arg-type]
    with pytest.raises(TransformError, match="does not authenticate"):
        decode_piece(
            stored,
            kind=PieceKind.LOG,
            number=3,
            codec=codec,
            size=len(data),
            cipher=SegmentCipher(key, b),
            crc=None,
        )


def test_manifest_rejects_unknown_versions_and_malformed_documents() -> None:
    with pytest.raises(ManifestError, match="version"):
        Manifest.from_bytes(
            json.dumps({"format": "kafka-tiered-rsm/segment-manifest", "version": 99}).encode()
        )
    with pytest.raises(ManifestError, match="not a"):
        Manifest.from_bytes(b'{"format": "x"}')
    with pytest.raises(ManifestError, match="malformed"):
        Manifest.from_bytes(
            json.dumps({"format": "kafka-tiered-rsm/segment-manifest", "version": 1}).encode()
        )
