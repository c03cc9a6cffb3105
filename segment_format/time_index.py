"""The ``.timeindex`` file: sparse map from timestamp to the offset where it was reached.

12-byte entries, big-endian: timestamp int64 and relative offset int32; timestamps strictly increase.
:meth:`TimeIndex.lookup` returns the largest entry at or below a timestamp.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .entry_file import FixedWidthIndex
from .records import NO_TIMESTAMP

__all__ = ["ENTRY_SIZE", "TimeIndex", "TimestampOffset"]

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the (absolute) offset of the record that carried it."""

    timestamp: int
    offset: int


class TimeIndex(FixedWidthIndex[TimestampOffset]):
    """Entries of one segment's time index, in file order."""

    KIND = "time index"
    ENTRY = _ENTRY

    @staticmethod
    def _key(entry: TimestampOffset) -> int:
        return entry.timestamp

    @staticmethod
    def _in_order(fields: tuple[int, ...], previous: tuple[int, ...] | None) -> bool:
        ts, rel = fields
        prev_ts, prev_rel = previous or (NO_TIMESTAMP - 1, -1)
        return rel >= 0 and ts > prev_ts and rel >= prev_rel

    @staticmethod
    def _entry(fields: tuple[int, ...], base_offset: int) -> TimestampOffset:
        return TimestampOffset(fields[0], base_offset + fields[1])

    def _fields(self, entry: TimestampOffset) -> tuple[int, ...]:
        return entry.timestamp, entry.offset - self.base_offset

    @property
    def last_entry(self) -> TimestampOffset:
        """Last entry, or (-1, base offset) when empty, as Kafka's ``TimeIndex.lastEntry``."""
        return self.entries[-1] if self.entries else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add an entry when the timestamp grew past the last one (Kafka's ``maybeAppend``)."""
        last = self.last_entry
        if self.entries and offset < last.offset:
            raise ValueError(f"offset {offset} is below the last indexed offset {last.offset}")
        if timestamp > last.timestamp:
            self._add(TimestampOffset(timestamp, offset))
            return True
        return False

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, or (-1, base offset) when none is."""
        found = self._floor(target_timestamp)
        return TimestampOffset(NO_TIMESTAMP, self.base_offset) if found is None else found
