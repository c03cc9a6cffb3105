"""Arrow arrays over the C kernel's column buffers, without a copy: the record batch a decode yields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from segment_format.arrow_schema import HEADER_TYPE, HEADERS_TYPE
from segment_format.projection import FULL, Projection

__all__ = ["binary_array", "header_key", "lenient_utf8", "record_batch"]


def _buffer(obj: Any) -> pa.Buffer | None:
    return None if obj is None else pa.py_buffer(obj)


def binary_array(type_: pa.DataType, n: int, validity: Any, offsets: Any, data: Any, nulls: int) -> pa.Array:
    return pa.Array.from_buffers(
        type_, n, [_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)], nulls
    )


def lenient_utf8(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def header_key(key: str) -> str:
    """A header key from segment_format.records (bad UTF-8 kept as surrogate escapes) as Java reads it."""
    if key.isascii():
        return key
    return lenient_utf8(key.encode("utf-8", "surrogateescape"))


def record_batch(cols: dict[str, Any], projection: Projection = FULL) -> pa.RecordBatch:
    """Wrap the kernel's column buffers (no copy) into a RecordBatch with the projection's schema."""
    n = cols["rows"]
    schema = projection.schema

    def fixed(type_: pa.DataType, name: str) -> pa.Array:
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(cols[name])], 0)

    def headers() -> pa.Array:
        nh = cols["headers"]
        header_keys = binary_array(
            pa.string(), nh, None, cols["header_key_offsets"], cols["header_key_data"], 0
        )
        if cols["header_key_bad_utf8"]:
            # Kafka decodes header keys with Java's new String(bytes, UTF_8), which replaces malformed
            # input with U+FFFD; an Arrow string must be valid UTF-8. Rare, so done in Python.
            header_keys = pa.array(
                [lenient_utf8(k) for k in header_keys.view(pa.binary()).to_pylist()], pa.string()
            )
        header_values = binary_array(
            pa.binary(),
            nh,
            cols["header_value_validity"],
            cols["header_value_offsets"],
            cols["header_value_data"],
            cols["header_value_nulls"],
        )
        header_structs = pa.StructArray.from_arrays([header_keys, header_values], fields=list(HEADER_TYPE))
        return pa.Array.from_buffers(
            HEADERS_TYPE, n, [None, pa.py_buffer(cols["header_offsets"])], 0, children=[header_structs]
        )

    builders: dict[str, Callable[[], pa.Array]] = {
        "offset": lambda: fixed(pa.int64(), "offset"),
        "timestamp": lambda: fixed(pa.int64(), "timestamp"),
        "timestamp_type": lambda: fixed(pa.int8(), "timestamp_type"),
        "key": lambda: binary_array(
            pa.binary(), n, cols["key_validity"], cols["key_offsets"], cols["key_data"], cols["key_nulls"]
        ),
        "value": lambda: binary_array(
            pa.binary(),
            n,
            cols["value_validity"],
            cols["value_offsets"],
            cols["value_data"],
            cols["value_nulls"],
        ),
        "headers": headers,
        "partition_leader_epoch": lambda: fixed(pa.int32(), "partition_leader_epoch"),
        "producer_id": lambda: fixed(pa.int64(), "producer_id"),
        "producer_epoch": lambda: fixed(pa.int16(), "producer_epoch"),
        "base_sequence": lambda: fixed(pa.int32(), "base_sequence"),
        "is_transactional": lambda: fixed(pa.bool_(), "is_transactional"),
        "is_control": lambda: fixed(pa.bool_(), "is_control"),
        "batch_base_offset": lambda: fixed(pa.int64(), "batch_base_offset"),
    }
    return pa.RecordBatch.from_arrays([builders[name]() for name in schema.names], schema=schema)
