"""The RSM on segments real Kafka brokers wrote: the copy's integrity verifier accepts them and locates
corruption, wants offsets inside [start, end] (an end past the last batch is a compacted tail) and counts
compressed bytes per chunk, agrees with segment_format on batch boundaries; and real snappy and gzip
segments come back from the store byte for byte."""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path

import pytest
from fixtures_data import SEGMENTS, fixture_path
from kafka_segments import make_segment, read_all

from rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import SegmentIntegrityError
from rsm.copy.integrity import SegmentIntegrityVerifier
from rsm.stored.manifest import Manifest
from segment_format.indexes import build_indexes

FIXTURES = fixture_path("public", "segments") if SEGMENTS.exists() or os.environ.get("CI") else SEGMENTS


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
    """Offsets must lie inside [start, end]; an end past the last batch is a compacted tail (Kafka's
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
