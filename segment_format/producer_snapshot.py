"""Producer state ``.snapshot`` files (version 1), as Kafka's ``ProducerStateManager`` writes them.

``version int16 (1), crc uint32 (CRC-32C over the bytes after it), count int32`` then per producer
46 bytes: producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64 (-1 when no open transaction).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .crc import crc32c
from .entry_file import EntryFile
from .errors import CorruptRecordError

__all__ = ["ProducerSnapshot", "ProducerStateEntry"]

VERSION = 1
HEADER_SIZE = 10
ENTRY_SIZE = 46
_ENTRY = struct.Struct(">qhiqiqiq")
_HEADER = struct.Struct(">hIi")


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state in a snapshot (names as Kafka's snapshot schema)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int

    @property
    def first_sequence(self) -> int:
        return self.last_sequence - self.offset_delta

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerSnapshot(EntryFile[ProducerStateEntry]):
    """A producer snapshot's entries, in file order."""

    @classmethod
    def from_bytes(cls, data: bytes, *, file: str | None = None) -> ProducerSnapshot:
        if len(data) < HEADER_SIZE:
            raise CorruptRecordError(
                f"producer snapshot of {len(data)} bytes has no header", file=file, position=0
            )
        version, crc, count = _HEADER.unpack_from(data, 0)
        if version != VERSION:
            raise CorruptRecordError(f"unknown producer snapshot version {version}", file=file, position=0)
        computed = crc32c(memoryview(data)[6:])
        if computed != crc:
            raise CorruptRecordError(
                f"producer snapshot crc mismatch: stored {crc}, computed {computed}", file=file, position=2
            )
        if count < 0 or HEADER_SIZE + count * ENTRY_SIZE != len(data):
            raise CorruptRecordError(
                f"producer snapshot claims {count} entries but holds {len(data) - HEADER_SIZE} entry bytes",
                file=file,
                position=6,
            )
        entries = [
            ProducerStateEntry(*_ENTRY.unpack_from(data, HEADER_SIZE + i * ENTRY_SIZE)) for i in range(count)
        ]
        return cls(entries)

    def to_bytes(self) -> bytes:
        body = struct.pack(">i", len(self.entries)) + b"".join(
            _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                e.last_sequence,
                e.last_offset,
                e.offset_delta,
                e.timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for e in self.entries
        )
        return struct.pack(">hI", VERSION, crc32c(body)) + body
