"""The ``.txnindex`` file: aborted transactions whose data lies in the segment.

34-byte entries, no file header: version int16 (0), producerId int64, firstOffset int64, lastOffset
int64, lastStableOffset int64. Consumers reading with read_committed use it to drop aborted records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .entry_file import EntryFile
from .errors import CorruptRecordError

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TransactionIndex"]

ENTRY_SIZE = 34
VERSION = 0
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex(EntryFile[AbortedTxn]):
    """The aborted transactions of a segment, in file order."""

    @classmethod
    def from_bytes(cls, data: bytes, *, file: str | None = None) -> TransactionIndex:
        if len(data) % ENTRY_SIZE:
            raise CorruptRecordError(
                f"transaction index size {len(data)} is not a multiple of {ENTRY_SIZE}",
                file=file,
                position=len(data) - len(data) % ENTRY_SIZE,
            )
        entries = []
        for pos in range(0, len(data), ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != VERSION:
                raise CorruptRecordError(
                    f"unexpected aborted transaction version {version}", file=file, position=pos
                )
            if last < first:
                raise CorruptRecordError(
                    f"aborted transaction last offset {last} is below its first offset {first}",
                    file=file,
                    position=pos,
                )
            entries.append(AbortedTxn(pid, first, last, lso))
        return cls(entries)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (Kafka requires last offsets not to go backwards)."""
        if self.entries and txn.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"aborted transaction {txn} ends before the previous one")
        self.entries.append(txn)

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset)."""
        return [
            t for t in self.entries if t.last_offset >= fetch_offset and t.first_offset < upper_bound_offset
        ]

    def to_bytes(self) -> bytes:
        return b"".join(t.to_bytes() for t in self.entries)
