"""The columnar fast path (C kernel) against the pure-Python reference, real fixtures and kafka-python."""

from __future__ import annotations

import contextlib
import io
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import pyarrow as pa
import pytest
from fixtures_data import FIXTURES, fixture_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_format import _native
from segment_format.arrow_schema import RECORD_SCHEMA, TimestampType
from segment_format.codecs import CompressionType, compress
from segment_format.columnar import (
    decode_batches,
    decode_reference,
    iter_record_batches,
    iter_stream_record_batches,
)
from segment_format.errors import CorruptRecordError
from segment_format.kernel_arrays import header_key, lenient_utf8

CORRUPT_FIXTURE = "fetch2.mytopic.nocompression.invalid_crc.kafka.0900.messageset.bin"


# ----------------------------------------------------------------------------------------------------
# An encoder written from Kafka's format description, independent of segment_format.writer.


def _varint(value: int) -> bytes:
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _sized(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


@dataclass
class Rec:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str | bytes, bytes | None]] = field(default_factory=list)

    def encode(self) -> bytes:
        body = b"\x00" + _varint(self.timestamp_delta) + _varint(self.offset_delta)
        body += _sized(self.key) + _sized(self.value) + _varint(len(self.headers))
        for key, value in self.headers:
            body += _sized(key if isinstance(key, bytes) else key.encode()) + _sized(value)
        return _varint(len(body)) + body


@dataclass
class Batch:
    base_offset: int
    records: list[Rec]
    codec: CompressionType = CompressionType.NONE
    transactional: bool = False
    control: bool = False
    log_append_time: bool = False
    base_timestamp: int = 1_700_000_000_000
    max_timestamp: int = 1_700_000_000_500
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    leader_epoch: int = 0

    def encode(self) -> bytes:
        payload = b"".join(r.encode() for r in self.records)
        if self.codec is not CompressionType.NONE:
            payload = compress(self.codec, payload, magic=2)
        attributes = int(self.codec) | (
            (0x08 if self.log_append_time else 0)
            | (0x10 if self.transactional else 0)
            | (0x20 if self.control else 0)
        )
        last_delta = max((r.offset_delta for r in self.records), default=0)
        after_crc = struct.pack(
            ">hiqqqhii",
            attributes,
            last_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(self.records),
        )
        after_crc += payload
        body = struct.pack(">ibI", self.leader_epoch, 2, crc32c.crc32c(after_crc)) + after_crc
        return struct.pack(">qi", self.base_offset, len(body)) + body


def _resign(batch: bytearray, position: int = 0) -> None:
    """Recompute the CRC of the batch at ``position`` after a deliberate edit."""
    (length,) = struct.unpack_from(">i", batch, position + 8)
    crc = crc32c.crc32c(bytes(batch[position + 21 : position + 12 + length]))
    struct.pack_into(">I", batch, position + 17, crc)


def _assert_same(fast: pa.RecordBatch, ref: pa.RecordBatch) -> None:
    assert fast.schema == RECORD_SCHEMA
    assert ref.schema == RECORD_SCHEMA
    fast.validate(full=True)
    assert fast.num_rows == ref.num_rows
    assert fast.equals(ref), (fast.to_pylist()[:3], ref.to_pylist()[:3])


# ----------------------------------------------------------------------------------------------------
# Real fixtures


def _fixture_files() -> list[Path]:
    public = FIXTURES / "public"
    files = sorted(FIXTURES.glob("kafka-written/*.log"))
    files += sorted(public.glob("segments/**/*.log"))
    files += sorted(public.glob("kafka-go/*.records.bin"))
    files += sorted(public.glob("kafka-rust/*.messageset.bin"))
    files += sorted(public.glob("rskafka/*.bin"))
    files += sorted(public.glob("kafka-python/*.bin"))
    return [f for f in files if f.name != CORRUPT_FIXTURE]


FIXTURE_FILES = _fixture_files()


def test_fixture_files_are_there() -> None:
    """The parametrised fixture tests below must not quietly collect nothing (fails under CI)."""
    fixture_path("public")
    assert len(FIXTURE_FILES) > 20


@pytest.mark.skipif(not FIXTURE_FILES, reason="shared fixtures not present")
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_fast_path_equals_reference(path: Path) -> None:
    data = path.read_bytes()
    ref = decode_reference(data, file=str(path))
    fast = decode_batches(data, file=str(path))
    assert ref.num_rows > 0
    _assert_same(fast, ref)
    # Offsets never go backwards within a real log or record set.
    offsets = fast.column("offset").to_pylist()
    assert offsets == sorted(offsets) or "kafka-python" in str(path)


def _fixture(rel: str) -> bytes:
    return fixture_path(rel).read_bytes()


def test_fixture_values_as_stated_by_sources() -> None:
    demo = decode_batches(
        _fixture("public/segments/NikhilDighe9975_kafka_setup/nikhilDemo-0/00000000000000000000.log")
    )
    assert demo.column("value").to_pylist() == [b"hi", b"hi", b"i"]
    assert demo.column("key").to_pylist() == [None, None, None]
    assert demo.column("offset").to_pylist() == [0, 1, 2]
    assert demo.column("timestamp").to_pylist() == [1722856846589, 1722857164633, 1722857166514]
    assert demo.column("producer_id").to_pylist() == [7000, 10000, 10000]
    assert demo.column("base_sequence").to_pylist() == [0, 0, 1]
    assert set(demo.column("timestamp_type").to_pylist()) == {TimestampType.CREATE_TIME}

    plain = decode_batches(_fixture("public/rskafka/nocompression.batch.bin")).to_pylist()
    assert plain[0]["key"] == b""  # empty, not null
    assert plain[0]["value"] == b"hello kafka"
    assert plain[0]["headers"] == [{"key": "foo", "value": b"bar"}]
    java_snappy = decode_batches(_fixture("public/rskafka/snappy_java.batch.bin")).to_pylist()
    assert [r["value"] for r in java_snappy] == [b"hello kafka", b"some value"]
    assert [r["offset"] for r in java_snappy] == [0, 1]
    null_key = decode_batches(_fixture("public/rskafka/null_key.batch.bin")).to_pylist()[0]
    assert null_key["key"] is None
    assert [h["key"] for h in null_key["headers"]] == ["content-type", "iox-namespace"]
    for codec in ("gzip", "lz4", "snappy", "zstd"):
        row = decode_batches(_fixture(f"public/rskafka/{codec}.batch.bin")).to_pylist()[0]
        assert (row["key"], row["value"]) == (b"x" * 100, b"hello kafka"), codec

    metadata = decode_batches(
        _fixture("public/segments/nomanazeem_Kafka-java/__cluster_metadata-0/00000000000000000000.log")
    )
    assert metadata.num_rows == 2067
    assert metadata.column("offset").to_pylist() == list(range(2067))
    first = metadata.slice(0, 1).to_pylist()[0]
    assert first["is_control"] is True and first["key"] == b"\x00\x00\x00\x02"  # LEADER_CHANGE
    assert not any(metadata.column("is_control").to_pylist()[1:2])

    lines = _fixture("public/kafka-rust/fetch1.txt").decode().splitlines()
    for name in ("nocompression", "gzip"):
        rows = decode_batches(
            _fixture(f"public/kafka-rust/fetch1.mytopic.1p.{name}.kafka.0821.messageset.bin")
        )
        assert [v.decode() for v in rows.column("value").to_pylist()] == lines
        assert rows.column("offset").to_pylist() == list(range(42))
        assert set(rows.column("timestamp_type").to_pylist()) == {TimestampType.NO_TIMESTAMP_TYPE}

    mixed = decode_batches(_fixture("public/kafka-go/v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc.records.bin"))
    assert mixed.column("offset").to_pylist() == list(range(20))
    names = {"a": b"alpha", "b": b"beta", "c": b"gamma", "d": b"delta", "e": b"epsilon", "f": b"zeta"}
    names |= {"g": b"eta", "h": b"theta"}
    assert mixed.column("key").to_pylist() == [names[c] for c in "ababcdcdefefghghghgh"]


def test_corrupt_crc_fixture_refused_by_both_paths() -> None:
    data = _fixture(f"public/kafka-rust/{CORRUPT_FIXTURE}")
    for decode in (decode_batches, decode_reference):
        with pytest.raises(CorruptRecordError) as info:
            decode(data, file="bad.log")
        assert info.value.file == "bad.log"
        assert info.value.position == 0
        assert "crc" in info.value.reason.lower()
    # Without CRC checking both decode the same single message.
    _assert_same(decode_batches(data, verify_crc=False), decode_reference(data, verify_crc=False))


# ----------------------------------------------------------------------------------------------------
# Generated data


_key = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.lists(st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)


@st.composite
def batches(draw: st.DrawFn) -> list[Batch]:
    out = []
    offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 12))
        control = draw(st.booleans()) and n > 0
        records = []
        for i in range(n):
            if control:
                key = struct.pack(">hh", 0, draw(st.sampled_from([0, 1, 2])))
                value: bytes | None = struct.pack(">hi", 0, draw(st.integers(0, 100)))
                hdrs: list[tuple[str, bytes | None]] = []
            else:
                key, value, hdrs = draw(_key), draw(_key), draw(_headers)
            records.append(Rec(i, draw(st.integers(-(2**20), 2**33)), key, value, hdrs))
        txn = control or draw(st.booleans())
        base_ts = draw(st.integers(0, 2**42))
        out.append(
            Batch(
                offset,
                records,
                codec=draw(st.sampled_from(list(CompressionType))),
                transactional=txn,
                control=control,
                log_append_time=draw(st.booleans()),
                base_timestamp=base_ts,
                max_timestamp=base_ts + draw(st.integers(0, 10_000)),
                producer_id=draw(st.integers(-1, 2**62)) if txn or draw(st.booleans()) else -1,
                producer_epoch=draw(st.integers(-1, 32767)),
                base_sequence=draw(st.integers(-1, 2**31 - 1)),
                leader_epoch=draw(st.integers(-1, 2**31 - 1)),
            )
        )
        offset += max(n, 1)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_generated_fast_path_equals_reference(spec: list[Batch]) -> None:
    data = b"".join(b.encode() for b in spec)
    ref = decode_reference(data)
    fast = decode_batches(data)
    _assert_same(fast, ref)
    # And both say what was written.
    expected = []
    for b in spec:
        for r in b.records:
            ts = b.max_timestamp if b.log_append_time else b.base_timestamp + r.timestamp_delta
            expected.append((b.base_offset + r.offset_delta, ts, r.key, r.value, b.control, b.transactional))
    rows = fast.to_pylist()
    got = [
        (r["offset"], r["timestamp"], r["key"], r["value"], r["is_control"], r["is_transactional"])
        for r in rows
    ]
    assert got == expected
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        list(r.headers) for b in spec for r in b.records
    ]


@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(0, 60), st.integers(1, 7), st.integers(1, 200))
def test_max_rows_and_splitting(spec: list[Batch], max_rows: int, per_batch: int, column_bytes: int) -> None:
    data = b"".join(b.encode() for b in spec)
    ref = decode_reference(data)
    _assert_same(decode_batches(data, max_rows=max_rows), ref.slice(0, max_rows))
    assert decode_reference(data, max_rows=max_rows).equals(ref.slice(0, max_rows))
    parts = list(iter_record_batches(data, rows_per_batch=per_batch))
    assert all(0 < p.num_rows <= per_batch for p in parts)
    assert pa.Table.from_batches(parts, schema=RECORD_SCHEMA).equals(pa.Table.from_batches([ref]))
    # A tiny column limit forces a new RecordBatch before a key/value/header column passes it.
    biggest = max(
        [len(r.key or b"") for b in spec for r in b.records]
        + [len(r.value or b"") for b in spec for r in b.records]
        + [sum(len(k.encode()) for k, _ in r.headers) for b in spec for r in b.records]
        + [sum(len(v or b"") for _, v in r.headers) for b in spec for r in b.records]
        + [0]
    )
    limit = max(column_bytes, biggest)
    parts = list(iter_record_batches(data, max_column_bytes=limit))
    for p in parts:
        for name in ("key", "value"):
            assert p.column(name).nbytes - 4 * (p.num_rows + 1) <= limit + (p.num_rows + 7) // 8
    assert pa.Table.from_batches(parts, schema=RECORD_SCHEMA).equals(pa.Table.from_batches([ref]))


def test_empty_input_and_empty_batch() -> None:
    assert decode_batches(b"").num_rows == 0
    assert decode_batches(b"").schema == RECORD_SCHEMA
    empty = Batch(5, []).encode()
    _assert_same(decode_batches(empty), decode_reference(empty))


def test_single_record_above_column_limit_is_an_error() -> None:
    data = Batch(0, [Rec(0, 0, None, b"x" * 100)]).encode()
    with pytest.raises(CorruptRecordError, match="column limit"):
        list(iter_record_batches(data, max_column_bytes=10))


def test_log_append_time_uses_max_timestamp() -> None:
    batch = Batch(10, [Rec(0, 5, b"k", b"v"), Rec(1, 9, None, None)], log_append_time=True, max_timestamp=42)
    rows = decode_batches(batch.encode()).to_pylist()
    assert [r["timestamp"] for r in rows] == [42, 42]
    assert [r["timestamp_type"] for r in rows] == [TimestampType.LOG_APPEND_TIME] * 2


# ----------------------------------------------------------------------------------------------------
# Corrupt input


def _sample() -> bytes:
    return b"".join(
        Batch(i * 3, [Rec(j, j, b"key%d" % j, b"value-%d" % j, [("h", b"v")]) for j in range(3)]).encode()
        for i in range(3)
    )


def _both_raise(data: bytes, **kwargs: object) -> tuple[CorruptRecordError, CorruptRecordError]:
    errors = []
    for decode in (decode_batches, decode_reference):
        with pytest.raises(CorruptRecordError) as info:
            decode(data, file="x.log", base_position=1000, **kwargs)
        assert info.value.file == "x.log"
        assert info.value.position is not None
        errors.append(info.value)
    return errors[0], errors[1]


def test_truncated_input() -> None:
    data = _sample()
    batch_len = len(data) // 3
    for cut in (1, 16, 40, len(data) - batch_len + 20, len(data) - 1):
        fast, ref = _both_raise(data[:cut])
        start = (cut // batch_len) * batch_len
        assert fast.position == ref.position == 1000 + start
        assert "truncated" in fast.reason


def test_bad_crc() -> None:
    data = bytearray(_sample())
    data[len(data) - 3] ^= 0xFF  # last batch's last record
    fast, ref = _both_raise(bytes(data))
    assert fast.position == ref.position == 1000 + 2 * len(data) // 3
    assert "crc" in fast.reason.lower()


def _first_record_edit(edit: bytes) -> bytes:
    batch = bytearray(Batch(0, [Rec(0, 0, b"k", b"v")]).encode())
    batch[61:] = edit
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _resign(batch)
    return bytes(batch)


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 4, "varint"),  # record length varint longer than 5 bytes
        (b"\x7e" + b"\x00" * 9, "length"),  # record length 63 but 9 bytes follow
        (_varint(8) + b"\x00\x00\x00" + _varint(40) + b"k" + _varint(1) + b"v" + _varint(0), "key"),
        (
            _varint(7) + b"\x00\x00\x00" + _varint(1) + b"k" + _varint(1) + b"v",
            "header",
        ),  # header count missing
        (_varint(6) + b"\x00\x00\x00\x00\x00\x01", "header"),  # header count 1 without header
    ],
)
def test_malformed_records(edit: bytes, reason: str) -> None:
    data = _first_record_edit(edit)
    fast, ref = _both_raise(data)
    assert 1000 <= fast.position < 1000 + len(data)
    assert 1000 <= ref.position <= 1000 + len(data)  # may point at the missing byte
    assert reason in fast.reason.lower()


def test_header_key_bad_utf8_is_replaced_like_java() -> None:
    """Java reads header keys with new String(bytes, UTF_8): malformed bytes become U+FFFD."""
    record = _varint(1) + b"\xff" + _varint(-1) + _varint(2) + b"ok" + _varint(1) + b"v"
    data = _first_record_edit(_varint(6 + len(record)) + b"\x00\x00\x00\x00\x00\x04" + record)
    fast, ref = decode_batches(data), decode_reference(data)
    _assert_same(fast, ref)
    assert fast.column("headers").to_pylist() == [
        [{"key": "\ufffd", "value": None}, {"key": "ok", "value": b"v"}]
    ]
    # segment_format.records keeps bad bytes as surrogate escapes; the columnar rows show Java's string
    kept = b"\xffk\xc3\xa9".decode("utf-8", "surrogateescape")
    assert header_key(kept) == lenient_utf8(b"\xffk\xc3\xa9") == "\ufffdk\u00e9"
    assert header_key("ascii") == "ascii"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=6))
def test_header_keys_any_bytes(keys: list[bytes]) -> None:
    """Any header key bytes: the kernel's UTF-8 check agrees with Python's decoder."""
    data = Batch(0, [Rec(0, 0, None, b"v", [(k, None) for k in keys])]).encode()
    fast = decode_batches(data)
    _assert_same(fast, decode_reference(data))
    assert [h["key"] for h in fast.column("headers").to_pylist()[0]] == [
        k.decode("utf-8", "replace") for k in keys
    ]


def test_bogus_record_count_allocates_nothing() -> None:
    batch = bytearray(Batch(0, [Rec(0, 0, b"k", b"v")]).encode())
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    _resign(batch)
    fast, _ = _both_raise(bytes(batch))
    assert fast.position == 1000 + 57


def test_bad_magic_and_short_length() -> None:
    batch = bytearray(Batch(0, [Rec(0, 0, b"k", b"v")]).encode())
    batch[16] = 7
    fast, ref = _both_raise(bytes(batch))
    assert fast.position == ref.position == 1016
    batch[16] = 2
    struct.pack_into(">i", batch, 8, 20)
    fast, ref = _both_raise(bytes(batch))
    assert fast.position == ref.position == 1008


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_corrupt_compressed_payload(codec: CompressionType) -> None:
    batch = bytearray(Batch(0, [Rec(0, 0, b"k", b"v" * 200)], codec=codec).encode())
    del batch[61 + 8 :]  # keep only the first bytes of the compressed stream
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _resign(batch)
    fast, ref = _both_raise(bytes(batch))
    assert fast.position == 1000


@settings(max_examples=300, deadline=None)
@given(batches(), st.data())
def test_fuzz_byte_flips_agree(spec: list[Batch], data: st.DataObject) -> None:
    """Random edits (CRC not checked, so record parsing is reached): both paths fail or agree."""
    raw = bytearray(b"".join(b.encode() for b in spec))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
    results = []
    for decode in (decode_batches, decode_reference):
        try:
            results.append(decode(bytes(raw), verify_crc=False))
        except CorruptRecordError as exc:
            assert exc.position is not None
            results.append(None)
    fast, ref = results
    if fast is None or ref is None:
        assert fast is None and ref is None
    else:
        _assert_same(fast, ref)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes_never_crash(raw: bytes) -> None:
    for verify in (True, False):
        with contextlib.suppress(CorruptRecordError):
            decode_batches(raw, verify_crc=verify).validate(full=True)


# ----------------------------------------------------------------------------------------------------
# kafka-python's builder as an independent writer; the kernel's own CRC


@pytest.mark.parametrize("codec", [0, 1])  # kafka-python needs extra libraries for snappy/lz4/zstd
def test_kafka_python_builder(codec: int) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=True,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        batch_size=1 << 20,
    )
    expected = []
    for i in range(50):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 0 else os.urandom(i * 3)
        headers = [("n", b"%d" % i), ("empty", None)] if i % 2 else []
        builder.append(i, 1_600_000_000_000 + i, key, value, headers)
        expected.append((i, 1_600_000_000_000 + i, key, value, [(k, v) for k, v in headers]))
    data = bytes(builder.build())
    fast = decode_batches(data)
    _assert_same(fast, decode_reference(data))
    rows = fast.to_pylist()
    got = [
        (r["offset"], r["timestamp"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
        for r in rows
    ]
    assert got == expected
    assert {
        (r["producer_id"], r["producer_epoch"], r["base_sequence"], r["is_transactional"]) for r in rows
    } == {(42, 3, 7, True)}


@pytest.mark.parametrize("hardware", [True, False])
def test_native_crc32c_matches_crc32c_package(hardware: bool) -> None:
    before = _native._set_crc32c_hardware(hardware)
    try:
        # sizes around the 3-way interleaved block lengths (3 x 256 and 3 x 8192 bytes)
        for size in (0, 1, 7, 8, 9, 63, 64, 65, 767, 768, 769, 4096, 24_575, 24_576, 24_577, 100_003):
            blob = os.urandom(size + 3)
            for view in (blob[3:], memoryview(blob)[1 : size + 1]):
                assert _native.crc32c(view) == crc32c.crc32c(bytes(view))
            assert _native.crc32c(blob[size // 2 :], _native.crc32c(blob[: size // 2])) == crc32c.crc32c(blob)
        data = b"".join(Batch(i, [Rec(0, 0, b"k", os.urandom(3000))]).encode() for i in range(20))
        assert decode_batches(data).num_rows == 20
    finally:
        _native._set_crc32c_hardware(before)


# ----------------------------------------------------------------------------------------------------
# segment_format.writer as the generator: magic-2 batches of every codec, end-transaction markers and
# legacy magic 0/1 message sets mixed in one range (the legacy entries go through the reference path).


@st.composite
def written_segments(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, bytes | None, bool]]]:
    from segment_format.records import ControlRecordType
    from segment_format.writer import build_batch, build_control_batch

    parts: list[bytes] = []
    expected: list[tuple[int, bytes | None, bool]] = []
    offset = draw(st.integers(0, 2**31))
    ts = 1_700_000_000_000
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["v2", "v2", "marker", "legacy"]))
        if kind == "marker":
            control = draw(st.sampled_from([ControlRecordType.COMMIT, ControlRecordType.ABORT]))
            parts.append(
                build_control_batch(
                    control, base_offset=offset, producer_id=9, producer_epoch=1, timestamp=ts
                )
            )
            expected.append((offset, control.key_bytes(0), True))
            offset += 1
            continue
        values = draw(st.lists(st.one_of(st.none(), st.binary(max_size=30)), min_size=1, max_size=8))
        keys = [b"k%d" % i for i in range(len(values))]
        if kind == "legacy":
            magic = draw(st.sampled_from([0, 1]))
            codec = draw(st.sampled_from([c for c in CompressionType if c is not CompressionType.ZSTD]))
            headers: list[list[tuple[str, bytes | None]]] = [[] for _ in values]
        else:
            magic = 2
            codec = draw(st.sampled_from(list(CompressionType)))
            headers = [draw(_headers) for _ in values]
        recs = [(k, v, h, ts + i) for i, (k, v, h) in enumerate(zip(keys, values, headers, strict=True))]
        parts.append(
            build_batch(
                recs,
                base_offset=offset,
                compression=codec,
                magic=magic,
                producer_id=-1 if magic < 2 else 5,
                is_transactional=magic == 2 and draw(st.booleans()),
            )
        )
        expected.extend((offset + i, k, False) for i, k in enumerate(keys))
        offset += len(values)
    return b"".join(parts), expected


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written_segments())
def test_writer_segments_with_legacy_and_markers(
    segment: tuple[bytes, list[tuple[int, bytes | None, bool]]],
) -> None:
    data, expected = segment
    fast = decode_batches(data)
    _assert_same(fast, decode_reference(data))
    got = list(
        zip(
            fast.column("offset").to_pylist(),
            fast.column("key").to_pylist(),
            fast.column("is_control").to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    for max_rows in (0, 1, len(expected) // 2, len(expected) - 1):
        _assert_same(decode_batches(data, max_rows=max_rows), fast.slice(0, max_rows))
        parts = list(iter_record_batches(data, rows_per_batch=3, max_rows=max_rows))
        assert pa.Table.from_batches(parts, schema=RECORD_SCHEMA).equals(
            pa.Table.from_batches([fast.slice(0, max_rows)])
        )


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        decode_batches(b"", max_rows=-1)
    with pytest.raises(ValueError):
        list(iter_record_batches(b"", rows_per_batch=0))


def test_buffers_outlive_later_decodes() -> None:
    """Column memory is owned by the arrays: decoding more data (reusing released memory) never
    changes a RecordBatch still alive, and the input bytes are not referenced."""
    first_input = bytearray(
        b"".join(
            Batch(i * 100, [Rec(j, j, b"a%d" % j, b"A" * 5000) for j in range(100)]).encode()
            for i in range(30)
        )
    )
    first = decode_batches(bytes(first_input))
    snapshot = first.to_pylist()
    first_input[:] = b"\x00" * len(first_input)
    other = b"".join(
        Batch(i * 100, [Rec(j, j, b"b", b"B" * 7000) for j in range(100)]).encode() for i in range(30)
    )
    for _ in range(5):
        decoded = decode_batches(other)
        assert decoded.column("value")[0].as_py() == b"B" * 7000
        del decoded
    first.validate(full=True)
    assert first.to_pylist() == snapshot


# ----------------------------------------------------------------------------------------------------
# Streaming: chunks that do not end on batch boundaries


def _table(parts: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(parts, schema=RECORD_SCHEMA)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written_segments(), st.lists(st.integers(1, 200), min_size=1, max_size=30), st.data())
def test_stream_chunks_equal_whole(
    segment: tuple[bytes, list[tuple[int, bytes | None, bool]]], cuts: list[int], data: st.DataObject
) -> None:
    raw, _ = segment
    whole = decode_batches(raw)
    chunks, position = [], 0
    for size in cuts:
        chunks.append(raw[position : position + size])
        position += size
    chunks.append(raw[position:])
    assert _table(list(iter_stream_record_batches(chunks))).equals(_table([whole]))
    read_size = data.draw(st.integers(1, 300))
    streamed = list(iter_stream_record_batches(io.BytesIO(raw), read_size=read_size, rows_per_batch=4))
    assert _table(streamed).equals(_table([whole]))
    max_rows = data.draw(st.integers(0, whole.num_rows))
    limited = list(iter_stream_record_batches(io.BytesIO(raw), read_size=read_size, max_rows=max_rows))
    assert _table(limited).equals(_table([whole.slice(0, max_rows)]))


def test_stream_truncated_at_end_is_an_error() -> None:
    raw = _sample()
    with pytest.raises(CorruptRecordError) as info:
        list(iter_stream_record_batches(io.BytesIO(raw[:-5]), file="s.log", base_position=500, read_size=7))
    assert info.value.file == "s.log"
    assert info.value.position == 500 + 2 * len(raw) // 3
    assert "truncated" in info.value.reason
