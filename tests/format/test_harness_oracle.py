"""The Java oracle writes genuine Kafka segments and reads them back with Kafka's classes.

Checked here: the dump agrees with what was handed to Kafka (expected.json), and the raw bytes agree
with small independent facts of Kafka's documented format (header layout, codec bits, CRC-32C, index
rules). The segment_format package's own differential tests live elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import time
from pathlib import Path

import crc32c
import pytest
from harness.maven import JavaBuild
from harness.oracle import Codec, JavaOracle, OracleError

pytestmark = pytest.mark.oracle

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_MAGIC_BYTES = {
    "gzip": b"\x1f\x8b",
    "snappy": b"\x82SNAPPY\x00",  # xerial framing from the Java client
    "lz4": struct.pack("<I", 0x184D2204),
    "zstd": b"\x28\xb5\x2f\xfd",
}


def _records_from_dump(batches: list[dict]) -> list[dict]:
    return [rec for batch in batches for rec in batch["records"]]


def _assert_dump_matches_expected(batches: list[dict], expected: dict) -> None:
    assert [(b["baseOffset"], b["lastOffset"]) for b in batches] == [
        (b["baseOffset"], b["lastOffset"]) for b in expected["batches"]
    ]
    for got, want in zip(batches, expected["batches"], strict=True):
        assert got["isValid"], got
        for key in ("magic", "compressCodec", "producerId", "producerEpoch", "isTransactional", "isControl"):
            assert got[key] == want[key], (key, got["baseOffset"])
        if want["magic"] == 2:
            for key in ("count", "baseSequence", "partitionLeaderEpoch", "maxTimestamp"):
                assert got[key] == want[key], (key, got["baseOffset"])
    records = _records_from_dump(batches)
    assert len(records) == len(expected["records"])
    for got, want in zip(records, expected["records"], strict=True):
        assert (got["offset"], got["timestamp"], got["key"], got["value"]) == (
            want["offset"],
            want["timestamp"],
            want["key"],
            want["value"],
        ), got["offset"]
        assert got["headers"] == want["headers"], got["offset"]
        assert got.get("controlType") == want.get("controlType"), got["offset"]


@pytest.mark.parametrize("codec", [c.value for c in Codec])
def test_segment_per_codec_round_trips(java_oracle: JavaOracle, tmp_path: Path, codec: str) -> None:
    log = java_oracle.write_segment(tmp_path, codec, records=300, value_size=120, seed=7)
    assert log == tmp_path / "00000000000000000000.log"
    expected = java_oracle.expected(tmp_path)
    assert len(expected["records"]) == 300
    assert expected["records"][0]["offset"] == 0 and expected["records"][-1]["offset"] == 299

    batches = java_oracle.dump(log)
    _assert_dump_matches_expected(batches, expected)
    assert {b["compressCodec"] for b in batches} == {codec}
    assert java_oracle.check(log) == {
        "batches": len(batches),
        "records": 300,
        "firstOffset": 0,
        "lastOffset": 299,
        "sizeInBytes": log.stat().st_size,
        "magics": [2],
        "codecs": [codec],
    }

    # Independent facts from Kafka's documented format about the first batch's raw header.
    raw = log.read_bytes()
    base_offset, batch_length, leader_epoch, magic, crc, attributes = struct.unpack_from(">qiibIh", raw, 0)
    assert (base_offset, magic) == (0, 2)
    assert raw[16] == 2
    assert batch_length + 12 == batches[0]["size"]
    assert leader_epoch == batches[0]["partitionLeaderEpoch"] == 0
    assert attributes & 0x07 == CODEC_IDS[codec]
    assert crc == crc32c.crc32c(raw[21 : 12 + batch_length]) == batches[0]["crc"]
    (last_offset_delta,) = struct.unpack_from(">i", raw, 23)
    (record_count,) = struct.unpack_from(">i", raw, 57)
    assert (last_offset_delta + 1, record_count) == (batches[0]["count"], batches[0]["count"])
    if codec != "none":
        prefix = CODEC_MAGIC_BYTES[codec]
        assert raw[61 : 61 + len(prefix)] == prefix


def test_indexes_follow_kafkas_building_rule(java_oracle: JavaOracle, tmp_path: Path) -> None:
    log = java_oracle.write_segment(tmp_path, "none", records=600, value_size=100, index_interval_bytes=2048)
    index_path, time_index_path = (
        tmp_path / "00000000000000000000.index",
        tmp_path / "00000000000000000000.timeindex",
    )
    dumps = java_oracle.dump_many([log, index_path, time_index_path])
    assert list(dumps) == [log, index_path, time_index_path]
    batches, offset_index, time_index = dumps[log], dumps[index_path], dumps[time_index_path]
    assert batches == java_oracle.dump(log)
    by_position = {b["position"]: b for b in batches}
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 8 * len(offset_index) > 0

    # Every offset entry maps the last offset of a batch to the position where that batch starts, and
    # entries are at least index.interval.bytes apart.
    positions = [e["position"] for e in offset_index]
    for entry in offset_index:
        assert by_position[entry["position"]]["lastOffset"] == entry["offset"]
    assert all(b - a >= 2048 for a, b in zip(positions, positions[1:], strict=False))

    # Time index: strictly increasing timestamps; the final entry (written on roll) is the segment's max.
    timestamps = [e["timestamp"] for e in time_index]
    assert timestamps == sorted(set(timestamps))
    max_ts = max(b["maxTimestamp"] for b in batches)
    assert time_index[-1]["timestamp"] == max_ts
    owner = next(b for b in batches if b["maxTimestamp"] == max_ts)
    assert any(r["offset"] == time_index[-1]["offset"] for r in owner["records"])


def test_transactional_segment(java_oracle: JavaOracle, tmp_path: Path) -> None:
    log = java_oracle.write_segment(tmp_path, "lz4", records=400, transactional=True, seed=3)
    expected = java_oracle.expected(tmp_path)
    batches = java_oracle.dump(log)
    _assert_dump_matches_expected(batches, expected)

    markers = [b for b in batches if b["isControl"]]
    types = {b["records"][0]["controlType"] for b in markers}
    assert types == {"COMMIT", "ABORT"}
    assert all(b["isTransactional"] and b["count"] == 1 and b["compressCodec"] == "none" for b in markers)
    assert all(b["records"][0]["coordinatorEpoch"] == 7 for b in markers)
    assert any(not b["isTransactional"] for b in batches), "non-transactional batches are mixed in"
    assert len({b["producerId"] for b in batches if b["isTransactional"]}) >= 2

    # .txnindex holds one entry per aborted transaction: [first data offset, abort marker offset].
    aborted = java_oracle.dump(tmp_path / "00000000000000000000.txnindex")
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == 34 * len(aborted)
    abort_markers = [
        (b["producerId"], b["baseOffset"]) for b in markers if b["records"][0]["controlType"] == "ABORT"
    ]
    assert [(t["producerId"], t["lastOffset"]) for t in aborted] == abort_markers
    aborted_offsets = {r["offset"] for r in expected["records"] if r["aborted"]}
    for txn in aborted:
        first = min(o for o in aborted_offsets if o >= txn["firstOffset"])
        assert first == txn["firstOffset"]
        # LSO after completion: another open transaction's first offset, else just past the marker.
        assert 0 <= txn["lastStableOffset"] <= txn["lastOffset"] + 1

    # Producer snapshot at the next offset, with every producer id that wrote.
    next_offset = batches[-1]["lastOffset"] + 1
    snapshot = java_oracle.dump(tmp_path / f"{next_offset:020d}.snapshot")
    writers = {b["producerId"] for b in batches if b["producerId"] >= 0}
    assert {e["producerId"] for e in snapshot} == writers
    assert all(e["currentTxnFirstOffset"] == -1 for e in snapshot), "every transaction was completed"

    epochs = java_oracle.dump(tmp_path / "leader-epoch-checkpoint")
    assert [e["epoch"] for e in epochs] == [0, 3]
    assert epochs[1]["startOffset"] == min(b["baseOffset"] for b in batches if b["partitionLeaderEpoch"] == 3)


def test_open_transaction_is_kept_in_the_snapshot(java_oracle: JavaOracle, tmp_path: Path) -> None:
    log = java_oracle.write_segment(
        tmp_path, "gzip", records=100, transactional=True, open_transaction=True, seed=5
    )
    expected = java_oracle.expected(tmp_path)
    batches = java_oracle.dump(log)
    _assert_dump_matches_expected(batches, expected)
    ongoing = [r for r in expected["records"] if r.get("ongoing")]
    assert ongoing and not any(r["aborted"] for r in ongoing)
    assert batches[-1]["isTransactional"] and not batches[-1]["isControl"]
    producer = batches[-1]["producerId"]
    first_open = min(r["offset"] for r in ongoing)
    snapshot = java_oracle.dump(tmp_path / f"{batches[-1]['lastOffset'] + 1:020d}.snapshot")
    by_producer = {e["producerId"]: e for e in snapshot}
    assert by_producer[producer]["currentTxnFirstOffset"] == first_open
    assert all(e["currentTxnFirstOffset"] == -1 for pid, e in by_producer.items() if pid != producer)


@pytest.mark.parametrize(("codec", "transactional"), [("none", False), ("zstd", True)])
def test_rebuilt_indexes_equal_the_live_ones(
    java_oracle: JavaOracle, tmp_path: Path, codec: str, transactional: bool
) -> None:
    """Kafka's crash-recovery rebuild of a .log gives the same bytes the live log wrote."""
    live = tmp_path / "live"
    log = java_oracle.write_segment(
        live, codec, records=500, transactional=transactional, index_interval_bytes=3000
    )
    rebuilt = tmp_path / "rebuilt"
    result = java_oracle.rebuild_indexes(log, rebuilt, index_interval_bytes=3000)
    assert result["truncatedBytes"] == 0
    expected_files = sorted(
        p.name for p in live.iterdir() if p.suffix != ".log" and p.name != "expected.json"
    )
    assert sorted(result["files"]) == expected_files
    for name in expected_files:
        assert (rebuilt / name).read_bytes() == (live / name).read_bytes(), name


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_legacy_message_sets(java_oracle: JavaOracle, tmp_path: Path, magic: int, codec: str) -> None:
    log = java_oracle.write_segment(tmp_path, codec, records=120, magic=magic, base_offset=1000)
    assert log.name == "00000000000000001000.log"
    expected = java_oracle.expected(tmp_path)
    batches = java_oracle.dump(log)
    _assert_dump_matches_expected(batches, expected)
    assert java_oracle.check(log)["records"] == 120
    raw = log.read_bytes()
    offset, size, _crc, raw_magic, attributes = struct.unpack_from(">qiIbb", raw, 0)
    assert raw_magic == magic and raw[16] == magic
    assert attributes & 0x07 == CODEC_IDS[codec]
    assert size + 12 == batches[0]["size"]
    if codec == "lz4" and magic == 0:
        # KAFKA-3160: magic 0 lz4 frames carry the header checksum computed over magic+FLG+BD.
        # Wrapper message: offset 8, size 4, crc 4, magic 1, attributes 1, key length 4 at byte 18.
        key_len = struct.unpack_from(">i", raw, 18)[0]
        value_start = 22 + max(key_len, 0) + 4
        frame = raw[value_start : value_start + 7]
        assert frame[:4] == struct.pack("<I", 0x184D2204)
        assert frame[6] == 0x1A


def test_check_reports_kafkas_error_with_position(java_oracle: JavaOracle, tmp_path: Path) -> None:
    log = java_oracle.write_segment(tmp_path / "seg", "gzip", records=50)
    batches = java_oracle.dump(log)
    corrupt = tmp_path / "corrupt" / log.name
    corrupt.parent.mkdir()
    data = bytearray(log.read_bytes())
    second = batches[1]["position"]
    data[second + 70] ^= 0xFF  # inside the compressed records of the second batch
    corrupt.write_bytes(bytes(data))
    with pytest.raises(
        OracleError, match=rf"byte position {second} \(baseOffset {batches[1]['baseOffset']}\).*corrupt"
    ):
        java_oracle.check(corrupt)
    assert java_oracle.dump(corrupt)[1]["isValid"] is False

    truncated = tmp_path / "truncated" / log.name
    truncated.parent.mkdir()
    shutil.copy(log, truncated)
    with truncated.open("r+b") as f:
        f.truncate(log.stat().st_size - 10)
    with pytest.raises(OracleError, match="trailing bytes"):
        java_oracle.check(truncated)
    # A broker recovering this file would cut the incomplete last batch off.
    recovered = java_oracle.rebuild_indexes(truncated, tmp_path / "recovered")
    assert recovered["truncatedBytes"] == batches[-1]["size"] - 10
    assert recovered["nextOffset"] == batches[-1]["baseOffset"]


def test_bad_requests_are_clear_errors(java_oracle: JavaOracle, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown codec"):
        java_oracle.write_segment(tmp_path, "brotli")
    with pytest.raises(OracleError, match="zstd needs magic 2"):
        java_oracle.write_segment(tmp_path, "zstd", magic=1)
    with pytest.raises(OracleError, match="no such file"):
        java_oracle.dump(tmp_path / "00000000000000000000.log")


def test_oracle_server_restarts_and_one_shot_mode_agrees(java_build: JavaBuild, tmp_path: Path) -> None:
    with JavaOracle(java_build) as oracle:
        log = oracle.write_segment(tmp_path, "snappy", records=40)
        first = oracle.dump(log)
        pid = oracle.server_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while oracle.server_pid == pid and time.monotonic() < deadline:
            time.sleep(0.05)
        assert oracle.dump(log) == first  # a fresh JVM answered
        assert oracle.server_pid not in (None, pid)
    assert oracle.server_pid is None

    one_shot = JavaOracle(java_build, persistent=False)
    assert one_shot.dump(log) == first
    assert one_shot.check(log)["records"] == 40
    with pytest.raises(OracleError, match="no such file"):
        one_shot.dump(tmp_path / "00000000000000000099.log")
