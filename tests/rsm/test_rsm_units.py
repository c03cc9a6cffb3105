"""Unit tests of the rsm building blocks: ids, config resolution, custom metadata, keyring, cache, the
integrity verifier (on segments real Kafka brokers wrote) and the download accounting of ranged fetches."""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from pathlib import Path

import pytest
from fixtures_data import SEGMENTS, fixture_path
from kafka_segments import make_segment, read_all, write_keyring

from rsm import (
    CustomMetadata,
    LogConfig,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import ConfigException, SegmentIntegrityError
from rsm.api.metadata import uuid_from_base64, uuid_to_base64
from rsm.config.keyring import Keyring
from rsm.config.settings import ConfigSource, RsmConfig
from rsm.copy.integrity import SegmentIntegrityVerifier
from rsm.fetch.cache import ByteLRU, IdentityMemo
from rsm.fetch.segments import reader_of
from rsm.store import custom_metadata as cm
from rsm.store.layout import Location, SegmentKeys
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import Manifest, ManifestError
from rsm.stored.pieces import PieceKind, TransformError
from rsm.stored.stages import decode_piece, encode_piece
from segment_format.indexes import build_indexes

FIXTURES = fixture_path("public", "segments") if SEGMENTS.exists() or os.environ.get("CI") else SEGMENTS


def test_ids_accept_and_print_kafka_base64() -> None:
    # Kafka's well-known METADATA_TOPIC_ID is Uuid(0, 1), printed AAAAAAAAAAAAAAAAAAAAAQ
    assert uuid_to_base64(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    tip = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAQ", "__cluster_metadata", 0)  # type: ignore[arg-type]
    assert tip.topic_id == uuid.UUID(int=1)
    assert str(tip) == "AAAAAAAAAAAAAAAAAAAAAQ:__cluster_metadata-0"
    seg_id = uuid.uuid4()
    sid = RemoteLogSegmentId(tip, uuid_to_base64(seg_id))  # type: ignore[arg-type]
    assert sid.id == seg_id and uuid_from_base64(sid.id_base64) == seg_id
    with pytest.raises(ValueError, match="22 base64"):
        uuid_from_base64("short")
    md = RemoteLogSegmentMetadata(sid, 0, 9, 1, 1, 1, 100, {2: 5, 1: 0})
    assert list(md.segment_leader_epochs.items()) == [(1, 0), (2, 5)]
    replaced = dataclasses.replace(md, custom_metadata=CustomMetadata(b"x"))
    assert replaced.custom_metadata == CustomMetadata(b"x") and md.custom_metadata is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        md.start_offset = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="start <= end"):
        RemoteLogSegmentMetadata(sid, 10, 9, 1, 1, 1, 100, {})


def test_log_config_unchecked_configs() -> None:
    lc = LogConfig(
        {"retention.ms": 5, "unchecked.rsm.bucket": "a", "unchecked.other": "x", "cleanup.policy": None}
    )
    assert lc.unchecked_configs() == {"unchecked.rsm.bucket": "a", "unchecked.other": "x"}
    assert lc["retention.ms"] == "5" and "cleanup.policy" not in lc


def test_config_resolution_and_sources(tmp_path: Path) -> None:
    config = RsmConfig(
        {
            "rsm.config.storage.backend": "file",
            "storage.file.root": str(tmp_path),
            "bucket": "broker-bucket",
            "chunk.size": "1MiB",
            "storage.s3.secret.access.key": "s3cr3t",
        }
    )
    lc = LogConfig({"unchecked.rsm.prefix": "team/", "unchecked.rsm.chunk.size": "65536"})
    s = config.resolve(lc)
    assert (s.bucket, s.prefix, s.chunk_size, s.compression_enabled) == (
        "broker-bucket",
        "team/",
        65536,
        True,
    )
    entries = {e.name: e for e in config.describe(lc)}
    assert (
        entries["prefix"].source is ConfigSource.TOPIC_UNCHECKED
        and entries["prefix"].key == "unchecked.rsm.prefix"
    )
    assert entries["bucket"].source is ConfigSource.BROKER and entries["bucket"].value == "broker-bucket"
    assert entries["compression.enabled"].source is ConfigSource.DEFAULT
    assert entries["storage.s3.secret.access.key"].value == "[hidden]"
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in repr(config.describe(lc))
    assert config.resolve(None).chunk_size == 1 << 20
    with pytest.raises(ConfigException, match="unchecked.rsm.chunk.size"):
        config.resolve(LogConfig({"unchecked.rsm.chunk.size": "12"}))
    with pytest.raises(ConfigException, match="unchecked.rsm.encryption.enabled"):
        config.resolve(LogConfig({"unchecked.rsm.encryption.enabled": "maybe"}))
    with pytest.raises(ConfigException, match="unchecked.rsm.bucket"):
        config.resolve(LogConfig({"unchecked.rsm.bucket": "a/b"}))
    with pytest.raises(ConfigException, match="storage.file.root"):
        RsmConfig({"storage.backend": "file"})
    policy_entry = {
        e.name: e for e in config.describe(LogConfig({"unchecked.record.validation.policy": "p"}))
    }
    assert policy_entry["record.validation.policy"].source is ConfigSource.TOPIC_UNCHECKED


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


def test_byte_lru_is_bounded_by_bytes() -> None:
    cache: ByteLRU[bytes] = ByteLRU(100)
    for i in range(10):
        cache.put(i, bytes(30))
    assert cache.bytes <= 100 and len(cache) == 3 and cache.get(9) is not None and cache.get(0) is None
    cache.get(7)
    cache.put("x", bytes(30))
    assert cache.get(7) is not None and cache.get(8) is None
    cache.put("huge", bytes(101))
    assert cache.get("huge") is None and cache.bytes <= 100


def test_identity_memo_finds_the_same_object_only_and_is_bounded() -> None:
    memo: IdentityMemo[list[int], str] = IdentityMemo(2)
    a, b = [1], [1]
    memo.put(a, "a")
    assert memo.get(a) == "a" and memo.get(b) is None  # equal but another object: not found
    memo.put(b, "b")
    c = [1]
    memo.put(c, "c")  # full: cleared first, so only c is left
    assert len(memo) == 1 and memo.get(c) == "c" and memo.get(a) is None
    memo.clear()
    assert memo.get(c) is None


def _real_logs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.log") if p.stat().st_size > 0)


def _leader_epochs(raw: bytes) -> dict[int, int]:
    """A real segment's leader epochs as Kafka's metadata gives them: each epoch's first offset."""
    from segment_format.log_entries import iter_batches

    epochs: dict[int, int] = {}
    for _, batch in iter_batches(raw):
        if batch.magic == 2:
            epochs.setdefault(batch.partition_leader_epoch, batch.base_offset)
    return epochs or {0: 0}


def _last_offset(raw: bytes) -> int:
    """A real segment's last offset, read by segment_format (the copy wants the metadata to end there)."""
    from segment_format.log_entries import iter_batches

    return list(iter_batches(raw))[-1][1].last_offset


@pytest.mark.skipif(not FIXTURES.exists(), reason="shared fixtures not present")
def test_verifier_accepts_real_kafka_segments_and_locates_corruption() -> None:
    logs = _real_logs()
    assert logs
    for path in logs:
        raw = path.read_bytes()
        base, end = int(path.name.split(".")[0]), _last_offset(raw)
        verifier = SegmentIntegrityVerifier(str(path), base, end, len(raw), 4096)
        for i in range(0, len(raw), 1000):  # odd feed sizes: batches and headers span feeds
            verifier.feed(raw[i : i + 1000])
        summary = verifier.finish()
        assert summary.batches > 0 and summary.first_offset is not None and summary.first_offset >= base
        # flip a byte in the last batch's body: refused at that batch's position
        positions, pos = [], 0
        while pos < len(raw):
            positions.append(pos)
            pos += 12 + int.from_bytes(raw[pos + 8 : pos + 12], "big")
        last = positions[-1]
        broken = bytearray(raw)
        broken[-1] ^= 0x01
        verifier = SegmentIntegrityVerifier(str(path), base, end, len(raw), 4096)
        with pytest.raises(SegmentIntegrityError) as info:
            verifier.feed(bytes(broken))
            verifier.finish()
        assert info.value.position == last and "CRC" in info.value.reason, path


def test_verifier_wants_offsets_inside_start_to_end_and_counts_compressed_bytes_per_chunk() -> None:
    """Offsets must lie inside [start, end]; an end past the last batch is a compacted tail (issue 21: Kafka's
    endOffset is the next segment's base - 1) and is accepted; per chunk, the bytes of compressed batches
    are counted."""
    writer = pytest.importorskip("segment_format.writer")
    codecs = pytest.importorskip("segment_format.codecs")
    plain = writer.build_batch([(b"k", b"v" * 300, (), 1)], base_offset=10)
    packed = writer.build_batch(
        [(b"k", b"w" * 300, (), 2)], base_offset=11, compression=codecs.CompressionType.GZIP
    )
    raw = plain + packed
    verifier = SegmentIntegrityVerifier("s.log", 10, 11, len(raw), 256)
    for i in range(0, len(raw), 100):
        verifier.feed(memoryview(raw)[i : i + 100])
    summary = verifier.finish()
    assert (summary.batches, summary.first_offset, summary.last_offset, summary.size) == (2, 10, 11, len(raw))
    expected = [0] * -(-len(raw) // 256)
    for p in range(len(plain), len(raw)):
        expected[p // 256] += 1
    assert summary.compressed_bytes_per_chunk == expected
    assert summary.compressed_batch_bytes == len(packed)
    compacted_tail = SegmentIntegrityVerifier("s.log", 10, 50, len(raw), 256)
    compacted_tail.feed(raw)
    assert compacted_tail.finish().last_offset == 11
    claims_less = SegmentIntegrityVerifier("s.log", 10, 10, len(raw), 256)
    with pytest.raises(SegmentIntegrityError, match="last offset 11 is beyond the expected end offset 10"):
        claims_less.feed(raw)
    early = SegmentIntegrityVerifier("s.log", 11, 50, len(raw), 256)
    with pytest.raises(SegmentIntegrityError, match="outside the segment's range 11..50") as info:
        early.feed(raw)
    assert info.value.position == 0 and info.value.file == "s.log"


@pytest.mark.skipif(not FIXTURES.exists(), reason="shared fixtures not present")
def test_real_snappy_and_gzip_segments_round_trip(tmp_path: Path) -> None:
    """Segments written by real brokers (Java snappy, kafkajs gzip) go through copy and fetch unchanged,
    and their already-compressed batches are not compressed again."""
    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "4096"}
    )
    try:
        for n, path in enumerate(_real_logs()):
            raw = path.read_bytes()
            base = int(path.name.split(".")[0])
            tip = TopicIdPartition(uuid.uuid4(), f"real{n}", 0)
            seg = make_segment(tmp_path / f"s{n}", tip, batches=1)
            seg.data.log_segment.write_bytes(raw)
            offset_index, time_index = build_indexes(raw, base)  # the indexes of this log, not the helper's
            seg.data.offset_index.write_bytes(offset_index)
            seg.data.time_index.write_bytes(time_index)
            md = RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tip, uuid.uuid4()),
                base,
                _last_offset(raw),
                0,
                0,
                0,
                len(raw),
                _leader_epochs(raw),
            )
            # the checkpoint Kafka hands this copy: the log's epochs from its start (this segment's base)
            epochs = sorted(md.segment_leader_epochs.items())
            checkpoint = "0\n" + f"{len(epochs)}\n" + "".join(f"{e} {o}\n" for e, o in epochs)
            data = dataclasses.replace(seg.data, leader_epoch_index=checkpoint.encode())
            md = dataclasses.replace(md, custom_metadata=rsm.copy_log_segment_data(md, data))
            assert read_all(rsm.fetch_log_segment(md, 0)) == raw
            manifest = Manifest.from_bytes(
                next((tmp_path / "store").rglob(f"real{n}-*/0/*.manifest")).read_bytes()
            )
            chunk_bytes = [
                b - a for a, b in (manifest.log.original_span(i) for i in range(manifest.log.count))
            ]
            if manifest.integrity["compressed_batch_bytes"] == len(raw):
                assert all(int(c) == 0 for c in manifest.log.codecs), path  # stored as they are
            assert sum(chunk_bytes) == len(raw)
    finally:
        rsm.close()


def test_ranged_fetch_downloads_only_covering_chunks(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    keyring = write_keyring(tmp_path / "k.json")
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "chunk.size": "8192",
            "encryption.keyring.path": str(keyring),
            "encryption.enabled": "true",
            "encryption.key.id": "k1",
            "fetch.prefetch.chunks": "2",
        }
    )
    tip = TopicIdPartition(uuid.uuid4(), "ranges", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=120, value_size=200)
    raw = seg.data.log_segment.read_bytes()
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        manifest = Manifest.from_bytes(next((tmp_path / "store").rglob("*.manifest")).read_bytes())
        index = manifest.log
        assert index.count >= 6
        rsm.fetch_log_segment(md, 0, 0).close()  # warm the manifest cache
        for start, end in [(8192 * 2 + 5, 8192 * 3 + 100), (100, 200), (8192 * 4 - 1, 8192 * 4)]:
            rsm._state.chunks.clear()
            before = rsm.store.stats.snapshot()["bytes_read"]
            assert read_all(rsm.fetch_log_segment(md, start, end)) == raw[start : end + 1]
            downloaded = rsm.store.stats.snapshot()["bytes_read"] - before
            first, last = start // 8192, end // 8192
            assert downloaded == sum(index.stored_sizes[first : last + 1]), (start, end)
        # closing a stream early stops downloading: only the first chunk (and its prefetch) is read
        rsm._state.chunks.clear()
        before = rsm.store.stats.snapshot()["bytes_read"]
        stream = rsm.fetch_log_segment(md, 0)
        assert stream.read(10) == raw[:10]
        stream.close()
        rsm._state.executor.shutdown(wait=True)  # type: ignore[union-attr]  # let in-flight prefetches finish
        downloaded = rsm.store.stats.snapshot()["bytes_read"] - before
        assert downloaded <= sum(index.stored_sizes[:3]) < index.stored_size
    finally:
        rsm.close()


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


def test_unconfigured_and_closed_manager_refuse_work(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    tip = TopicIdPartition(uuid.uuid4(), "x", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=1)
    with pytest.raises(RemoteStorageException, match="not configured"):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    rsm.close()
    with pytest.raises(RemoteStorageException, match="closed"):
        rsm.fetch_log_segment(seg.metadata, 0)
    rsm2 = RemoteStorageManager()
    with pytest.raises(ConfigException, match="encryption.keyring.path"):
        rsm2.configure(
            {"storage.backend": "file", "storage.file.root": str(tmp_path), "encryption.enabled": "true"}
        )


def test_chunks_of_compressed_batches_are_not_compressed_again(tmp_path: Path) -> None:
    from kafka_segments import GZIP

    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "4096"}
    )
    try:
        for name, codec, expect in (("gz", GZIP, {0}), ("raw", 0, {1})):
            tip = TopicIdPartition(uuid.uuid4(), name, 0)
            seg = make_segment(
                tmp_path / name, tip, batches=40, records_per_batch=20, value_size=300, compression=codec
            )
            rsm.copy_log_segment_data(seg.metadata, seg.data)
            manifest = Manifest.from_bytes(
                next((tmp_path / "store").rglob(f"{name}-*/0/*.manifest")).read_bytes()
            )
            # the last chunk may be a short tail; every full chunk follows the rule
            assert {int(c) for c in manifest.log.codecs[:-1]} == expect, name
    finally:
        rsm.close()


@pytest.mark.skipif(not FIXTURES.exists(), reason="shared fixtures not present")
def test_verifier_agrees_with_segment_format_on_batch_boundaries() -> None:
    log_entries = pytest.importorskip("segment_format.log_entries")
    for path in _real_logs():
        raw = path.read_bytes()
        batches = list(log_entries.iter_batches(raw, file=str(path)))
        verifier = SegmentIntegrityVerifier(str(path), 0, batches[-1][1].last_offset, len(raw), 1 << 20)
        verifier.feed(raw)
        summary = verifier.finish()
        assert summary.batches == len(batches), path
        assert summary.last_offset == batches[-1][1].last_offset, path


def test_segments_from_the_segment_format_writer_with_every_codec_round_trip(tmp_path: Path) -> None:
    """Kafka-identical segments (every codec, real indexes) from segment_format's writer go through
    copy, fetch and fetch_index unchanged."""
    writer_mod = pytest.importorskip("segment_format.writer")
    codecs = pytest.importorskip("segment_format.codecs")
    from rsm import IndexType, LogSegmentData

    directory = tmp_path / "part"
    offset = 500
    with writer_mod.SegmentWriter(directory, offset, index_interval_bytes=512) as w:
        for codec in [0, 1, 2, 3, 4] * 6:
            records = [(f"k{offset + j}".encode(), f"v{offset + j}-".encode() * 30, [("h", b"1")], 1_700_000_000_000 + offset + j)
                       for j in range(8)]  # fmt: skip
            w.append(
                writer_mod.build_batch(records, base_offset=offset, compression=codecs.CompressionType(codec))
            )
            offset += 8
    log_path = directory / "00000000000000000500.log"
    snapshot = directory / "00000000000000000740.snapshot"
    snapshot.write_bytes(b"\x00\x01" + bytes(8))
    tip = TopicIdPartition(uuid.uuid4(), "codecs", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), 500, offset - 1, 0, 0, 0,
                                  log_path.stat().st_size, {0: 500})  # fmt: skip
    data = LogSegmentData(log_path, directory / "00000000000000000500.index", directory / "00000000000000000500.timeindex",
                          None, snapshot, b"0\n1\n0 500\n")  # fmt: skip
    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "4096"}
    )
    try:
        md = dataclasses.replace(md, custom_metadata=rsm.copy_log_segment_data(md, data))
        raw = log_path.read_bytes()
        assert read_all(rsm.fetch_log_segment(md, 0)) == raw
        assert read_all(rsm.fetch_log_segment(md, 1000, 7000)) == raw[1000:7001]
        assert data.offset_index.stat().st_size > 0
        assert read_all(rsm.fetch_index(md, IndexType.OFFSET)) == data.offset_index.read_bytes()
        assert read_all(rsm.fetch_index(md, IndexType.TIMESTAMP)) == data.time_index.read_bytes()
    finally:
        rsm.close()


def _copied(rsm: RemoteStorageManager, tmp_path: Path, topic: str) -> tuple[RemoteLogSegmentMetadata, bytes]:
    seg = make_segment(tmp_path / topic, TopicIdPartition(uuid.uuid4(), topic, 0), batches=40, value_size=300)
    md = dataclasses.replace(seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data))
    return md, seg.data.log_segment.read_bytes()


def test_a_plain_segment_reader_is_reused_and_decodes_with_the_allocator_set_last(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192",
         "compression.enabled": "false", "cache.chunk.bytes": "0", "fetch.prefetch.chunks": "0"}
    )  # fmt: skip
    try:
        md, raw = _copied(rsm, tmp_path, "memo")
        first, keys = reader_of(rsm._state, md, None)
        again, keys_again = reader_of(rsm._state, md, None)
        assert again is first and keys_again is keys  # opened once per segment
        assert (
            reader_of(rsm._state, dataclasses.replace(md), None)[1] == keys
        )  # an equal metadata object: same keys
        blocks: list[int] = []

        def allocate(size: int) -> bytearray:
            blocks.append(size)
            return bytearray(size)

        rsm.set_chunk_allocator(allocate)
        assert (
            reader_of(rsm._state, md, None)[0] is not first
        )  # made again: it decodes with the new allocator
        assert read_all(rsm.fetch_log_segment(md, 100, 9000)) == raw[100:9001]
        assert blocks == [8192, 8192]  # both chunks of the range went to the allocator set last
    finally:
        rsm.close()


def test_an_encrypted_segment_stops_decrypting_when_its_key_leaves_the_keyring(tmp_path: Path) -> None:
    keyring = write_keyring(tmp_path / "k.json", ("k1", "k2"))
    rsm = RemoteStorageManager()
    rsm.configure(
        {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "encryption.enabled": "true",
         "encryption.keyring.path": str(keyring), "encryption.key.id": "k1", "cache.chunk.bytes": "0"}
    )  # fmt: skip
    try:
        md, raw = _copied(rsm, tmp_path, "enc-memo")
        assert read_all(rsm.fetch_log_segment(md, 0)) == raw
        keys = json.loads(keyring.read_text())
        del keys["k1"]
        keyring.write_text(json.dumps(keys))
        os.utime(keyring, (time.time() + 5, time.time() + 5))  # a new mtime even on a coarse clock
        with pytest.raises(RemoteStorageException, match="'k1' is not in the keyring"):
            rsm.fetch_log_segment(md, 0)
    finally:
        rsm.close()
