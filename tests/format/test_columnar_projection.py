"""Projections of the columnar decoder (what of each record is materialised): C kernel against the reference.

A record validation policy's hints become a :class:`segment_format.columnar.Projection`; the kernel must
return exactly what the pure-Python reference returns for the same projection, on every codec, and the
projected table must be the full table with columns left out and keys/values cut.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_columnar import Batch, Rec, _first_record_edit, _sample, _varint, batches, written_segments

from segment_format.codecs import CompressionType
from segment_format.columnar import (
    FULL,
    RECORD_SCHEMA,
    ChunkDecoder,
    Projection,
    decode_batches,
    decode_reference,
    iter_record_batches,
    iter_stream_record_batches,
)
from segment_format.errors import CorruptRecordError
from segment_format.projection import BATCH_FIELDS

projections = st.builds(
    Projection,
    key_bytes=st.sampled_from([-1, 0, 1, 3, 1000]),
    value_bytes=st.sampled_from([-1, 0, 1, 5, 1000]),
    headers=st.booleans(),
    batch_fields=st.booleans(),
    control=st.booleans(),
)


def _expected(full: pa.RecordBatch, projection: Projection) -> pa.RecordBatch:
    """The full table as the projection defines it: control rows dropped, columns left out, bytes cut."""
    if not projection.control:
        full = full.filter(pc.invert(full.column("is_control")))
    columns = []
    for name in projection.names:
        column = full.column(name)
        n = {"key": projection.key_bytes, "value": projection.value_bytes}.get(name, -1)
        if n > 0:
            column = pa.array([None if v is None else v[:n] for v in column.to_pylist()], pa.binary())
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=projection.schema)


def test_schema_of_a_projection() -> None:
    assert FULL.schema == RECORD_SCHEMA
    assert Projection(key_bytes=-5).key_bytes == -1
    p = Projection(key_bytes=0, value_bytes=5, headers=False, batch_fields=False)
    assert p.names == ("offset", "timestamp", "value")
    assert Projection(value_bytes=0).names == tuple(n for n in RECORD_SCHEMA.names if n != "value")
    assert set(BATCH_FIELDS) <= set(RECORD_SCHEMA.names)
    with pytest.raises(TypeError):
        Projection(key_bytes=True)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_every_projection_every_codec(codec: CompressionType) -> None:
    spec = [
        Batch(
            10,
            [
                Rec(i, i, b"key-%d" % i, b"value-%d-%s" % (i, b"x" * i), [("h", b"v"), ("g", None)])
                for i in range(7)
            ],
            codec=codec,
        ),  # fmt: skip
        Batch(
            17,
            [Rec(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05")],
            control=True,
            transactional=True,
        ),
        Batch(18, [Rec(0, 0, None, None), Rec(2, 1, b"", b"")], codec=codec),
    ]
    data = b"".join(b.encode() for b in spec)
    full = decode_batches(data)
    for kb in (-1, 0, 2, 100):
        for vb in (-1, 0, 5):
            for headers in (True, False):
                for meta in (True, False):
                    for control in (True, False):
                        p = Projection(kb, vb, headers, meta, control)
                        fast, ref = decode_batches(data, projection=p), decode_reference(data, projection=p)
                        fast.validate(full=True)
                        assert fast.schema == p.schema
                        assert fast.equals(ref), p
                        assert fast.equals(_expected(full, p)), p


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), projections)
def test_generated_projection_equals_reference(spec: list[Batch], projection: Projection) -> None:
    data = b"".join(b.encode() for b in spec)
    fast = decode_batches(data, projection=projection)
    fast.validate(full=True)
    assert fast.equals(decode_reference(data, projection=projection))
    assert fast.equals(_expected(decode_batches(data), projection))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), projections, st.integers(1, 5), st.integers(0, 30))
def test_projection_with_limits(
    spec: list[Batch], projection: Projection, per_batch: int, max_rows: int
) -> None:
    data = b"".join(b.encode() for b in spec)
    whole = decode_batches(data, projection=projection)
    parts = list(iter_record_batches(data, rows_per_batch=per_batch, projection=projection))
    assert pa.Table.from_batches(parts, schema=projection.schema).equals(pa.Table.from_batches([whole]))
    assert decode_batches(data, max_rows=max_rows, projection=projection).equals(whole.slice(0, max_rows))
    biggest = max(
        [len(r.key or b"") for b in spec for r in b.records]
        + [len(r.value or b"") for b in spec for r in b.records]
        + [sum(len(k.encode()) + len(v or b"") for k, v in r.headers) for b in spec for r in b.records]
        + [64]
    )  # a single record above the column limit is an error by design
    tiny = list(iter_record_batches(data, max_column_bytes=biggest, projection=projection))
    if tiny:
        assert pa.Table.from_batches(tiny, schema=projection.schema).equals(pa.Table.from_batches([whole]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written_segments(), projections, st.integers(1, 300))
def test_stream_projection_with_legacy_entries(segment, projection: Projection, read_size: int) -> None:  # type: ignore[no-untyped-def]
    raw, _ = segment
    whole = decode_batches(raw, projection=projection)
    assert whole.equals(decode_reference(raw, projection=projection))
    streamed = list(iter_stream_record_batches(io.BytesIO(raw), read_size=read_size, projection=projection))
    assert pa.Table.from_batches(streamed, schema=projection.schema).equals(pa.Table.from_batches([whole]))


@pytest.mark.parametrize(
    "edit",
    [
        _varint(8) + b"\x00\x00\x00" + _varint(40) + b"k" + _varint(1) + b"v" + _varint(0),  # key too long
        _varint(7) + b"\x00\x00\x00" + _varint(1) + b"k" + _varint(1) + b"v",  # header count missing
        _varint(6) + b"\x00\x00\x00\x00\x00\x01",  # header count 1 without header
    ],
)
def test_malformed_records_refused_under_any_projection(edit: bytes) -> None:
    """The record walk is whole whatever is materialised: a malformed record is refused the same way."""
    data = _first_record_edit(edit)
    with pytest.raises(CorruptRecordError) as full:
        decode_batches(data)
    for p in (
        Projection(0, 0, False, False),
        Projection(key_bytes=1, value_bytes=1),
        Projection(headers=False),
    ):
        with pytest.raises(CorruptRecordError) as projected:
            decode_batches(data, projection=p)
        assert (projected.value.position, projected.value.reason) == (full.value.position, full.value.reason)
        with pytest.raises(CorruptRecordError):
            decode_reference(data, projection=p)


def test_no_projection_is_unchanged() -> None:
    data = _sample()
    assert decode_batches(data).equals(decode_batches(data, projection=FULL))
    assert decode_batches(data).schema == RECORD_SCHEMA


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(written_segments(), projections, st.lists(st.integers(1, 300), min_size=1, max_size=20))
def test_chunk_decoder_over_a_reused_buffer(segment, projection: Projection, cuts: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Chunks cut anywhere, handed in one buffer that is overwritten after each call (as the RSM's copy
    reads a file): the same table as decoding the whole, nothing kept that points into the buffer."""
    raw, _ = segment
    whole = decode_batches(raw, projection=projection)
    decoder = ChunkDecoder(projection=projection, file="s.log", base_position=7)
    buffer = bytearray(max(cuts))
    parts: list[pa.RecordBatch] = []
    position, i = 0, 0
    while position < len(raw):
        size = cuts[i % len(cuts)]
        piece = raw[position : position + size]
        buffer[: len(piece)] = piece
        parts += decoder.feed(memoryview(buffer)[: len(piece)])
        buffer[:] = b"\xee" * len(buffer)
        position += len(piece)
        i += 1
    parts += decoder.finish()
    assert decoder.position == 7 + len(raw)
    assert pa.Table.from_batches(parts, schema=projection.schema).equals(pa.Table.from_batches([whole]))


def test_chunk_decoder_refuses_a_truncated_end() -> None:
    raw = _sample()
    decoder = ChunkDecoder(file="s.log", base_position=100)
    assert decoder.feed(raw[:-5])
    with pytest.raises(CorruptRecordError) as info:
        decoder.finish()
    assert info.value.file == "s.log" and info.value.position == 100 + 2 * len(raw) // 3
