"""What a columnar decode materialises: the projection (which columns, how many key and value bytes, control
records or not) and the Arrow schema it gives; the full projection is every column of `RECORD_SCHEMA`."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from segment_format.arrow_schema import RECORD_SCHEMA, empty_record_batch

__all__ = ["BATCH_FIELDS", "FULL", "Projection", "empty_batch", "projected_schema"]


#: The columns that repeat a batch's own fields on every row of it.
BATCH_FIELDS = (
    "timestamp_type",
    "partition_leader_epoch",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "is_transactional",
    "is_control",
    "batch_base_offset",
)
_OPT_HEADERS, _OPT_META, _OPT_CONTROL = 1, 2, 4


@dataclass(frozen=True)
class Projection:
    """What of each record a decode materialises (the default: everything, :data:`RECORD_SCHEMA`).

    ``key_bytes`` / ``value_bytes``: -1 (any negative) the whole key / value, 0 none (the column is left
    out), n > 0 at most the first n bytes (nulls stay null). ``headers``: the ``headers`` column.
    ``batch_fields``: the per-row copies of batch fields (:data:`BATCH_FIELDS`). ``control``: rows for the
    records of control batches (transaction markers); without it those batches are skipped unread.
    ``offset`` and ``timestamp`` are always there.
    """

    key_bytes: int = -1
    value_bytes: int = -1
    headers: bool = True
    batch_fields: bool = True
    control: bool = True

    def __post_init__(self) -> None:
        for name in ("key_bytes", "value_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if value < 0:
                object.__setattr__(self, name, -1)

    @property
    def flags(self) -> int:
        return (
            (_OPT_HEADERS if self.headers else 0)
            | (_OPT_META if self.batch_fields else 0)
            | (_OPT_CONTROL if self.control else 0)
        )

    @property
    def schema(self) -> pa.Schema:
        return projected_schema(self)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.schema.names)


@functools.lru_cache(maxsize=64)
def projected_schema(projection: Projection) -> pa.Schema:
    drop = set()
    if projection.key_bytes == 0:
        drop.add("key")
    if projection.value_bytes == 0:
        drop.add("value")
    if not projection.headers:
        drop.add("headers")
    if not projection.batch_fields:
        drop.update(BATCH_FIELDS)
    return pa.schema([f for f in RECORD_SCHEMA if f.name not in drop])


#: Everything: the decoders' default.
FULL = Projection()


def empty_batch(projection: Projection) -> pa.RecordBatch:
    return (
        empty_record_batch()
        if projection == FULL
        else pa.RecordBatch.from_pylist([], schema=projection.schema)
    )
