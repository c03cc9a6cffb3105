"""Records as the Arrow batches a vectorised policy sees: the decoder's projection for a policy's hints, and
the batch built from record proxies (a vectorised policy's per-record entry)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from rsm.validation.values import RecordIntrospectionHints, RecordProxy
from segment_format.projection import Projection

#: The rows a policy that reads nothing of a record sees: one per record batch.
BATCH_ROW_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("last_offset", pa.int64(), nullable=False),
        pa.field("record_count", pa.int64(), nullable=False),
    ]
)


def _byte_count(n: int) -> int:
    """A hint's byte count for the decoder: -1 for all (any negative, or Java's Long.MAX_VALUE)."""
    return -1 if n < 0 or n >= 2**31 - 1 else int(n)


def projection_for(hints: RecordIntrospectionHints) -> Projection:
    """What the decoder materialises for a policy: the hinted headers, key bytes and value bytes only."""
    return Projection(
        key_bytes=_byte_count(hints.access_key_bytes),
        value_bytes=_byte_count(hints.access_value_bytes),
        headers=bool(hints.access_headers),
        batch_fields=False,
        control=False,
    )


def _cut(data: bytes | None, n: int) -> bytes | None:
    return data if data is None or n < 0 else data[:n]


def proxies_to_batch(records: Sequence[RecordProxy], hints: RecordIntrospectionHints) -> pa.RecordBatch:
    """Records as the Arrow batch a vectorised policy with these hints sees (for its per-record entry)."""
    projection = projection_for(hints)
    schema = projection.schema if hints.needs_records else BATCH_ROW_SCHEMA
    columns: dict[str, list[Any]] = {
        "offset": [r.offset for r in records],
        "timestamp": [r.timestamp for r in records],
        "last_offset": [r.offset for r in records],
        "record_count": [1 for _ in records],
        "key": [_cut(r.key, projection.key_bytes) for r in records],
        "value": [_cut(r.value, projection.value_bytes) for r in records],
        "headers": [[{"key": h.key, "value": h.value} for h in r.headers] for r in records],
    }
    return pa.RecordBatch.from_pydict({name: columns[name] for name in schema.names}, schema=schema)
