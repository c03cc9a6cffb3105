"""Segments the segment_format writer makes in every codec come back from the store byte for byte, and
chunks of compressed batches are not compressed again."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from kafka_segments import make_segment, read_all

from rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.stored.manifest import Manifest


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
