"""Unit tests of segment_format: codecs, varints, batches, legacy sets, writer, indexes, segment view.

kafka-python's record builders and readers are an independent implementation of the formats: batches
go both ways (theirs parse with us, ours parse with them).
"""

from __future__ import annotations

import io
import os
import random
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch as KPLegacyBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from segment_format import (
    AbortedTxn,
    CompressionType,
    ControlRecordType,
    CorruptRecordError,
    EndTransactionMarker,
    Header,
    LeaderEpochCheckpoint,
    LogSegment,
    OffsetIndex,
    ProducerSnapshot,
    ProducerStateEntry,
    Record,
    SegmentVerifier,
    SegmentWriter,
    TimeIndex,
    TimestampType,
    TransactionIndex,
    build_batch,
    build_control_batch,
    build_indexes,
    compress,
    decompress,
    iter_batches,
    parse_batch,
)
from segment_format.codecs import xxh32
from segment_format.varint import read_varint, read_varlong, write_varint, write_varlong

CODECS = list(CompressionType)


def sample_records(
    n: int, seed: int = 0
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 7 == 3 else rng.randbytes(rng.randrange(0, 300))
        headers = [(f"h{j}-ü", None if j == 2 else rng.randbytes(5)) for j in range(i % 4)]
        out.append((key, value, headers, 1_700_000_000_000 + rng.randrange(-5000, 5000)))
    return out


# ------------------------------------------------------------------------------------------ codecs
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 200_000])
def test_codec_round_trip(codec: CompressionType, size: int) -> None:
    data = (os.urandom(size // 2) + b"a" * (size - size // 2)) if size else b""
    assert decompress(codec, compress(codec, data)) == data


def test_xerial_framing_uses_32k_blocks() -> None:
    data = os.urandom(70_000)
    out = compress(CompressionType.SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, 0
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        pos += 4 + n
        blocks += 1
    assert blocks == 3 and pos == len(out)


def test_lz4_frame_like_kafka_including_magic0_checksum() -> None:
    assert (xxh32(bytes([0x60, 0x40])) >> 8) & 0xFF == 0x82
    assert compress(CompressionType.LZ4, b"x" * 10)[:7] == bytes.fromhex("04224d18604082")
    legacy = compress(CompressionType.LZ4, b"x" * 10, magic=0)
    assert legacy[:7] == bytes.fromhex("04224d1860401a")
    assert decompress(CompressionType.LZ4, legacy, magic=0) == b"x" * 10
    with pytest.raises(CorruptRecordError, match="checksum"):
        decompress(CompressionType.LZ4, legacy, magic=1)
    big = os.urandom(150_000)  # incompressible: stored blocks of at most 64 KiB
    assert decompress(CompressionType.LZ4, compress(CompressionType.LZ4, big)) == big


def test_gzip_header_as_java() -> None:
    assert compress(CompressionType.GZIP, b"abc")[:10] == bytes.fromhex("1f8b08000000000000ff")


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not CompressionType.NONE])
def test_corrupt_compressed_data_raises_corrupt_record_error(codec: CompressionType) -> None:
    good = compress(codec, b"hello world " * 100)
    for bad in (good[: len(good) // 2], good[:4] + bytes(b ^ 0x5A for b in good[4:])):
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad)


def test_snappy_refuses_impossible_claimed_length() -> None:
    bogus = write_unsigned(1 << 31) + b"\x00" * 4
    with pytest.raises(CorruptRecordError, match="claims"):
        decompress(CompressionType.SNAPPY, bogus)


def write_unsigned(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# ----------------------------------------------------------------------------------------- varints
@pytest.mark.parametrize("value", [0, -1, 1, 63, -64, 64, 300, -(2**31), 2**31 - 1])
def test_varint_round_trip(value: int) -> None:
    enc = write_varint(value)
    assert read_varint(enc, 0) == (value, len(enc))


@pytest.mark.parametrize("value", [0, -1, 2**40, -(2**63), 2**63 - 1])
def test_varlong_round_trip(value: int) -> None:
    enc = write_varlong(value)
    assert read_varlong(enc, 0) == (value, len(enc))


def test_bad_varints() -> None:
    with pytest.raises(CorruptRecordError, match="truncated"):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer"):
        read_varint(b"\xff" * 6, 0)
    with pytest.raises(CorruptRecordError, match="longer"):
        read_varlong(b"\xff" * 11, 0)
    assert write_varint(-1) == b"\x01" and write_varint(1) == b"\x02"


# ----------------------------------------------------------------------------------------- batches
@pytest.mark.parametrize("codec", CODECS)
def test_build_and_parse_batch(codec: CompressionType) -> None:
    recs = sample_records(50)
    data = build_batch(
        recs, base_offset=1000, compression=codec, producer_id=42, producer_epoch=3, base_sequence=7,
        partition_leader_epoch=9,
    )  # fmt: skip
    batch = parse_batch(data)
    batch.ensure_valid()
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (1000, 1049, 50)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.partition_leader_epoch) == (
        42,
        3,
        7,
        9,
    )
    assert batch.compression_type is codec and batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.max_timestamp == max(r[3] for r in recs) and batch.base_timestamp == recs[0][3]
    assert batch.size_in_bytes == len(data) and batch.next_offset == 1050
    assert batch.last_sequence == 56
    out = batch.records()
    assert [(r.key, r.value, r.timestamp) for r in out] == [(k, v, ts) for k, v, _, ts in recs]
    assert [r.headers for r in out] == [tuple(Header(hk, hv) for hk, hv in h) for _, _, h, _ in recs]
    assert [r.offset for r in out] == list(range(1000, 1050))
    assert [r.sequence for r in out] == list(range(7, 57))


def test_sequence_wraps_like_kafka() -> None:
    batch = parse_batch(build_batch(sample_records(3), base_offset=0, producer_id=1, producer_epoch=0,
                                    base_sequence=2**31 - 2))  # fmt: skip
    assert [r.sequence for r in batch.records()] == [2**31 - 2, 2**31 - 1, 0]
    assert batch.last_sequence == 0


def test_log_append_time_overrides_record_timestamps() -> None:
    batch = parse_batch(
        build_batch(
            sample_records(3),
            base_offset=0,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=1234,
        )  # fmt: skip
    )
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == 1234
    assert {r.timestamp for r in batch.records()} == {1234}


def test_record_offsets_with_gaps_and_delete_horizon() -> None:
    recs = [Record(10, 100, b"a", None), Record(13, 200, b"b", b"v")]
    batch = parse_batch(build_batch(recs, base_offset=10, delete_horizon_ms=99, last_offset_delta=5))
    assert batch.has_delete_horizon and batch.delete_horizon_ms == 99
    assert batch.last_offset == 15 and [r.offset for r in batch.records()] == [10, 13]
    assert [r.timestamp for r in batch.records()] == [100, 200]


def test_control_batches() -> None:
    data = build_control_batch(ControlRecordType.ABORT, base_offset=5, producer_id=77, producer_epoch=2,
                               coordinator_epoch=11, timestamp=999)  # fmt: skip
    batch = parse_batch(data)
    assert (
        batch.is_control_batch and batch.is_transactional and batch.control_type() is ControlRecordType.ABORT
    )
    (rec,) = batch.records()
    marker = EndTransactionMarker.from_record(rec)
    assert (marker.control_type, marker.coordinator_epoch) == (ControlRecordType.ABORT, 11)
    assert rec.key == b"\x00\x00\x00\x00" and rec.value == b"\x00\x00\x00\x00\x00\x0b"
    assert ControlRecordType.parse(b"\x00\x00\x00\x63") is ControlRecordType.UNKNOWN
    with pytest.raises(CorruptRecordError):
        ControlRecordType.parse(b"\x00")


def test_crc_mismatch_names_file_and_byte() -> None:
    data = bytearray(build_batch(sample_records(3), base_offset=0))
    data[-1] ^= 0xFF
    stream = build_batch(sample_records(2), base_offset=0) + bytes(data)
    batches = list(iter_batches(stream, file="x.log"))
    pos, bad = batches[1]
    assert not bad.is_valid()
    with pytest.raises(CorruptRecordError) as info:
        bad.ensure_valid()
    assert info.value.file == "x.log" and info.value.position == pos
    assert str(info.value).startswith(f"x.log: byte {pos}: ")


def test_impossible_lengths_are_refused_without_allocating() -> None:
    header = struct.pack(">qiib", 0, 2**31 - 1, 0, 2)
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_batches(header + b"\x00" * 100))
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_batches(io.BytesIO(header + b"\x00" * 100)))
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        list(iter_batches(struct.pack(">qiib", 0, 10, 0, 2) + b"\x00" * 100))
    with pytest.raises(CorruptRecordError, match="unknown magic"):
        list(iter_batches(struct.pack(">qiib", 0, 100, 0, 7) + b"\x00" * 100))


def test_record_count_beyond_data_is_refused() -> None:
    data = bytearray(build_batch(sample_records(2), base_offset=0))
    struct.pack_into(">i", data, 57, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="record count"):
        parse_batch(bytes(data)).records()


def test_unknown_codec_is_corrupt() -> None:
    data = bytearray(build_batch(sample_records(2), base_offset=0))
    data[22] |= 0x07
    with pytest.raises(CorruptRecordError, match="codec"):
        parse_batch(bytes(data)).records()


def test_iter_batches_from_file_object_with_start_position() -> None:
    blob = b"".join(build_batch(sample_records(3, i), base_offset=3 * i) for i in range(4))
    all_positions = [p for p, _ in iter_batches(blob)]
    from_file = [
        (p, b.base_offset) for p, b in iter_batches(io.BytesIO(blob), start_position=all_positions[2])
    ]
    assert from_file == [(all_positions[2], 6), (all_positions[3], 9)]


# ------------------------------------------------------------------------------ legacy message sets
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]
)
def test_legacy_round_trip(magic: int, codec: CompressionType) -> None:
    recs = [(f"k{i}".encode(), f"v{i}".encode(), [], 1000 + i) for i in range(5)]
    data = build_batch(recs, base_offset=20, magic=magic, compression=codec)
    batches = [b for _, b in iter_batches(data)]
    assert len(batches) == (5 if codec is CompressionType.NONE else 1)
    assert all(b.is_valid() for b in batches)
    out = [r for b in batches for r in b.records()]
    assert [r.offset for r in out] == list(range(20, 25))
    assert [(r.key, r.value) for r in out] == [(k, v) for k, v, _, _ in recs]
    assert [r.timestamp for r in out] == ([1000 + i for i in range(5)] if magic == 1 else [-1] * 5)
    assert batches[-1].last_offset == 24 and batches[0].base_offset == 20


# -------------------------------------------------------------------------- kafka-python both ways
KP_CODECS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
]


@pytest.mark.parametrize("codec", KP_CODECS)
def test_kafka_python_v2_batches_parse_with_us(codec: CompressionType) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False,
                                        producer_id=5, producer_epoch=1, base_sequence=10, batch_size=1 << 22)  # fmt: skip
    recs = sample_records(40, seed=3)
    for i, (k, v, h, ts) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v, headers=h)
    data = bytes(builder.build())
    batch = parse_batch(data)
    batch.ensure_valid()
    assert batch.compression_type is codec and (batch.producer_id, batch.base_sequence) == (5, 10)
    assert [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for r in batch.records()
    ] == [(i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(recs)]


@pytest.mark.parametrize("codec", KP_CODECS)
def test_our_v2_batches_parse_with_kafka_python(codec: CompressionType) -> None:
    recs = sample_records(40, seed=4)
    data = build_batch(
        recs, base_offset=0, compression=codec, producer_id=9, producer_epoch=0, base_sequence=0
    )
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == [(i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(recs)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY])
def test_legacy_sets_both_ways_with_kafka_python(magic: int, codec: CompressionType) -> None:
    recs = [(f"k{i}".encode(), f"value {i}".encode() * 3, [], 5000 + i) for i in range(6)]
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for i, (k, v, _, ts) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v)
    theirs = bytearray(builder.build())
    if codec is not CompressionType.NONE:
        # a producer leaves the wrapper offset at 0; the broker stores it as the last absolute offset
        struct.pack_into(">q", theirs, 0, len(recs) - 1)
    ours = [r for _, b in iter_batches(theirs) for r in b.records()]
    assert [(r.offset, r.key, r.value) for r in ours] == [(i, k, v) for i, (k, v, _, _) in enumerate(recs)]
    mine = build_batch(recs, base_offset=0, magic=magic, compression=codec)
    pos, parsed = 0, []
    while pos < len(mine):
        (size,) = struct.unpack_from(">i", mine, pos + 8)
        parsed.extend(KPLegacyBatch(mine[pos : pos + 12 + size], magic))
        pos += 12 + size
    assert [(r.offset, r.key, r.value) for r in parsed] == [(i, k, v) for i, (k, v, _, _) in enumerate(recs)]


# ---------------------------------------------------------------------------------------- indexes
def test_offset_and_time_index_lookup_and_round_trip() -> None:
    index = OffsetIndex(100, [])
    for off, pos in [(110, 4000), (150, 8200), (199, 12300)]:
        index.append(off, pos)
    assert index.lookup(5).position == 0 and index.lookup(100).offset == 100
    assert index.lookup(149).position == 4000 and index.lookup(150).position == 8200
    assert index.lookup(10**9).position == 12300
    again = OffsetIndex.from_bytes(index.to_bytes() + b"\x00" * 80, 100)  # preallocated tail ignored
    assert again.entries == index.entries
    with pytest.raises(ValueError):
        index.append(150, 9000)
    tindex = TimeIndex(100)
    assert (
        tindex.maybe_append(1000, 110)
        and not tindex.maybe_append(1000, 120)
        and tindex.maybe_append(2000, 150)
    )
    assert tindex.lookup(999).timestamp == -1 and tindex.lookup(1500).offset == 110
    assert TimeIndex.from_bytes(tindex.to_bytes(), 100).entries == tindex.entries
    with pytest.raises(CorruptRecordError, match="multiple"):
        OffsetIndex.from_bytes(b"\x00" * 7, 0, file="a.index")
    with pytest.raises(CorruptRecordError, match="out of order") as info:
        OffsetIndex.from_bytes(struct.pack(">iiii", 5, 100, 3, 200), 0, file="a.index")
    assert info.value.position == 8


def test_txn_index_snapshot_and_checkpoint_round_trip() -> None:
    txns = TransactionIndex([AbortedTxn(1, 10, 20, 10), AbortedTxn(2, 15, 30, 15)])
    data = txns.to_bytes()
    assert len(data) == 68 and TransactionIndex.from_bytes(data).entries == txns.entries
    assert txns.collect_aborted(21, 100) == [AbortedTxn(2, 15, 30, 15)]
    with pytest.raises(CorruptRecordError, match="version"):
        TransactionIndex.from_bytes(b"\x00\x01" + data[2:34])
    snap = ProducerSnapshot([ProducerStateEntry(1, 2, 3, 4, 0, 5, 6, -1)])
    raw = snap.to_bytes()
    assert len(raw) == 56 and ProducerSnapshot.from_bytes(raw).entries == snap.entries
    with pytest.raises(CorruptRecordError, match="crc"):
        ProducerSnapshot.from_bytes(raw[:-1] + b"\x01")
    assert len(ProducerSnapshot().to_bytes()) == 10
    with pytest.raises(CorruptRecordError, match="count"):
        LeaderEpochCheckpoint.from_bytes(b"0\n2\n0 0\n")
    with pytest.raises(CorruptRecordError, match="version"):
        LeaderEpochCheckpoint.from_bytes(b"1\n0\n")


# ------------------------------------------------------------------------------- writer / segment
def write_segment(tmp_path, base: int = 0, batches: int = 40, codec=CompressionType.NONE):  # type: ignore[no-untyped-def]
    offset = base
    with SegmentWriter(tmp_path, base, index_interval_bytes=1024) as w:
        for i in range(batches):
            recs = sample_records(1 + i % 6, seed=i)
            w.append(build_batch(recs, base_offset=offset, compression=codec))
            offset += len(recs)
    return LogSegment(w.log_path), offset


def test_segment_writer_indexes_match_rebuild_and_lookups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg, next_offset = write_segment(tmp_path, base=500)
    summary = seg.verify(deep=True)
    assert (summary.base_offset, summary.last_offset) == (500, next_offset - 1)
    oi, ti = build_indexes(seg.path, index_interval_bytes=1024)
    assert oi == seg.offset_index_path.read_bytes() and ti == seg.time_index_path.read_bytes()
    assert len(OffsetIndex.read(seg.offset_index_path)) > 3
    batches = list(seg.batches())
    for b in batches:
        for off in (b.base_offset, b.last_offset):
            assert seg.position_for_offset(off) == b.position
    with pytest.raises(ValueError):
        seg.position_for_offset(next_offset)
    target = batches[10].max_timestamp
    pos = seg.position_for_timestamp(target)
    expected = next(b.position for b in batches if b.max_timestamp >= target)
    assert pos == expected
    assert seg.position_for_timestamp(max(b.max_timestamp for b in batches) + 1) is None


def test_segment_verifier_streams_in_any_chunking(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg, _ = write_segment(tmp_path, codec=CompressionType.ZSTD)
    data = seg.path.read_bytes()
    whole = seg.verify()
    for chunk in (1, 7, 4096):
        v = SegmentVerifier(file="s.log", base_offset=0)
        for i in range(0, len(data), chunk):
            v.update(data[i : i + chunk])
        assert v.finish() == whole
    assert whole.record_count == sum(len(b.records()) for b in seg.batches())
    assert whole.compression_types == frozenset({CompressionType.ZSTD})


def test_segment_verify_reports_corruption_with_position(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg, next_offset = write_segment(tmp_path)
    batches = list(seg.batches())
    data = bytearray(seg.path.read_bytes())
    target = batches[5].position + 70
    data[target] ^= 0x01
    seg.path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="crc") as info:
        seg.verify()
    assert info.value.position == batches[5].position and info.value.file == str(seg.path)
    seg.path.write_bytes(bytes(data[: batches[7].position + 30]))
    with pytest.raises(CorruptRecordError):
        LogSegment(seg.path).verify()


def test_segment_verify_checks_offset_range(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg, next_offset = write_segment(tmp_path, base=100)
    assert seg.verify(100, next_offset - 1).last_offset == next_offset - 1
    with pytest.raises(CorruptRecordError, match="beyond the expected end"):
        seg.verify(expected_end_offset=next_offset - 3)
    with pytest.raises(CorruptRecordError, match="below the segment"):
        seg.verify(expected_start_offset=105)
    v = SegmentVerifier(base_offset=0)
    v.update(build_batch(sample_records(3), base_offset=10))
    with pytest.raises(CorruptRecordError, match="do not increase"):
        v.update(build_batch(sample_records(3), base_offset=11))


def test_segment_verifier_counts_compressed_bytes_per_region_in_any_chunking(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Per region of the file, the bytes of already-compressed batches: the same whatever the feed's
    cut (batches checked in place, straddling chunks, or one byte at a time)."""
    w = SegmentWriter(tmp_path, 0)
    offset = 0
    with w:
        for i in range(30):
            recs = sample_records(1 + i % 5, seed=i)
            w.append(build_batch(recs, base_offset=offset, compression=CompressionType.GZIP if i % 3 else 0))
            offset += len(recs)
    seg = LogSegment(w.log_path)
    data = seg.path.read_bytes()
    region = 700
    expected = [0] * -(-len(data) // region)
    for b in seg.batches():
        if b.compression_type is not CompressionType.NONE:
            for p in range(b.position, b.position + b.size_in_bytes):
                expected[p // region] += 1
    assert 0 < sum(expected) < len(data)
    for feed in (1, 13, 700, 4096, len(data)):
        for total in (len(data), None):
            v = SegmentVerifier(file="s.log", base_offset=0, total_size=total, region_size=region)
            for i in range(0, len(data), feed):
                v.update(memoryview(data)[i : i + feed])
            assert v.finish().last_offset == offset - 1
            assert v.compressed_bytes_per_region == expected, (feed, total)


def test_segment_verifier_end_offset_exact_or_inside_range(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Kafka's RemoteLogSegmentMetadata.endOffset is the next segment's base offset - 1, which can lie
    past the last batch (offset gaps): `exact_end_offset=False` accepts that, the default does not."""
    seg, next_offset = write_segment(tmp_path, base=100)
    data = seg.path.read_bytes()
    with pytest.raises(CorruptRecordError, match=f"segment ends at offset {next_offset - 1}, expected"):
        seg.verify(100, next_offset + 5)
    v = SegmentVerifier(file="s.log", expected_start_offset=100, expected_end_offset=next_offset + 5,
                        exact_end_offset=False)  # fmt: skip
    v.update(data)
    assert v.finish().last_offset == next_offset - 1
    v = SegmentVerifier(file="s.log", expected_start_offset=100, expected_end_offset=next_offset - 2,
                        exact_end_offset=False)  # fmt: skip
    with pytest.raises(CorruptRecordError, match="outside the segment's range 100..") as info:
        v.update(data)
    assert info.value.position == list(seg.batches())[-1].position


def test_segment_verifier_refuses_a_size_other_than_total_size(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg, _ = write_segment(tmp_path)
    data = seg.path.read_bytes()
    longer = SegmentVerifier(file="s.log", base_offset=0, total_size=len(data) - 1)
    with pytest.raises(CorruptRecordError, match="longer than") as info:
        longer.update(data)
    assert info.value.position == len(data) - 1
    shorter = SegmentVerifier(file="s.log", base_offset=0, total_size=len(data) + 1)
    shorter.update(data)
    with pytest.raises(CorruptRecordError, match=f"file is {len(data)} bytes, the metadata states"):
        shorter.finish()
    with pytest.raises(ValueError, match="region_size"):
        SegmentVerifier(region_size=0)


def test_segment_writer_tracks_aborted_transactions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with SegmentWriter(tmp_path, 0) as w:
        w.append(build_batch(sample_records(2), base_offset=0, producer_id=1, producer_epoch=0, base_sequence=0,
                             is_transactional=True))  # fmt: skip
        w.append(build_batch(sample_records(2), base_offset=2, producer_id=2, producer_epoch=0, base_sequence=0,
                             is_transactional=True))  # fmt: skip
        w.append(build_control_batch(ControlRecordType.ABORT, base_offset=4, producer_id=2, producer_epoch=0,
                                     timestamp=1))  # fmt: skip
        w.append(build_control_batch(ControlRecordType.COMMIT, base_offset=5, producer_id=1, producer_epoch=0,
                                     timestamp=1))  # fmt: skip
    assert TransactionIndex.read(w.txn_index_path).entries == [AbortedTxn(2, 2, 4, 0)]


def test_deep_verify_checks_inner_crcs_of_legacy_wrappers() -> None:
    from segment_format.legacy import build_legacy_message

    inner = bytearray(build_legacy_message(0, b"k", b"v", magic=1, timestamp=5))
    inner[12] ^= 1  # inner message CRC wrong, wrapper CRC right
    wrapper = build_legacy_message(0, None, compress(CompressionType.GZIP, bytes(inner)), magic=1, timestamp=5,
                                   attributes=int(CompressionType.GZIP))  # fmt: skip
    shallow = SegmentVerifier(deep=False)
    shallow.update(wrapper)
    assert shallow.finish().record_count == 1
    deep = SegmentVerifier(file="w.log", deep=True)
    with pytest.raises(CorruptRecordError, match="inner message at offset 0") as info:
        deep.update(wrapper)
    assert info.value.file == "w.log" and info.value.position == 0


def test_verifier_with_total_size_refuses_bogus_length_early() -> None:
    good = build_batch(sample_records(2), base_offset=0)
    bogus = struct.pack(">qiib", 2, 1 << 30, 0, 2) + b"\x00" * 100
    v = SegmentVerifier(file="s.log", base_offset=0, total_size=len(good) + len(bogus) + 10_000)
    v.update(good)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        v.update(bogus)
    assert info.value.position == len(good)


def test_gzip_trailing_bytes_after_member_are_ignored_like_java() -> None:
    data = compress(CompressionType.GZIP, b"payload") + b"\x00\x00\x00"
    assert decompress(CompressionType.GZIP, data) == b"payload"
    two = compress(CompressionType.GZIP, b"a") + compress(CompressionType.GZIP, b"b")
    assert decompress(CompressionType.GZIP, two) == b"ab"


def test_zstd_frame_claiming_huge_content_is_refused() -> None:
    frame = bytearray(b"\x28\xb5\x2f\xfd\xe0") + (1 << 40).to_bytes(8, "little") + b"\x01\x00\x00"
    with pytest.raises(CorruptRecordError, match="claims"):
        decompress(CompressionType.ZSTD, bytes(frame))


def test_header_keys_that_are_not_utf8_round_trip() -> None:
    key = b"bad-\xff-key".decode("utf-8", "surrogateescape")
    data = build_batch([(b"k", b"v", [(key, b"x")], 1)], base_offset=0)
    assert b"bad-\xff-key" in data
    (rec,) = parse_batch(data).records()
    assert rec.headers[0].key == key


def test_index_files_write_and_read_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    oi = OffsetIndex(10, [])
    oi.append(20, 4100)
    oi.write(tmp_path / "00000000000000000010.index")
    assert OffsetIndex.read(tmp_path / "00000000000000000010.index").entries == oi.entries
    ti = TimeIndex(10)
    ti.maybe_append(500, 20)
    ti.write(tmp_path / "00000000000000000010.timeindex")
    assert TimeIndex.read(tmp_path / "00000000000000000010.timeindex").entries == ti.entries
    txn = TransactionIndex([AbortedTxn(1, 10, 12, 10)])
    txn.write(tmp_path / "00000000000000000010.txnindex")
    assert TransactionIndex.read(tmp_path / "00000000000000000010.txnindex").entries == txn.entries
    ck = LeaderEpochCheckpoint.from_bytes(b"0\n2\n0 0\n4 15\n")
    ck.write(tmp_path / "leader-epoch-checkpoint")
    assert (tmp_path / "leader-epoch-checkpoint").read_bytes() == b"0\n2\n0 0\n4 15\n"
    assert ck.lookup(14) == ck.entries[0] and ck.lookup(15) == ck.entries[1]
    snap = ProducerSnapshot([ProducerStateEntry(7, 1, 9, 30, 2, 1234, 5, 28)])
    snap.write(tmp_path / "00000000000000000031.snapshot")
    assert ProducerSnapshot.read(tmp_path / "00000000000000000031.snapshot").entries == snap.entries
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
