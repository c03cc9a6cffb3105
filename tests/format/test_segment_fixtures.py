"""Every real-Kafka fixture parses to what its origin states (shared/fixtures/public/SOURCES.md)."""

from __future__ import annotations

import pytest
from fixtures_data import fixture_path

from segment_format import (
    CompressionType,
    ControlRecordType,
    CorruptRecordError,
    Header,
    LeaderEpochCheckpoint,
    LogSegment,
    OffsetIndex,
    ProducerSnapshot,
    ProducerStateEntry,
    TimeIndex,
    TimestampType,
    build_batch,
    build_indexes,
    decompress,
    iter_batches,
)
from segment_format.legacy import LegacyRecordBatch


def batches_of(*parts: str) -> list:
    data = fixture_path(*parts).read_bytes()
    return [b for _, b in iter_batches(data, file="/".join(parts))]


def records_of(*parts: str) -> list:
    return [r for b in batches_of(*parts) for r in b.records()]


# ----------------------------------------------------------------------------------- 1. segments
NIKHIL = ("public", "segments", "NikhilDighe9975_kafka_setup")
NOMAN = ("public", "segments", "nomanazeem_Kafka-java")


def test_nikhil_demo_partition() -> None:
    batches = batches_of(*NIKHIL, "nikhilDemo-0", "00000000000000000000.log")
    assert len(batches) == 3
    assert all(b.magic == 2 and b.compression_type is CompressionType.NONE and b.is_valid() for b in batches)
    recs = [r for b in batches for r in b.records()]
    assert [r.offset for r in recs] == [0, 1, 2]
    assert [r.value for r in recs] == [b"hi", b"hi", b"i"]
    assert all(r.key is None and r.headers == () for r in recs)
    assert [(b.producer_id, b.base_sequence) for b in batches] == [(7000, 0), (10000, 0), (10000, 1)]
    assert all(b.producer_epoch == 0 and b.partition_leader_epoch == 0 for b in batches)
    assert [r.timestamp for r in recs] == [1722856846589, 1722857164633, 1722857166514]
    assert all(b.timestamp_type is TimestampType.CREATE_TIME for b in batches)


def test_nikhil_demo_indexes_snapshot_checkpoint() -> None:
    d = fixture_path(*NIKHIL, "nikhilDemo-0")
    assert (d / "00000000000000000000.index").read_bytes() == b""
    tindex = TimeIndex.read(d / "00000000000000000000.timeindex")
    assert [(e.timestamp, e.offset) for e in tindex] == [(1722857166514, 2)]
    snap = ProducerSnapshot.read(d / "00000000000000000003.snapshot")
    assert snap.entries == [
        ProducerStateEntry(10000, 0, 1, 2, 0, 1722857166514, -1, -1),
        ProducerStateEntry(7000, 0, 0, 0, 0, 1722856846589, -1, -1),
    ]
    assert snap.to_bytes() == (d / "00000000000000000003.snapshot").read_bytes()
    ckpt = LeaderEpochCheckpoint.read(d / "leader-epoch-checkpoint")
    assert [(e.epoch, e.start_offset) for e in ckpt] == [(0, 0)]
    assert ckpt.to_bytes() == b"0\n1\n0 0\n"


def test_consumer_offsets_12() -> None:
    d = fixture_path(*NIKHIL, "__consumer_offsets-12")
    seg = LogSegment(d / "00000000000000000000.log")
    summary = seg.verify(deep=True)
    assert (summary.batch_count, summary.record_count, summary.base_offset, summary.last_offset) == (
        147,
        862,
        0,
        861,
    )
    assert summary.size_in_bytes == 64548
    index = OffsetIndex.read(d / "00000000000000000000.index")
    assert len(index) == 14
    assert [(e.offset, e.position) for e in index.entries[:3]] == [(60, 4388), (120, 8808), (180, 13228)]
    assert (index.entries[-1].offset, index.entries[-1].position) == (830, 61784)
    for e in index:  # each entry points at the batch whose last offset it names
        batch = next(seg.batches(e.position))
        assert batch.last_offset == e.offset
    tindex = TimeIndex.read(d / "00000000000000000000.timeindex")
    assert len(tindex) == 15
    assert (tindex.entries[0].timestamp, tindex.entries[0].offset) == (1721325721277, 60)
    assert (tindex.entries[-1].timestamp, tindex.entries[-1].offset) == (1721659255114, 861)
    tail = records_of(*NIKHIL, "__consumer_offsets-12", "00000000000000000862.log")
    assert [r.offset for r in tail] == list(range(862, 869))
    assert all(r.value is None for r in tail)
    assert [(e.timestamp, e.offset) for e in TimeIndex.read(d / "00000000000000000862.timeindex")] == [
        (1722852681492, 868)
    ]
    for name in ("00000000000000000862.snapshot", "00000000000000000869.snapshot"):
        assert len(ProducerSnapshot.read(d / name)) == 0


def test_cluster_metadata_control_batch() -> None:
    d = fixture_path(*NOMAN, "__cluster_metadata-0")
    seg = LogSegment(d / "00000000000000000000.log")
    summary = seg.verify(deep=True)
    assert (summary.batch_count, summary.record_count, summary.last_offset) == (1842, 2067, 2066)
    first = next(seg.batches())
    assert first.is_control_batch and first.attributes == 0x0020
    assert first.records()[0].key == b"\x00\x00\x00\x02"
    assert first.control_type() is ControlRecordType.LEADER_CHANGE
    index = OffsetIndex.read(d / "00000000000000000000.index")
    assert len(index) == 34
    assert [(e.offset, e.position) for e in index.entries[:3]] == [(55, 4136), (112, 8240), (169, 12344)]
    assert (index.entries[-1].offset, index.entries[-1].position) == (2065, 145867)
    tindex = TimeIndex.read(d / "00000000000000000000.timeindex")
    assert len(tindex) == 35
    assert (tindex.entries[0].timestamp, tindex.entries[0].offset) == (1779275461796, 55)
    assert (tindex.entries[-1].timestamp, tindex.entries[-1].offset) == (1779276569220, 2066)
    assert len(ProducerSnapshot.read(d / "00000000000000002067.snapshot")) == 0
    assert [(e.epoch, e.start_offset) for e in LeaderEpochCheckpoint.read(d / "leader-epoch-checkpoint")] == [
        (1, 0)
    ]


def test_consumer_offsets_15() -> None:
    d = fixture_path(*NOMAN, "__consumer_offsets-15")
    summary = LogSegment(d / "00000000000000000000.log").verify(deep=True)
    assert (summary.batch_count, summary.record_count, summary.last_offset) == (88, 256, 255)
    index = OffsetIndex.read(d / "00000000000000000000.index")
    assert len(index) == 5
    assert (index.entries[0].offset, index.entries[0].position) == (49, 4131)
    assert (index.entries[-1].offset, index.entries[-1].position) == (249, 20714)
    tindex = TimeIndex.read(d / "00000000000000000000.timeindex")
    assert len(tindex) == 6 and (tindex.entries[-1].timestamp, tindex.entries[-1].offset) == (
        1779276564803,
        255,
    )
    ckpt = LeaderEpochCheckpoint.read(d / "leader-epoch-checkpoint")
    assert [(e.epoch, e.start_offset) for e in ckpt] == [(0, 0), (2, 159)]
    assert ckpt.epoch_for_offset(158) == 0 and ckpt.epoch_for_offset(159) == 2


def test_snappy_java_segment() -> None:
    parts = ("public", "segments", "seanorth_kafka-server", "some-topic-0", "00000000000000000000.log")
    batches = batches_of(*parts)
    assert len(batches) == 9
    assert all(b.attributes == 0x0002 and b.record_count == 1 and b.is_valid() for b in batches)
    assert bytes(batches[0].data[61:77]) == bytes.fromhex("82534E41505059000000000100000001")
    recs = [r for b in batches for r in b.records()]
    assert [r.offset for r in recs] == list(range(9))
    assert recs[0].timestamp == 1641710433813
    assert recs[0].key.startswith(b'{"customerId":"12334568","transactionDate":')
    assert recs[0].value == b'{"item":"book","price":"23.9"}'
    assert recs[0].headers == (Header("__Key_TypeId__", b"bbejeck.model.PurchaseKey"),)


def test_kafkajs_gzip_segment() -> None:
    parts = (
        "public",
        "segments",
        "berkayakcay_toy-node-log-collector",
        "topic-logx-001-0",
        "00000000000000000000.log",
    )
    batches = batches_of(*parts)
    assert len(batches) == 17
    assert all(b.attributes == 0x0001 and b.record_count == 1 for b in batches)
    assert all((b.producer_id, b.producer_epoch, b.base_sequence) == (-1, 0, 0) for b in batches)
    assert batches[0].data[61 + 9] == 10  # gzip OS byte of kafkajs
    recs = [r for b in batches for r in b.records()]
    assert [r.offset for r in recs] == list(range(17))
    assert all(r.value.startswith(b"[") for r in recs)


def test_multi_entry_leader_epoch_checkpoint() -> None:
    path = fixture_path(
        "public", "segments", "Jeong-Rae_KafkaDemo", "__cluster_metadata-0.leader-epoch-checkpoint"
    )
    ckpt = LeaderEpochCheckpoint.read(path)
    assert len(ckpt) == 21
    assert [(e.epoch, e.start_offset) for e in ckpt.entries[:3]] == [(1, 0), (2, 298), (3, 354)]
    assert ckpt.to_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    "log_parts",
    [
        (*NIKHIL, "nikhilDemo-0", "00000000000000000000.log"),
        (*NIKHIL, "__consumer_offsets-12", "00000000000000000000.log"),
        (*NIKHIL, "__consumer_offsets-12", "00000000000000000862.log"),
        (*NOMAN, "__cluster_metadata-0", "00000000000000000000.log"),
        (*NOMAN, "__consumer_offsets-15", "00000000000000000000.log"),
    ],
)
def test_indexes_rebuilt_from_real_logs_are_byte_identical(log_parts: tuple[str, ...]) -> None:
    log = fixture_path(*log_parts)
    offset_index, time_index = build_indexes(log, index_interval_bytes=4096)
    assert offset_index == log.with_suffix(".index").read_bytes()
    assert time_index == log.with_suffix(".timeindex").read_bytes()


def test_kraft_metadata_written_by_kafka() -> None:
    batches = batches_of("kafka-written", "cluster-metadata-00000000000000000000.log")
    assert len(batches) == 2 and sum(b.record_count for b in batches) == 4
    assert sum(b.size_in_bytes for b in batches) == 331
    assert all(b.is_valid() for b in batches)


# ------------------------------------------------------------------------------------ 2. kafka-go
GO_LETTERS = {
    "a": "alpha", "b": "beta", "c": "gamma", "d": "delta", "e": "epsilon", "f": "zeta", "g": "eta", "h": "theta",
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("v1-v1", "abcd"),
        ("v1c-v1c", "abcd"),
        ("v1c-v1-v1c", "abcdef"),
        ("v2-v2", "abcd"),
        ("v2c-v2c", "abcd"),
        ("v2c-v2-v2c", "abcdef"),
        ("v2b-v1", "abab"),
        ("v2bc-v1", "abcd"),
        ("v2bc-v1c", "abab"),
        ("v2bc-v1-v1c", "abcdef"),
        ("v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc", "ababcdcdefefghghghgh"),
    ],
)
def test_kafka_go_fetch_record_sets(name: str, expected: str) -> None:
    batches = batches_of("public", "kafka-go", f"{name}.records.bin")
    assert all(b.is_valid() for b in batches)
    recs = [r for b in batches for r in b.records()]
    assert [(r.key, r.value) for r in recs] == [
        (GO_LETTERS[c].encode(), b'{"count":0,"filler":"' + c.encode() * 10 + b'"}') for c in expected
    ]
    assert [r.offset for r in recs] == list(range(len(expected)))


def test_kafka_go_magic1_wrapper_relative_offsets() -> None:
    batches = batches_of("public", "kafka-go", "v1c-v1c.records.bin")
    wrapper = batches[0]
    assert isinstance(wrapper, LegacyRecordBatch) and wrapper.magic == 1
    assert wrapper.compression_type is CompressionType.GZIP
    assert wrapper.last_offset == 1 and wrapper.base_offset == 0 and wrapper.record_count == 2
    assert wrapper.value[9] == 0  # java.util.zip gzip header OS byte


# ---------------------------------------------------------------------------------- 3. kafka-rust
def _fetch1_lines() -> list[bytes]:
    return fixture_path("public", "kafka-rust", "fetch1.txt").read_bytes().splitlines()


@pytest.mark.parametrize(
    ("name", "codec", "entries"),
    [
        ("fetch1.mytopic.1p.nocompression.kafka.0821", CompressionType.NONE, 42),
        ("fetch1.mytopic.1p.gzip.kafka.0821", CompressionType.GZIP, 1),
        ("fetch1.mytopic.1p.snappy.kafka.0821", CompressionType.SNAPPY, 1),
        ("fetch1.mytopic.1p.snappy.kafka.0822", CompressionType.SNAPPY, 1),
    ],
)
def test_kafka_rust_magic0_fetch1(name: str, codec: CompressionType, entries: int) -> None:
    batches = batches_of("public", "kafka-rust", f"{name}.messageset.bin")
    assert len(batches) == entries
    assert all(b.magic == 0 and b.compression_type is codec and b.is_valid() for b in batches)
    recs = [r for b in batches for r in b.records()]
    assert [r.offset for r in recs] == list(range(42))
    assert [r.value for r in recs] == _fetch1_lines()
    assert all(r.timestamp == -1 for r in recs)
    if codec is not CompressionType.NONE:
        assert batches[0].last_offset == 41 and batches[0].base_offset == 0


def test_kafka_rust_fetch2_and_invalid_crc() -> None:
    good = batches_of("public", "kafka-rust", "fetch2.mytopic.nocompression.kafka.0900.messageset.bin")
    assert len(good) == 1 and good[0].is_valid() and good[0].offset == 0
    assert good[0].records()[0].value == fixture_path(
        "public", "kafka-rust", "fetch2.txt"
    ).read_bytes().rstrip(b"\n")
    bad = batches_of(
        "public", "kafka-rust", "fetch2.mytopic.nocompression.invalid_crc.kafka.0900.messageset.bin"
    )
    assert not bad[0].is_valid()
    with pytest.raises(CorruptRecordError, match="crc") as info:
        bad[0].ensure_valid()
    assert info.value.position == 0 and "invalid_crc" in str(info.value)


def test_kafka_rust_bare_snappy_java_stream() -> None:
    data = fixture_path("public", "kafka-rust", "fetch1.snappy.chunked.4k").read_bytes()
    assert data[:16] == bytes.fromhex("82534e415050590000000001 00000001".replace(" ", ""))
    out = decompress(CompressionType.SNAPPY, data)
    assert out == fixture_path("public", "kafka-rust", "fetch1.txt").read_bytes()
    assert len(out) == 11528


# ------------------------------------------------------------------------------------- 4. rskafka
RS = ("public", "rskafka")
X100 = b"x" * 100


def _single(name: str):
    batches = batches_of(*RS, name)
    assert len(batches) == 1
    b = batches[0]
    assert b.is_valid()
    assert (b.base_offset, b.partition_leader_epoch, b.producer_id, b.producer_epoch, b.base_sequence) == (
        0, 0, -1, -1, -1,
    )  # fmt: skip
    assert b.timestamp_type is TimestampType.CREATE_TIME
    return b


@pytest.mark.parametrize(
    ("name", "codec", "key", "ts"),
    [
        ("gzip.batch.bin", CompressionType.GZIP, X100, 1643105170535),
        ("lz4.batch.bin", CompressionType.LZ4, X100, 1643649156900),
        ("snappy.batch.bin", CompressionType.SNAPPY, X100, 1643735486034),
        ("zstd.batch.bin", CompressionType.ZSTD, X100, 1643889882029),
        ("nocompression.batch.bin", CompressionType.NONE, b"", 1641388919),
    ],
)
def test_rskafka_single_record_batches(name: str, codec: CompressionType, key: bytes, ts: int) -> None:
    b = _single(name)
    assert b.compression_type is codec
    (r,) = b.records()
    assert (r.key, r.value, r.timestamp, r.offset) == (key, b"hello kafka", ts, 0)
    assert r.headers == (Header("foo", b"bar"),)


def test_rskafka_lz4_frame_header() -> None:
    b = _single("lz4.batch.bin")
    assert bytes(b.data[61:68]) == bytes.fromhex("04224d18604082")


def test_rskafka_raw_snappy_has_no_xerial_header() -> None:
    assert not bytes(_single("snappy.batch.bin").data[61:69]).startswith(b"\x82SNAPPY")


def test_rskafka_snappy_java_two_records() -> None:
    b = _single("snappy_java.batch.bin")
    assert bytes(b.data[61:69]) == b"\x82SNAPPY\x00" and b.last_offset_delta == 1
    recs = b.records()
    assert [(r.offset, r.key, r.value) for r in recs] == [(0, X100, b"hello kafka"), (1, X100, b"some value")]
    assert all(r.headers == (Header("foo", b"bar"),) and r.timestamp == 1645092371121 for r in recs)


def test_rskafka_null_key_batch() -> None:
    b = _single("null_key.batch.bin")
    (r,) = b.records()
    assert r.key is None and r.timestamp == 1643879633398
    assert r.headers == (
        Header(
            "content-type",
            b'application/x-protobuf; schema="influxdata.iox.write_buffer.v1.WriteBufferPayload"',
        ),
        Header("iox-namespace", b"namespace"),
    )


@pytest.mark.parametrize("name", ["nocompression.batch.bin", "null_key.batch.bin"])
def test_rskafka_reencode_is_byte_identical(name: str) -> None:
    b = _single(name)
    rebuilt = build_batch(
        b.records(),
        base_offset=b.base_offset,
        producer_id=b.producer_id,
        producer_epoch=b.producer_epoch,
        base_sequence=b.base_sequence,
        partition_leader_epoch=b.partition_leader_epoch,
    )
    assert rebuilt == fixture_path(*RS, name).read_bytes()


# -------------------------------------------------------------------------------- 5. kafka-python
KP = ("public", "kafka-python")


def test_kafka_python_v2() -> None:
    batches = batches_of(*KP, "record_batch_data_v2.bin")
    assert len(batches) == 4
    assert [b.base_offset for b in batches] == [0, 1, 3, 0]
    assert [b.partition_leader_epoch for b in batches] == [1, 2, 2, 0]
    recs = [b.records() for b in batches]
    assert [(r.value, r.key, r.timestamp, r.headers) for r in recs[0]] == [(b"123", None, 1503229838908, ())]
    assert batches[0].timestamp_type is TimestampType.CREATE_TIME
    assert [r.value for r in recs[1]] == [b"", b""]
    assert [r.value for r in recs[2]] == [b"123"]
    assert [(r.value, r.headers) for r in recs[3]] == [(b"hdr", (Header("hkey", b"hval"),))]
    # stated: with 4 zero bytes appended, 299 valid bytes out of 303
    padded = fixture_path(*KP, "record_batch_data_v2.bin").read_bytes() + b"\x00" * 4
    assert len(padded) == 303
    assert sum(b.size_in_bytes for _, b in iter_batches(padded, strict=False)) == 299
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        list(iter_batches(padded))
    assert info.value.position == 299


@pytest.mark.parametrize(
    ("name", "magic", "valid"), [("record_batch_data_v1.bin", 1, 142), ("record_batch_data_v0.bin", 0, 110)]
)
def test_kafka_python_legacy(name: str, magic: int, valid: int) -> None:
    batches = batches_of(*KP, name)
    assert all(b.magic == magic and b.is_valid() for b in batches)
    assert sum(b.size_in_bytes for b in batches) == valid
    recs = [r for b in batches for r in b.records()]
    assert [r.offset for r in recs] == [0, 1, 2, 3]
    assert [r.value for r in recs] == [b"123", b"", b"", b"123"]
    if magic == 1:
        assert recs[0].timestamp == 1503648000942 and batches[0].crc == 1199974594
        assert batches[0].timestamp_type is TimestampType.CREATE_TIME
    else:
        assert batches[0].timestamp_type is TimestampType.NO_TIMESTAMP_TYPE
