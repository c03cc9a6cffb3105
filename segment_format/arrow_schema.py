"""The Arrow schema of decoded Kafka records, shared by the columnar decoder and the Spark reader.

One row per record. Record fields come first (what a consumer sees), then the fields of the batch that
holds the record (what a reader needs to filter control records, aborted transactions or epochs).
Control records are rows too (``is_control`` True) so callers decide whether to drop them.

Why these types: ``binary`` / ``string`` with 32-bit offsets, not the ``large_`` variants, because
Spark's Arrow reader wants exactly ``binary`` (its Arrow-to-Spark type mapping), so a decoder splits its output into
several record batches before any column passes 2 GiB. Timestamps stay Kafka's int64 milliseconds;
the Spark reader converts to ``timestamp('us', tz='UTC')`` itself.
"""

from __future__ import annotations

import pyarrow as pa

from segment_format.records import TimestampType  # the ids stored in ``timestamp_type``

__all__ = [
    "HEADER_TYPE",
    "HEADERS_TYPE",
    "RECORD_SCHEMA",
    "TimestampType",
    "empty_record_batch",
]


#: One record header: Kafka header keys are non-null UTF-8 strings, values nullable bytes.
HEADER_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
#: A record's headers, in record order; an empty list (never null) when the record has none.
HEADERS_TYPE = pa.list_(pa.field("item", HEADER_TYPE, nullable=False))

RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE, nullable=False),
        pa.field("partition_leader_epoch", pa.int32(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int16(), nullable=False),
        pa.field("base_sequence", pa.int32(), nullable=False),
        pa.field("is_transactional", pa.bool_(), nullable=False),
        pa.field("is_control", pa.bool_(), nullable=False),
        pa.field("batch_base_offset", pa.int64(), nullable=False),
    ]
)


def empty_record_batch() -> pa.RecordBatch:
    """A zero-row batch with :data:`RECORD_SCHEMA`, for empty inputs."""
    return pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)
