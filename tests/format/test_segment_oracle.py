"""Differential tests against Kafka's own Java classes (the ``java_oracle`` fixture).

Kafka writes segments with each codec (transactional batches, COMMIT/ABORT markers included) and we
must read exactly what it wrote and rebuild its indexes; we write segments and Kafka must accept them and
read back the same content; ``rsm dump-log --json`` must agree with Kafka's dump on every batch field.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from harness.oracle import OracleError

from rsm.cli.main import main as rsm_main
from segment_format import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    LeaderEpochCheckpoint,
    LogSegment,
    ProducerSnapshot,
    SegmentWriter,
    TimestampType,
    TransactionIndex,
    build_batch,
    build_control_batch,
    build_indexes,
    iter_batches,
)

pytestmark = pytest.mark.oracle

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BATCH_FIELDS = [
    "baseOffset", "lastOffset", "count", "position", "size", "magic", "compressCodec", "crc", "isValid",
    "timestampType", "maxTimestamp", "producerId", "producerEpoch", "baseSequence", "lastSequence",
    "partitionLeaderEpoch", "isTransactional", "isControl", "deleteHorizonMs",
]  # fmt: skip
RECORD_FIELDS = ["offset", "timestamp", "sequence", "sizeInBytes", "key", "value", "headers", "controlType",
                 "coordinatorEpoch"]  # fmt: skip


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def our_records(log: Path) -> list[dict[str, Any]]:
    out = []
    for batch in LogSegment(log).batches():
        for r in batch.records():
            d = {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": b64(r.key),
                "value": b64(r.value),
                "headers": [{"key": h.key, "value": b64(h.value)} for h in r.headers],
                "isControl": batch.is_control_batch,
                "isTransactional": batch.is_transactional,
            }
            if batch.is_control_batch:
                d["controlType"] = ControlRecordType.parse(r.key).name
            out.append(d)
    return out


def dump_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert rsm_main(["dump-log", "--json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture(scope="module", params=CODECS)
def kafka_segment(request: pytest.FixtureRequest, java_oracle, tmp_path_factory) -> tuple[str, Path]:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp(f"kafka-{request.param}")
    log = java_oracle.write_segment(out, request.param, records=400, transactional=True, seed=7)
    return request.param, log


def test_kafka_written_segment_parses_to_what_kafka_wrote(kafka_segment, java_oracle) -> None:  # type: ignore[no-untyped-def]
    codec, log = kafka_segment
    expected = java_oracle.expected(log.parent)
    summary = LogSegment(log).verify(deep=True)
    assert summary.has_transactional and summary.has_control
    assert CompressionType.from_name(codec) in summary.compression_types
    ours = our_records(log)
    keys = ["offset", "timestamp", "key", "value", "headers", "isControl", "isTransactional"]
    assert [{k: r[k] for k in keys} for r in ours] == [{k: r[k] for k in keys} for r in expected["records"]]
    exp_ctl = [r.get("controlType") for r in expected["records"]]
    assert [r.get("controlType") for r in ours] == exp_ctl
    assert {"COMMIT", "ABORT"} <= set(filter(None, exp_ctl))
    batches = list(LogSegment(log).batches())
    assert len(batches) == len(expected["batches"])
    for b, e in zip(batches, expected["batches"], strict=True):
        assert (b.base_offset, b.last_offset, b.record_count, b.magic) == (
            e["baseOffset"],
            e["lastOffset"],
            e["count"],
            2,
        )
        assert b.compression_type.kafka_name == e["compressCodec"]
        assert (b.producer_id, b.producer_epoch, b.base_sequence) == (
            e["producerId"],
            e["producerEpoch"],
            e["baseSequence"],
        )
        assert (b.is_transactional, b.is_control_batch) == (e["isTransactional"], e["isControl"])
        assert (b.partition_leader_epoch, b.max_timestamp) == (e["partitionLeaderEpoch"], e["maxTimestamp"])
        if e["isControl"] and e.get("coordinatorEpoch") is not None:
            marker = EndTransactionMarker.from_record(b.records()[0])
            assert (marker.control_type.name, marker.coordinator_epoch) == (
                e["controlType"],
                e["coordinatorEpoch"],
            )


def test_indexes_and_companions_match_kafka(kafka_segment, java_oracle) -> None:  # type: ignore[no-untyped-def]
    _, log = kafka_segment
    offset_index, time_index = build_indexes(log, index_interval_bytes=4096)
    assert offset_index == log.with_suffix(".index").read_bytes()
    assert time_index == log.with_suffix(".timeindex").read_bytes()
    assert len(offset_index) > 0
    txn = TransactionIndex.read(log.with_suffix(".txnindex"))
    assert [
        {"producerId": t.producer_id, "firstOffset": t.first_offset, "lastOffset": t.last_offset,
         "lastStableOffset": t.last_stable_offset}
        for t in txn
    ] == java_oracle.dump(log.with_suffix(".txnindex"))  # fmt: skip
    (snapshot,) = log.parent.glob("*.snapshot")
    ours = [
        {"producerId": e.producer_id, "producerEpoch": e.producer_epoch, "coordinatorEpoch": e.coordinator_epoch,
         "lastTimestamp": e.timestamp, "currentTxnFirstOffset": e.current_txn_first_offset,
         "lastSequence": e.last_sequence, "lastOffset": e.last_offset, "offsetDelta": e.offset_delta}
        for e in ProducerSnapshot.read(snapshot)
    ]  # fmt: skip
    theirs = java_oracle.dump(snapshot)
    assert ours == [{k: t[k] for k in ours[0]} for t in theirs]
    epochs = LeaderEpochCheckpoint.read(log.parent / "leader-epoch-checkpoint")
    assert [{"epoch": e.epoch, "startOffset": e.start_offset} for e in epochs] == java_oracle.dump(
        log.parent / "leader-epoch-checkpoint"
    )


def test_segment_writer_reproduces_kafka_files_byte_for_byte(kafka_segment, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, log = kafka_segment
    with SegmentWriter(tmp_path, 0) as w:
        for _, batch in iter_batches(log.read_bytes()):
            w.append(batch.data)
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        assert (tmp_path / log.with_suffix(suffix).name).read_bytes() == log.with_suffix(
            suffix
        ).read_bytes(), suffix


def test_dump_log_json_agrees_with_kafka_dump(kafka_segment, java_oracle, capsys) -> None:  # type: ignore[no-untyped-def]
    _, log = kafka_segment
    ours = dump_json(capsys, "--print-data-log", str(log))
    theirs = java_oracle.dump(log)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs, strict=True):
        assert {k: o[k] for k in BATCH_FIELDS} == {k: t[k] for k in BATCH_FIELDS}
        assert [{k: r.get(k) for k in RECORD_FIELDS} for r in o["records"]] == [
            {k: r.get(k) for k in RECORD_FIELDS} for r in t["records"]
        ]
    for suffix in (".index", ".timeindex", ".txnindex"):
        path = log.with_suffix(suffix)
        assert [
            {k: v for k, v in d.items() if k != "file"} for d in dump_json(capsys, str(path))
        ] == java_oracle.dump(path)


@pytest.mark.parametrize("codec", CODECS)
def test_our_segments_are_accepted_and_read_back_by_kafka(
    codec: str, java_oracle, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    compression = CompressionType.from_name(codec)
    offset = 0
    with SegmentWriter(tmp_path, 0, index_interval_bytes=1024) as w:
        for i in range(30):
            recs = [
                (None if j % 3 == 0 else f"k{i}-{j}".encode(), (f"value {i} {j} " * (1 + j)).encode(),
                 [("h", f"{i}".encode()), ("n", None)] if j % 2 else [], 1_700_000_000_000 + i * 10 + j)
                for j in range(1 + i % 5)
            ]  # fmt: skip
            txn = i % 4 == 1
            pid = 1000 + (i % 4) if txn else 77
            w.append(build_batch(recs, base_offset=offset, compression=compression, producer_id=pid,
                                 producer_epoch=0, base_sequence=offset, is_transactional=txn,
                                 partition_leader_epoch=2))  # fmt: skip
            offset += len(recs)
            if txn:
                kind = ControlRecordType.ABORT if i % 8 == 1 else ControlRecordType.COMMIT
                w.append(build_control_batch(kind, base_offset=offset, producer_id=pid, producer_epoch=0,
                                             coordinator_epoch=3, timestamp=1_700_000_000_000 + i * 10,
                                             partition_leader_epoch=2))  # fmt: skip
                offset += 1
    log = w.log_path
    checked = java_oracle.check(log)
    assert checked["lastOffset"] == offset - 1 and checked["sizeInBytes"] == log.stat().st_size
    ours = dump_json(capsys, "--print-data-log", str(log))
    theirs = java_oracle.dump(log)
    for o, t in zip(ours, theirs, strict=True):
        assert t["isValid"]
        assert {k: o[k] for k in BATCH_FIELDS} == {k: t[k] for k in BATCH_FIELDS}
        assert [{k: r.get(k) for k in RECORD_FIELDS} for r in o["records"]] == [
            {k: r.get(k) for k in RECORD_FIELDS} for r in t["records"]
        ]
    assert java_oracle.dump(w.index_path) == [
        {k: v for k, v in d.items() if k != "file"} for d in dump_json(capsys, str(w.index_path))
    ]
    assert len(java_oracle.dump(w.index_path)) > 2
    assert java_oracle.dump(w.time_index_path) == [
        {k: v for k, v in d.items() if k != "file"} for d in dump_json(capsys, str(w.time_index_path))
    ]
    assert java_oracle.dump(w.txn_index_path) == [
        {k: v for k, v in d.items() if k != "file"} for d in dump_json(capsys, str(w.txn_index_path))
    ]


@pytest.mark.parametrize(
    ("magic", "codec"), [(0, "none"), (0, "gzip"), (0, "lz4"), (1, "snappy"), (1, "lz4"), (1, "gzip")]
)
def test_legacy_segments_written_by_kafka(
    magic: int, codec: str, java_oracle, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    log = java_oracle.write_segment(
        tmp_path, codec, records=200, magic=magic, seed=3, index_interval_bytes=1024
    )
    expected = java_oracle.expected(tmp_path)
    ours = our_records(log)
    assert [(r["offset"], r["key"], r["value"]) for r in ours] == [
        (r["offset"], r["key"], r["value"]) for r in expected["records"]
    ]
    if magic == 1:
        assert [r["timestamp"] for r in ours] == [r["timestamp"] for r in expected["records"]]
    LogSegment(log).verify(deep=True)
    fields = [f for f in BATCH_FIELDS if f != "count"]  # Kafka does not count legacy batches (countOrNull)
    for o, t in zip(dump_json(capsys, str(log)), java_oracle.dump(log), strict=True):
        assert {k: o[k] for k in fields} == {k: t[k] for k in fields}
    offset_index, time_index = build_indexes(log, index_interval_bytes=1024)
    assert offset_index == log.with_suffix(".index").read_bytes() and len(offset_index) > 0
    assert time_index == log.with_suffix(".timeindex").read_bytes()


@pytest.mark.parametrize("magic", [0, 1])
def test_our_legacy_batches_are_accepted_by_kafka(magic: int, java_oracle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = b""
    offset = 0
    codecs = [CompressionType.GZIP, CompressionType.NONE, CompressionType.LZ4, CompressionType.SNAPPY]
    for i, codec in enumerate(codecs):
        recs = [(f"k{i}{j}".encode(), b"v" * (10 + j), [], 1000 + j) for j in range(4)]
        data += build_batch(recs, base_offset=offset, magic=magic, compression=codec)
        offset += 4
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(data)
    checked = java_oracle.check(log)
    assert checked["records"] == 16 and checked["lastOffset"] == 15
    dumped = java_oracle.dump(log)
    assert {b["magic"] for b in dumped} == {magic}
    theirs = [r for b in dumped for r in b["records"]]
    assert [(r["offset"], r["key"], r["value"]) for r in theirs] == [
        (r["offset"], r["key"], r["value"]) for r in our_records(log)
    ]
    if magic == 1:
        assert [r["timestamp"] for r in theirs] == [r["timestamp"] for r in our_records(log)]


def test_kafka_and_we_both_refuse_a_corrupted_segment(java_oracle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = java_oracle.write_segment(tmp_path, "none", records=50)
    batches = list(LogSegment(log).batches())
    data = bytearray(log.read_bytes())
    data[batches[3].position + 80] ^= 0x10
    log.write_bytes(bytes(data))
    with pytest.raises(OracleError):
        java_oracle.check(log)
    with pytest.raises(Exception) as info:
        LogSegment(log).verify()
    assert f"byte {batches[3].position}" in str(info.value)
    assert info.value.__class__.__name__ == "CorruptRecordError"
    assert rsm_main(["dump-log", "--verify", str(log)]) == 1


def test_log_append_time_batches_read_by_kafka(java_oracle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with SegmentWriter(tmp_path, 0) as w:
        w.append(build_batch([(b"k", b"v", [], 5), (b"k2", b"v2", [], 6)], base_offset=0,
                             timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=99_000))  # fmt: skip
    (t,) = java_oracle.dump(w.log_path)
    assert t["timestampType"] == "LogAppendTime" and t["maxTimestamp"] == 99_000
    assert [r["timestamp"] for r in t["records"]] == [99_000, 99_000]
