"""The ``.index`` file: sparse map from offset to the byte position of the batch holding it.

8-byte entries, big-endian: relative offset int32 (offset - segment base offset) and position int32.
An entry maps the *last* offset of a batch to the position where that batch starts, so
:meth:`OffsetIndex.lookup` gives a safe place to start scanning for any offset.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import CorruptRecordError

__all__ = ["ENTRY_SIZE", "OffsetIndex", "OffsetPosition"]

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An absolute offset and the file position of the batch that contains it."""

    offset: int
    position: int


class OffsetIndex:
    """Entries of one segment's offset index, in file order (offsets strictly increasing)."""

    def __init__(self, base_offset: int, entries: list[OffsetPosition] | None = None) -> None:
        self.base_offset = base_offset
        self.entries: list[OffsetPosition] = list(entries or [])
        self._offsets = [e.offset for e in self.entries]

    @classmethod
    def from_bytes(cls, data: bytes, base_offset: int, *, file: str | None = None) -> OffsetIndex:
        """Parse index bytes; a zero-filled tail (preallocated active index) is ignored."""
        if len(data) % ENTRY_SIZE:
            raise CorruptRecordError(
                f"offset index size {len(data)} is not a multiple of {ENTRY_SIZE}", file=file, position=0
            )
        entries: list[OffsetPosition] = []
        prev_off, prev_pos = -1, -1
        for pos in range(0, len(data), ENTRY_SIZE):
            rel, position = _ENTRY.unpack_from(data, pos)
            if rel == 0 and position == 0 and entries:  # preallocated zeros: end of the real entries
                if any(data[pos:]):
                    raise CorruptRecordError(
                        "data after the zero-filled end of the index", file=file, position=pos
                    )
                break
            if rel < 0 or position < 0 or rel <= prev_off or position < prev_pos:
                raise CorruptRecordError(
                    f"offset index entry ({rel}, {position}) is out of order or negative",
                    file=file,
                    position=pos,
                )
            prev_off, prev_pos = rel, position
            entries.append(OffsetPosition(base_offset + rel, position))
        return cls(base_offset, entries)

    @classmethod
    def read(cls, path: Path, base_offset: int | None = None) -> OffsetIndex:
        """Read an ``.index`` file (base offset from its name unless given)."""
        path = Path(path)
        if base_offset is None:
            base_offset = int(path.name.split(".")[0])
        return cls.from_bytes(path.read_bytes(), base_offset, file=str(path))

    def append(self, offset: int, position: int) -> None:
        """Add an entry (offsets must increase strictly, as in Kafka)."""
        if self.entries and offset <= self.entries[-1].offset:
            raise ValueError(
                f"offset {offset} is not above the last indexed offset {self.entries[-1].offset}"
            )
        if not 0 <= offset - self.base_offset <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} is out of range for base offset {self.base_offset}")
        self.entries.append(OffsetPosition(offset, position))
        self._offsets.append(offset)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target, or (base offset, 0) when none is (Kafka's contract)."""
        i = bisect.bisect_right(self._offsets, target_offset)
        if i == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entries[i - 1]

    def write(self, path: Path) -> None:
        """Write the file atomically (temporary file + rename), as Kafka replaces its index files."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(path)

    def to_bytes(self) -> bytes:
        """The trimmed file bytes Kafka leaves for a closed segment."""
        return b"".join(_ENTRY.pack(e.offset - self.base_offset, e.position) for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.entries)
