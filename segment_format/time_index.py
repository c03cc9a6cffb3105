"""The ``.timeindex`` file: sparse map from timestamp to the offset where it was reached.

12-byte entries, big-endian: timestamp int64 and relative offset int32; timestamps strictly increase.
:meth:`TimeIndex.lookup` returns the largest entry at or below a timestamp.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import CorruptRecordError
from .records import NO_TIMESTAMP

__all__ = ["ENTRY_SIZE", "TimeIndex", "TimestampOffset"]

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the (absolute) offset of the record that carried it."""

    timestamp: int
    offset: int


class TimeIndex:
    """Entries of one segment's time index, in file order."""

    def __init__(self, base_offset: int, entries: list[TimestampOffset] | None = None) -> None:
        self.base_offset = base_offset
        self.entries: list[TimestampOffset] = list(entries or [])
        self._timestamps = [e.timestamp for e in self.entries]

    @classmethod
    def from_bytes(cls, data: bytes, base_offset: int, *, file: str | None = None) -> TimeIndex:
        """Parse time index bytes; a zero-filled tail (preallocated active index) is ignored."""
        if len(data) % ENTRY_SIZE:
            raise CorruptRecordError(
                f"time index size {len(data)} is not a multiple of {ENTRY_SIZE}", file=file, position=0
            )
        entries: list[TimestampOffset] = []
        prev_ts, prev_off = NO_TIMESTAMP - 1, -1
        for pos in range(0, len(data), ENTRY_SIZE):
            ts, rel = _ENTRY.unpack_from(data, pos)
            if ts == 0 and rel == 0 and entries:
                if any(data[pos:]):
                    raise CorruptRecordError(
                        "data after the zero-filled end of the index", file=file, position=pos
                    )
                break
            if rel < 0 or ts <= prev_ts or rel < prev_off:
                raise CorruptRecordError(
                    f"time index entry ({ts}, {rel}) is out of order or negative", file=file, position=pos
                )
            prev_ts, prev_off = ts, rel
            entries.append(TimestampOffset(ts, base_offset + rel))
        return cls(base_offset, entries)

    @classmethod
    def read(cls, path: Path, base_offset: int | None = None) -> TimeIndex:
        """Read a ``.timeindex`` file (base offset from its name unless given)."""
        path = Path(path)
        if base_offset is None:
            base_offset = int(path.name.split(".")[0])
        return cls.from_bytes(path.read_bytes(), base_offset, file=str(path))

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
            self.entries.append(TimestampOffset(timestamp, offset))
            self._timestamps.append(timestamp)
            return True
        return False

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, or (-1, base offset) when none is."""
        i = bisect.bisect_right(self._timestamps, target_timestamp)
        if i == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entries[i - 1]

    def write(self, path: Path) -> None:
        """Write the file atomically (temporary file + rename), as Kafka replaces its time index files."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(path)

    def to_bytes(self) -> bytes:
        """The trimmed file bytes Kafka leaves for a closed segment."""
        return b"".join(_ENTRY.pack(e.timestamp, e.offset - self.base_offset) for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.entries)
