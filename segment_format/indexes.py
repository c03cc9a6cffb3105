"""Rebuilding ``.index`` and ``.timeindex`` from a ``.log`` the way Kafka's ``LogSegment`` does.

Kafka's rule, applied per appended batch in file order: when more than ``index.interval.bytes`` were
appended since the last index entry, add an offset entry (this batch's last offset -> this batch's start
position) and a time entry (largest timestamp seen so far -> the last offset of the batch that carried
it) when that timestamp grew, then reset the byte counter; the batch's size is then added to the
counter. When the segment is closed (rolled) a last time entry for the maximum timestamp is added if it
grew. The same builder feeds :class:`~segment_format.writer.SegmentWriter`, so a written segment gets
the indexes Kafka would write.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from .entry_file import parse_segment_name
from .log_entries import iter_batches
from .offset_index import OffsetIndex
from .records import NO_TIMESTAMP
from .time_index import TimeIndex

__all__ = ["DEFAULT_INDEX_INTERVAL_BYTES", "IndexBuilder", "build_indexes"]

DEFAULT_INDEX_INTERVAL_BYTES = 4096


class IndexBuilder:
    """Accumulates index entries for batches appended in order to one segment."""

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self.position = 0
        self.bytes_since_last_entry = 0
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = -1
        self.closed = False

    def add_batch(self, last_offset: int, max_timestamp: int, size_in_bytes: int) -> None:
        """Account for one batch appended at the current position."""
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp_so_far = last_offset
        if self.bytes_since_last_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, self.position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_entry = 0
        self.position += size_in_bytes
        self.bytes_since_last_entry += size_in_bytes

    def close(self) -> None:
        """Add the final time index entry Kafka writes when a segment becomes inactive."""
        if not self.closed and self.offset_of_max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
        self.closed = True


def build_indexes(
    log: bytes | bytearray | memoryview | str | Path | IO[bytes],
    base_offset: int | None = None,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    *,
    closed: bool = True,
) -> tuple[bytes, bytes]:
    """``(offset_index_bytes, time_index_bytes)`` Kafka writes for this ``.log`` (a closed segment).

    ``log`` is the log's bytes, a path (base offset then defaults to the file name) or a binary file.
    With ``closed=False`` the final time entry a roll adds is left out (an active segment's state).
    """
    builder: IndexBuilder
    if isinstance(log, str | Path):
        path = Path(log)
        if base_offset is None:
            base_offset = parse_segment_name(path)
        builder = IndexBuilder(base_offset, index_interval_bytes)
        with open(path, "rb") as fh:
            for _, batch in iter_batches(fh, file=str(path)):
                builder.add_batch(batch.last_offset, batch.max_timestamp, batch.size_in_bytes)
    else:
        if base_offset is None:
            raise ValueError("base_offset is required when the log is not given as a path")
        builder = IndexBuilder(base_offset, index_interval_bytes)
        for _, batch in iter_batches(log):
            builder.add_batch(batch.last_offset, batch.max_timestamp, batch.size_in_bytes)
    if closed:
        builder.close()
    return builder.offset_index.to_bytes(), builder.time_index.to_bytes()
