"""What the small files beside a segment have in common: a list of entries read from and written to a file.

Indexes (``.index``, ``.timeindex``, ``.txnindex``), the leader-epoch checkpoint and producer snapshots
all parse whole from bytes, name the file in their errors, and are replaced atomically the way Kafka
replaces them (write a temporary file, then rename it over the old one). :class:`EntryFile` holds that
once; :class:`FixedWidthIndex` adds what the offset and time indexes share: fixed-width big-endian
entries relative to the segment's base offset, a zero-filled preallocated tail that ends the real
entries, strictly ordered keys and a floor lookup.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar, Generic, Self, TypeVar

from .errors import CorruptRecordError

__all__ = ["EntryFile", "FixedWidthIndex", "parse_segment_name"]

E = TypeVar("E")


class EntryFile(Generic[E]):
    """A file that is a list of entries; subclasses define ``from_bytes`` and ``to_bytes``."""

    def __init__(self, entries: Sequence[E] | None = None) -> None:
        self.entries: list[E] = list(entries or [])

    @classmethod
    def from_bytes(cls, data: bytes, *, file: str | None = None) -> Self:
        raise NotImplementedError

    @classmethod
    def read(cls, path: Path) -> Self:
        """Read and parse the file; its errors name it."""
        path = Path(path)
        return cls.from_bytes(path.read_bytes(), file=str(path))

    def to_bytes(self) -> bytes:
        raise NotImplementedError

    def write(self, path: Path) -> None:
        """Write the file atomically (temporary file + rename), as Kafka replaces these files."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(path)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[E]:
        return iter(self.entries)


def parse_segment_name(path: Path | str) -> int:
    """Base offset from a segment file name (``00000000000000000042.log`` -> 42)."""
    name = Path(path).name
    stem = name.split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{name} is not a segment file name (20-digit base offset + suffix)")
    return int(stem)


class FixedWidthIndex(EntryFile[E]):
    """A sparse index of fixed-width entries whose first field is the lookup key.

    Subclasses set ``KIND`` (named in errors), ``ENTRY`` (the struct of one entry on disk) and convert
    between an entry and its on-disk fields (offsets stored relative to ``base_offset``).
    """

    KIND: ClassVar[str]
    ENTRY: ClassVar[struct.Struct]

    def __init__(self, base_offset: int, entries: Sequence[E] | None = None) -> None:
        super().__init__(entries)
        self.base_offset = base_offset
        self._keys = [self._key(e) for e in self.entries]

    # -- what a subclass defines
    @staticmethod
    def _key(entry: E) -> int:
        raise NotImplementedError

    @staticmethod
    def _in_order(fields: tuple[int, ...], previous: tuple[int, ...] | None) -> bool:
        raise NotImplementedError

    @staticmethod
    def _entry(fields: tuple[int, ...], base_offset: int) -> E:
        raise NotImplementedError

    def _fields(self, entry: E) -> tuple[int, ...]:
        raise NotImplementedError

    # -- shared
    @classmethod
    def from_bytes(  # type: ignore[override]  # an index's bytes need its base offset
        cls, data: bytes, base_offset: int, *, file: str | None = None
    ) -> Self:
        """Parse index bytes; a zero-filled tail (a preallocated active index) ends the entries."""
        return cls(base_offset, cls._parse(data, base_offset, file))

    @classmethod
    def read(cls, path: Path, base_offset: int | None = None) -> Self:
        """Read an index file (the base offset from its name unless given)."""
        path = Path(path)
        if base_offset is None:
            base_offset = parse_segment_name(path)
        return cls.from_bytes(path.read_bytes(), base_offset, file=str(path))

    @classmethod
    def _parse(cls, data: bytes, base_offset: int, file: str | None) -> list[E]:
        size = cls.ENTRY.size
        if len(data) % size:
            raise CorruptRecordError(
                f"{cls.KIND} size {len(data)} is not a multiple of {size}", file=file, position=0
            )
        entries: list[E] = []
        previous: tuple[int, ...] | None = None
        for pos in range(0, len(data), size):
            fields = cls.ENTRY.unpack_from(data, pos)
            if entries and not any(fields):  # preallocated zeros: end of the real entries
                if any(data[pos:]):
                    raise CorruptRecordError(
                        "data after the zero-filled end of the index", file=file, position=pos
                    )
                break
            if not cls._in_order(fields, previous):
                raise CorruptRecordError(
                    f"{cls.KIND} entry ({', '.join(map(str, fields))}) is out of order or negative",
                    file=file,
                    position=pos,
                )
            previous = fields
            entries.append(cls._entry(fields, base_offset))
        return entries

    def _add(self, entry: E) -> None:
        self.entries.append(entry)
        self._keys.append(self._key(entry))

    def _floor(self, key: int) -> E | None:
        """The entry with the largest key <= ``key``, or None."""
        i = bisect.bisect_right(self._keys, key)
        return self.entries[i - 1] if i else None

    def to_bytes(self) -> bytes:
        """The trimmed file bytes Kafka leaves for a closed segment."""
        pack = self.ENTRY.pack
        return b"".join(pack(*self._fields(e)) for e in self.entries)
