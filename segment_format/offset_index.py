"""The ``.index`` file: sparse map from offset to the byte position of the batch holding it.

8-byte entries, big-endian: relative offset int32 (offset - segment base offset) and position int32.
An entry maps the *last* offset of a batch to the position where that batch starts, so
:meth:`OffsetIndex.lookup` gives a safe place to start scanning for any offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .entry_file import FixedWidthIndex

__all__ = ["ENTRY_SIZE", "OffsetIndex", "OffsetPosition"]

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An absolute offset and the file position of the batch that contains it."""

    offset: int
    position: int


class OffsetIndex(FixedWidthIndex[OffsetPosition]):
    """Entries of one segment's offset index, in file order (offsets strictly increasing)."""

    KIND = "offset index"
    ENTRY = _ENTRY

    @staticmethod
    def _key(entry: OffsetPosition) -> int:
        return entry.offset

    @staticmethod
    def _in_order(fields: tuple[int, ...], previous: tuple[int, ...] | None) -> bool:
        rel, position = fields
        prev_rel, prev_pos = previous or (-1, -1)
        return rel >= 0 and position >= 0 and rel > prev_rel and position >= prev_pos

    @staticmethod
    def _entry(fields: tuple[int, ...], base_offset: int) -> OffsetPosition:
        return OffsetPosition(base_offset + fields[0], fields[1])

    def _fields(self, entry: OffsetPosition) -> tuple[int, ...]:
        return entry.offset - self.base_offset, entry.position

    def append(self, offset: int, position: int) -> None:
        """Add an entry (offsets must increase strictly, as in Kafka)."""
        if self.entries and offset <= self.entries[-1].offset:
            raise ValueError(
                f"offset {offset} is not above the last indexed offset {self.entries[-1].offset}"
            )
        if not 0 <= offset - self.base_offset <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} is out of range for base offset {self.base_offset}")
        self._add(OffsetPosition(offset, position))

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target, or (base offset, 0) when none is (Kafka's contract)."""
        found = self._floor(target_offset)
        return OffsetPosition(self.base_offset, 0) if found is None else found
