"""Helpers for the rsm tests: real Kafka segments written by an independent writer (kafka-python).

kafka-python's `DefaultRecordBatchBuilder` writes magic-2 batches exactly as the Java client does (CRC-32C,
varints, gzip), so segments made here are genuine input for the RSM. The offset and time indexes are the ones Kafka
would write for them (`segment_format.indexes`: the copy checks them against the batches); the other
companion files are arbitrary bytes, stored and returned without parsing.
"""

from __future__ import annotations

import json
import os
import random
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from rsm import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from rsm.config.keyring import generate_key
from segment_format.indexes import build_indexes

GZIP = 1


def build_batch(base_offset: int, count: int, *, rng: random.Random, compression: int = 0, value_size: int = 100,
                timestamp: int = 1_700_000_000_000, compressible: bool = True) -> bytes:  # fmt: skip
    builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, 1 << 30)
    for i in range(count):
        if compressible:
            value = (f"value-{base_offset + i}-" * (value_size // 8 + 1)).encode()[:value_size]
        else:
            value = rng.randbytes(value_size)
        builder.append(i, timestamp + base_offset + i, f"key-{base_offset + i}".encode(), value,
                       [("h", b"x")] if i % 2 == 0 else [])  # fmt: skip
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)  # base offset is not covered by the CRC
    return bytes(raw)


def build_segment(
    path: Path,
    *,
    base_offset: int = 0,
    batches: int = 20,
    records_per_batch: int = 10,
    seed: int = 0,
    compression: int = 0,
    value_size: int = 100,
    compressible: bool = True,
) -> tuple[int, int]:
    """Write a segment; returns (last offset, size in bytes)."""
    rng = random.Random(seed)
    offset = base_offset
    with path.open("wb") as f:
        for _ in range(batches):
            n = rng.randint(1, records_per_batch)
            f.write(build_batch(offset, n, rng=rng, compression=compression, value_size=value_size,
                                compressible=compressible))  # fmt: skip
            offset += n
    return offset - 1, path.stat().st_size


@dataclass
class Segment:
    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    dir: Path

    def files(self) -> dict[str, bytes]:
        d = self.data
        out = {
            "OFFSET": d.offset_index.read_bytes(),
            "TIMESTAMP": d.time_index.read_bytes(),
            "PRODUCER_SNAPSHOT": d.producer_snapshot_index.read_bytes(),
            "LEADER_EPOCH": d.leader_epoch_index,
        }
        if d.transaction_index is not None:
            out["TRANSACTION"] = d.transaction_index.read_bytes()
        return out


def make_segment(
    directory: Path,
    tip: TopicIdPartition,
    *,
    base_offset: int = 0,
    with_txn: bool = True,
    segment_id: uuid.UUID | None = None,
    **kwargs: object,
) -> Segment:
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{base_offset:020d}"
    log = directory / f"{stem}.log"
    last, size = build_segment(log, base_offset=base_offset, **kwargs)  # type: ignore[arg-type]
    offset_index, time_index = build_indexes(log, base_offset, index_interval_bytes=1024)
    (directory / f"{stem}.index").write_bytes(offset_index)
    (directory / f"{stem}.timeindex").write_bytes(time_index)
    (directory / f"{stem}.snapshot").write_bytes(os.urandom(10 + 46 * 2))
    txn = None
    if with_txn:
        txn = directory / f"{stem}.txnindex"
        txn.write_bytes(os.urandom(34 * 3))
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, segment_id or uuid.uuid4()),
        start_offset=base_offset,
        end_offset=last,
        max_timestamp_ms=1_700_000_000_000 + last,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=size,
        segment_leader_epochs={0: base_offset},
    )
    data = LogSegmentData(log, directory / f"{stem}.index", directory / f"{stem}.timeindex", txn,
                          directory / f"{stem}.snapshot", f"0\n1\n0 {base_offset}\n".encode())  # fmt: skip
    return Segment(metadata, data, directory)


def write_keyring(path: Path, ids: tuple[str, ...] = ("k1", "k2")) -> Path:
    path.write_text(json.dumps({i: generate_key() for i in ids}))
    return path


def read_all(stream: object) -> bytes:
    try:
        return stream.read()  # type: ignore[attr-defined]
    finally:
        stream.close()  # type: ignore[attr-defined]
