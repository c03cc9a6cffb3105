"""The columnar decoder against segments Kafka's own classes wrote (the ``java_oracle`` fixture).

Kafka 4.4.0 writes segments with each codec (transactional batches and COMMIT/ABORT markers included)
and legacy magic 0/1 message sets; both the C fast path and the reference must return exactly the
records Kafka says it wrote (``expected.json``), and the same table.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from segment_format.columnar import decode_batches, decode_reference

pytestmark = pytest.mark.oracle

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _rows(table: Any) -> list[dict[str, Any]]:
    return [
        {
            "offset": r["offset"],
            "timestamp": r["timestamp"],
            "key": _b64(r["key"]),
            "value": _b64(r["value"]),
            "headers": [{"key": h["key"], "value": _b64(h["value"])} for h in r["headers"]],
            "isControl": r["is_control"],
            "isTransactional": r["is_transactional"],
        }
        for r in table.to_pylist()
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_written_segment(codec: str, java_oracle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = java_oracle.write_segment(tmp_path, codec, records=600, transactional=True, seed=11)
    expected = java_oracle.expected(log.parent)
    data = log.read_bytes()
    fast = decode_batches(data, file=str(log))
    ref = decode_reference(data, file=str(log))
    assert fast.equals(ref)
    keys = ["offset", "timestamp", "key", "value", "headers", "isControl", "isTransactional"]
    assert _rows(fast) == [{k: r[k] for k in keys} for r in expected["records"]]
    assert any(fast.column("is_control").to_pylist())
    # batch fields per row agree with Kafka's batch dump
    by_base = {b["baseOffset"]: b for b in expected["batches"]}
    for row in fast.select(
        ["batch_base_offset", "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch"]
    ).to_pylist():
        batch = by_base[row["batch_base_offset"]]
        assert (row["producer_id"], row["producer_epoch"], row["base_sequence"]) == (
            batch["producerId"],
            batch["producerEpoch"],
            batch["baseSequence"],
        )
        assert row["partition_leader_epoch"] == batch["partitionLeaderEpoch"]


@pytest.mark.parametrize(("magic", "codec"), [(0, "none"), (0, "gzip"), (1, "snappy"), (1, "lz4")])
def test_kafka_written_legacy_segment(magic: int, codec: str, java_oracle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = java_oracle.write_segment(tmp_path, codec, records=120, magic=magic, seed=3)
    expected = java_oracle.expected(log.parent)
    data = log.read_bytes()
    fast = decode_batches(data, file=str(log))
    assert fast.equals(decode_reference(data, file=str(log)))
    assert fast.column("offset").to_pylist() == [r["offset"] for r in expected["records"]]
    assert [_b64(v) for v in fast.column("value").to_pylist()] == [r["value"] for r in expected["records"]]
