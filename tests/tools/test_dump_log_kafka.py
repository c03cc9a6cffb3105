"""``rsm dump-log`` against Kafka's own kafka-dump-log (``org.apache.kafka.tools.DumpLogSegments``).

The same files and flags go to both tools and their outputs are compared byte for byte: stdout whole,
stderr line for line (Kafka prints its findings from hash maps, so their order across files is not
fixed). Files: every real partition directory in ``../shared/fixtures/public/segments``, the cluster
metadata log a broker wrote (LeaderChange control records), segments written by Kafka's own classes
(every codec, committed, aborted and open transactions, magic 0 and 1), and segments made here to hold
payloads a text console would mangle (markup, control characters, tabs, malformed UTF-8).
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_data import SEGMENTS, fixture_path
from harness.maven import kafka_dump_log_command

from segment_format import SegmentWriter, build_batch, build_control_batch
from segment_format.records import ControlRecordType, TimestampType

pytestmark = pytest.mark.oracle

KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
FLAG_SETS = (
    (),
    ("--print-data-log",),
    ("--deep-iteration",),
    ("--print-data-log", "--skip-record-metadata"),
    ("--verify-index-only",),
    ("--index-sanity-check",),
)


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in KINDS)


def _ours(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "rsm.cli.main", "dump-log", *args]
    return subprocess.run(cmd, capture_output=True, timeout=300, check=False)


def _kafkas(libs: Path, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(kafka_dump_log_command(libs, *args), capture_output=True, timeout=300, check=False)


def assert_same_as_kafka(libs: Path, files: list[Path], *flags: str) -> bytes:
    args = [*flags, "--files", ",".join(str(f) for f in files)]
    kafka, ours = _kafkas(libs, args), _ours(args)
    assert kafka.returncode == 0, kafka.stderr.decode(errors="replace")[-2000:]
    assert ours.returncode == 0, ours.stderr.decode(errors="replace")[-2000:]
    if ours.stdout != kafka.stdout:
        theirs, mine = kafka.stdout.splitlines(), ours.stdout.splitlines()
        for i, (a, b) in enumerate(zip(theirs, mine, strict=False)):
            assert b == a, f"{flags} line {i + 1} differs:\nkafka: {a!r}\nours:  {b!r}"
        assert len(mine) == len(theirs), f"{flags}: {len(theirs)} lines from Kafka, {len(mine)} from us"
    assert sorted(ours.stderr.splitlines()) == sorted(kafka.stderr.splitlines()), flags
    return kafka.stdout


def _partition_dirs() -> list[Path]:
    """Collected without touching a missing ../shared (the test then skips, or fails under CI)."""
    dirs = sorted(d for d in SEGMENTS.glob("*/*") if d.is_dir() and _files(d)) if SEGMENTS.is_dir() else []
    return dirs or [SEGMENTS / "absent"]


@pytest.mark.parametrize("directory", _partition_dirs(), ids=lambda d: f"{d.parent.name}/{d.name}")
def test_real_partition_directories(kafka_dump_log: Path, directory: Path) -> None:
    fixture_path("public", "segments", directory.parent.name, directory.name)
    for flags in FLAG_SETS:
        assert_same_as_kafka(kafka_dump_log, _files(directory), *flags)


def test_cluster_metadata_log(kafka_dump_log: Path, tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    shutil.copy(fixture_path("kafka-written", "cluster-metadata-00000000000000000000.log"), log)
    assert_same_as_kafka(kafka_dump_log, [log], "--deep-iteration")
    assert_same_as_kafka(kafka_dump_log, [log], "--print-data-log")
    assert_same_as_kafka(kafka_dump_log, [log], "--max-bytes", "200", "--print-data-log")
    real = fixture_path("public", "segments", "nomanazeem_Kafka-java", "__cluster_metadata-0")
    out = assert_same_as_kafka(kafka_dump_log, [real / "00000000000000000000.log"], "--deep-iteration")
    assert b" LeaderChange: {" in out


def _control(type_id: int, value: bytes) -> tuple[bytes, bytes, list, int]:  # type: ignore[type-arg]
    return (struct.pack(">hh", 0, type_id), value, [], 7000)


def test_every_control_record_type(kafka_dump_log: Path, tmp_path: Path) -> None:
    """KRaft's control records decoded as Kafka decodes them, plus LogAppendTime and delete horizons."""
    directory_id = bytes(range(16))
    endpoint = b"\x0bCONTROLLER" + b"\x0alocalhost" + struct.pack(">H", 9093) + b"\x00"
    voter = struct.pack(">i", 3) + directory_id + b"\x02" + endpoint + struct.pack(">hh", 0, 1) + b"\x00\x00"
    controls = [
        _control(2, struct.pack(">hi", 0, 1) + b"\x03" + struct.pack(">i", 1) + b"\x00" + struct.pack(">i", 2)
                 + b"\x00\x02" + struct.pack(">i", 1) + b"\x00\x00"),
        _control(3, struct.pack(">hq", 0, 1722856846589) + b"\x00"),
        _control(4, struct.pack(">h", 0) + b"\x00"),
        _control(5, struct.pack(">hh", 0, 1) + b"\x00"),
        _control(6, struct.pack(">h", 0) + b"\x02" + voter + b"\x00"),
        _control(9, b""),
    ]  # fmt: skip
    with SegmentWriter(tmp_path, 0) as w:
        for i, record in enumerate(controls):
            w.append(build_batch([record], base_offset=i, is_control=True))
        w.append(
            build_batch(
                [(b"k", b"v", [], 1), (None, b"w", [], 2)], base_offset=len(controls),
                timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=99,
            )
        )  # fmt: skip
        w.append(build_batch([(b"k", None, [], 5)], base_offset=len(controls) + 2, delete_horizon_ms=123456))
    out = assert_same_as_kafka(kafka_dump_log, [w.log_path], "--print-data-log")
    for text in (b"LeaderChange: {", b"SnapshotHeader {", b"SnapshotFooter {", b"KRaftVersion {",
                 b"KRaftVoters {", b"controlType: UNKNOWN(9)", b"LogAppendTime: 99", b"OptionalLong[123456]"):  # fmt: skip
        assert text in out
    assert_same_as_kafka(kafka_dump_log, [w.log_path], "--print-data-log", "--skip-record-metadata")


@pytest.fixture(scope="module")
def kafka_written(tmp_path_factory: pytest.TempPathFactory, java_build) -> list[Path]:  # type: ignore[no-untyped-def]
    """Segments written by Kafka's own classes: every codec with transactions, magic 0 and 1."""
    from harness.oracle import JavaOracle

    root = tmp_path_factory.mktemp("kafka-written")
    dirs = []
    with JavaOracle(java_build) as oracle:
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            oracle.write_segment(root / f"v2-{codec}", codec, records=120, transactional=True, seed=3)
            dirs.append(root / f"v2-{codec}")
        oracle.write_segment(
            root / "open", "zstd", records=30, transactional=True, open_transaction=True, base_offset=500
        )
        dirs.append(root / "open")
        for magic in (0, 1):
            for codec in ("none", "gzip", "snappy", "lz4"):
                oracle.write_segment(root / f"m{magic}-{codec}", codec, records=80, magic=magic, seed=5)
                dirs.append(root / f"m{magic}-{codec}")
    return dirs


def test_segments_kafka_wrote(kafka_dump_log: Path, kafka_written: list[Path]) -> None:
    files = [f for d in kafka_written for f in _files(d)]
    for flags in FLAG_SETS:
        out = assert_same_as_kafka(kafka_dump_log, files, *flags)
    out = assert_same_as_kafka(kafka_dump_log, files, "--print-data-log")
    assert b"endTxnMarker: ABORT" in out and b"endTxnMarker: COMMIT" in out
    assert b"magic: 0 compresscodec: snappy" in out and b"NoTimestampType: -1" in out
    assert b"isValid: true crc: " in out  # legacy records print their own CRC, not v2 fields
    assert b"currentTxnFirstOffset: OptionalLong[" in out  # the open transaction's snapshot


def _awkward_segment(directory: Path) -> Path:
    rng = random.Random(7)
    odd = [0x28, 0x41, 0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
    payloads = [
        b":smile: [bold]x[/bold] \t tab\x00nul\x1b[31mred\r\n",
        "ünïcode ☃ 😀".encode(),
        b"\xff\xfe\xed\xa0\x80\xc3\x28\xf0\x9f\x98",
        b"x" * 5000,
        b"\x00\x01\x00\x05group",  # a __consumer_offsets key: binary, leading zero bytes
    ]
    with SegmentWriter(directory, 0, index_interval_bytes=300) as w:
        offset = 0
        for i in range(60):
            recs = []
            for j in range(4):
                if i < 3:
                    value = payloads[(i * 4 + j) % len(payloads)]
                else:
                    value = bytes(rng.choice(odd) for _ in range(rng.randrange(0, 12)))
                key = None if j == 1 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 9)))
                headers = [("h\u00e9", b"v"), ("k2", None)] if j == 2 else []
                recs.append((key, None if i == 4 else value, headers, 1000 + i))
            seq = 2147483646 if i == 5 else i * 4
            w.append(
                build_batch(recs, base_offset=offset, producer_id=5, producer_epoch=1, base_sequence=seq)
            )
            offset += 4
        w.append(
            build_control_batch(
                ControlRecordType.ABORT, base_offset=offset, producer_id=5, producer_epoch=1,
                coordinator_epoch=9, timestamp=5000,
            )
        )  # fmt: skip
    return w.log_path


def test_payloads_byte_for_byte(kafka_dump_log: Path, tmp_path: Path) -> None:
    log = _awkward_segment(tmp_path)
    files = [log, log.with_suffix(".index"), log.with_suffix(".timeindex")]
    for flags in FLAG_SETS:
        assert_same_as_kafka(kafka_dump_log, files, *flags)
    out = assert_same_as_kafka(kafka_dump_log, [log], "--print-data-log")
    assert b"payload: :smile: [bold]x[/bold] \t tab\x00nul\x1b[31mred\r\n" in out
    assert b"payload: " + b"x" * 5000 + b"\n" in out


def test_truncated_log_and_bad_crc(kafka_dump_log: Path, tmp_path: Path) -> None:
    log = _awkward_segment(tmp_path)
    data = bytearray(log.read_bytes())
    data[200] ^= 0x55  # inside the first batch's records: its CRC no longer matches
    log.write_bytes(bytes(data[:-7]))  # and the last batch is cut short
    out = assert_same_as_kafka(kafka_dump_log, [log], "--deep-iteration")
    assert b"isvalid: false" in out and b"invalid bytes at the end of" in out


def test_not_consecutive_and_mismatched_indexes(kafka_dump_log: Path, tmp_path: Path) -> None:
    """Kafka's stderr findings: offsets with gaps, index entries pointing at the wrong batch."""
    with SegmentWriter(tmp_path, 100, index_interval_bytes=1) as w:
        for i in range(8):
            w.append(build_batch([(b"k", b"v%d" % i, [], 1000 - i)], base_offset=100 + i * 3))
    log = w.log_path
    index = log.with_suffix(".index")
    raw = bytearray(index.read_bytes())
    raw[11] ^= 0x01  # second entry now names another offset of the same position
    index.write_bytes(bytes(raw))
    files = [log, index, log.with_suffix(".timeindex")]
    for flags in FLAG_SETS[:5]:
        assert_same_as_kafka(kafka_dump_log, files, *flags)
