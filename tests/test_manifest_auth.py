"""Issue 15, defect 2: manifests and stored pieces that were edited, truncated or rewritten are refused,
naming the object at fault, and never answered with wrong bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_rsm_helpers import read_all

from rsm import (
    CustomMetadata,
    IndexType,
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.config import RsmConfig
from rsm.fetch import SegmentReader, list_manifests
from rsm.keyring import Keyring
from rsm.metadata import uuid_from_base64
from rsm.storage import ObjectStore
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


# -- a store written by the release that wrote manifest version 1 (tests/data/manifest_v1_store) ----------

V1_STORE = Path(__file__).resolve().parent / "data" / "manifest_v1_store"
TEST_ONLY_KEY = b"kafka-tiered-rsm-TEST-ONLY-key-1"  # the fixture's test key (see its README)


@dataclass(frozen=True)
class StoredSegment:
    """A tiered segment as a test sees it: Kafka's metadata, topic config and the originals' SHA-256."""

    name: str
    metadata: RemoteLogSegmentMetadata
    log_config: LogConfig
    sha256: dict[str, str]


def v1_store(tmp_path: Path) -> tuple[dict[str, str], dict[str, StoredSegment]]:
    """A private copy of the v1 fixture store (tests edit it), its RSM configs and its segments."""
    root = tmp_path / "store"
    shutil.copytree(V1_STORE / "store", root)
    keyring = tmp_path / "test-only-kek.json"
    keyring.write_text(json.dumps({"test-only-k1": base64.b64encode(TEST_ONLY_KEY).decode()}))
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "bucket": "fixture-bucket",
        "encryption.keyring.path": str(keyring),
    }
    segments = {}
    for doc in json.loads((V1_STORE / "segments.json").read_text())["segments"]:
        tip = TopicIdPartition(uuid_from_base64(doc["topic_id"]), doc["topic"], doc["partition"])
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, uuid_from_base64(doc["segment_id"])),
            doc["start_offset"],
            doc["end_offset"],
            doc["max_timestamp_ms"],
            doc["broker_id"],
            doc["event_timestamp_ms"],
            doc["segment_size_in_bytes"],
            {int(k): v for k, v in doc["segment_leader_epochs"].items()},
            CustomMetadata(base64.b64decode(doc["custom_metadata"])),
        )
        segments[doc["name"]] = StoredSegment(
            doc["name"], metadata, LogConfig(doc["log_config"]), doc["sha256"]
        )
    return configs, segments


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_reads_back(rsm: RemoteStorageManager, seg: StoredSegment) -> None:
    """Every byte of the segment and each of its indexes, as the originals were."""
    md, lc = seg.metadata, seg.log_config
    whole = read_all(rsm.fetch_log_segment(md, 0, None, lc))
    assert sha256(whole) == seg.sha256["log"], seg.name
    assert read_all(rsm.fetch_log_segment(md, 4000, 8300, lc)) == whole[4000:8301]
    for index_type in IndexType:
        if index_type.name in seg.sha256:
            assert sha256(read_all(rsm.fetch_index(md, index_type, lc))) == seg.sha256[index_type.name]
        else:
            with pytest.raises(RemoteResourceNotFoundException):
                rsm.fetch_index(md, index_type, lc)


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
def test_a_store_written_by_the_v1_release_still_reads(tmp_path: Path, arena: bool) -> None:
    configs, segments = v1_store(tmp_path)
    assert set(segments) == {"plain", "secure"}
    with RemoteStorageManager() as rsm:
        rsm.configure(configs)
        if arena:  # decoded straight into buffers of exactly the chunk's size, as the bridge's arena does
            rsm.set_chunk_allocator(bytearray)
        for seg in segments.values():
            check_reads_back(rsm, seg)
    # and from the manifests alone (the Spark reader, the migration tool)
    store = ObjectStore.from_config(RsmConfig(configs))
    keyring = Keyring(keys={"test-only-k1": TEST_ONLY_KEY})
    keys = list_manifests(store, "fixture-bucket")
    assert len(keys) == 2
    for key in keys:
        reader = SegmentReader.open(store, "fixture-bucket", key, keyring)
        assert reader.manifest.version == 1
        assert (
            sha256(reader.read_range(0, reader.size)) == segments[reader.manifest.segment.topic].sha256["log"]
        )
