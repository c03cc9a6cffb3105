"""The rows: exactly Spark's Kafka source schema, built from the columnar decoder's Arrow batches.

Spark's Kafka source (KafkaRecordToRowConverter) yields `key` binary, `value` binary, `topic` string,
`partition` int, `offset` long, `timestamp` timestamp, `timestampType` int, and with `includeHeaders`
`headers` array<struct<key string, value binary>> (null for a record without headers); every field
nullable. Spark's Arrow reader wants each yielded batch to match `to_arrow_schema(schema)` exactly
(`binary`, not `large_binary`; `timestamp('us', tz='UTC')`), so the conversion below re-types the
decoder's columns without copying keys, values or headers (their buffers are reused as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segment_format.projection import Projection

VIOLATION_COLUMN = "violation"

HEADERS_ARROW_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))


def spark_schema(include_headers: bool, with_violation: bool = False):  # -> pyspark StructType
    """The DataFrame schema (Spark's Kafka source's, plus `violation` for violations=flag)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    if with_violation:
        fields.append(StructField(VIOLATION_COLUMN, StringType()))
    return StructType(fields)


def arrow_schema(include_headers: bool, with_violation: bool = False) -> pa.Schema:
    """`to_arrow_schema(spark_schema(...), timezone='UTC')`, without importing pyspark on executors."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_ARROW_TYPE))
    if with_violation:
        fields.append(pa.field(VIOLATION_COLUMN, pa.string()))
    return pa.schema(fields)


def decoder_projection(
    columns: Sequence[str] | None, include_headers: bool, *, batch_fields: bool = True
) -> Projection:
    """What the columnar decoder must materialise for these output columns (None: every column): a key,
    value or headers column the query does not use is never copied (the columnar scan's pruning), for a
    store chunk and a broker range alike. `batch_fields`: whether the caller's rules read the per-row
    batch columns (the store path's filter does; the brokers' path only for read_committed, which
    `brokerwire.arrow` asks for itself); they are decoded anyway when the output has `timestampType`."""
    wanted = {"key", "value", "headers", "timestampType"} if columns is None else set(columns)
    return Projection(
        key_bytes=-1 if "key" in wanted else 0,
        value_bytes=-1 if "value" in wanted else 0,
        headers=include_headers and "headers" in wanted,
        batch_fields=batch_fields or "timestampType" in wanted,
    )


def constant_string(value: str, n: int) -> pa.Array:
    """A string column of `n` copies of `value`, built from two buffers (no Python loop)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _headers(column: pa.Array) -> pa.Array:
    """The decoder's header lists re-typed as Spark's nullable array<struct<...>> (headers not copied),
    null for a record without headers: Spark's Kafka source (KafkaRecordToRowConverter) gives null there,
    not an empty array, and a query such as `where headers is null` must mean the same on both."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    items, offsets = column.values, column.offsets
    if column.offset:  # a slice (a fetch's window): its offsets rebased onto its own items, as Arrow needs
        first = offsets[0].as_py()
        items = items.slice(first, offsets[-1].as_py() - first)
        offsets = pa.array(offsets.to_numpy() - np.int32(first), pa.int32())
    struct = pa.StructArray.from_arrays([items.field("key"), items.field("value")], names=["key", "value"])
    empty = pc.equal(pc.list_value_length(column), 0)
    return pa.ListArray.from_arrays(offsets, struct, type=HEADERS_ARROW_TYPE, mask=empty)


def to_spark_batch(
    batch: pa.RecordBatch,
    topic: str,
    partition: int,
    include_headers: bool,
    violation: pa.Array | None = None,
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """A decoder batch (RECORD_SCHEMA rows, already filtered) as a batch of the source's schema, or of
    those of its `columns` asked for, in that order (the columnar scan's pruning: others are not built)."""
    n = batch.num_rows
    build: dict[str, Callable[[], pa.Array]] = {
        "key": lambda: batch.column("key"),
        "value": lambda: batch.column("value"),
        "topic": lambda: constant_string(topic, n),
        "partition": lambda: pa.array(np.full(n, partition, dtype=np.int32)),
        "offset": lambda: batch.column("offset"),
        "timestamp": lambda: pc.multiply(batch.column("timestamp"), 1000).view(pa.timestamp("us", tz="UTC")),
        "timestampType": lambda: batch.column("timestamp_type").cast(pa.int32()),
        "headers": lambda: _headers(batch.column("headers")),
        VIOLATION_COLUMN: lambda: violation,
    }
    schema = arrow_schema(include_headers, violation is not None)
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns])
    return pa.RecordBatch.from_arrays([build[name]() for name in schema.names], schema=schema)
