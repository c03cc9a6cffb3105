"""A segment's ``.index`` and ``.timeindex`` checked against its batches, batch by batch in file order.

What Kafka's own indexes of a closed segment always satisfy (``segment_format.indexes`` builds them alike), so
anything else is a damaged index that would send readers to the wrong place:

* offset index: entries are well formed (size a multiple of 8, offsets strictly increasing, positions
  not decreasing, a zero-filled tail only after the real entries); every position is the start of a batch
  of the segment (inside the file), and the entry's offset lies within that batch's offsets (Kafka records
  the batch's last offset).
* time index: entries are well formed (size a multiple of 12, timestamps strictly increasing, offsets not
  decreasing); every offset lies within a batch of the segment, and the entry's timestamp is the largest
  batch timestamp of the segment up to and including that batch (Kafka appends "the maximum timestamp so
  far -> the offset where it was reached", at the interval and once more when the segment rolls). A
  timestamp below that would make a lookup by time start after records it should return.

The check is fed the batches in order (:meth:`SegmentIndexChecker.batch`), as a verifier walks them, so it
keeps no per-batch state: two cursors over the parsed entries, whatever the number of batches.
"""

from __future__ import annotations

from .errors import CorruptRecordError
from .offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from .offset_index import OffsetIndex
from .records import NO_TIMESTAMP
from .time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from .time_index import TimeIndex

__all__ = ["SegmentIndexChecker"]


class SegmentIndexChecker:
    """Feed every batch of the segment in order with :meth:`batch`, then :meth:`finish` with its size.

    ``offset_index`` / ``time_index`` are the files' bytes (None: not checked); ``base_offset`` is the
    segment's base offset (index offsets are relative to it). Errors are :class:`CorruptRecordError`
    naming the index file and the byte position of the entry.
    """

    def __init__(
        self,
        base_offset: int,
        *,
        offset_index: bytes | None = None,
        time_index: bytes | None = None,
        offset_index_file: str | None = None,
        time_index_file: str | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.offset_file = offset_index_file
        self.time_file = time_index_file
        self._offsets = (
            []
            if offset_index is None
            else OffsetIndex.from_bytes(offset_index, base_offset, file=offset_index_file).entries
        )
        self._times = (
            []
            if time_index is None
            else TimeIndex.from_bytes(time_index, base_offset, file=time_index_file).entries
        )
        self._o = 0  # next offset index entry to match
        self._t = 0  # next time index entry to match
        self._max_ts = NO_TIMESTAMP
        self._previous: tuple[int, int, int] | None = None  # (position, base, last) of the last batch

    @property
    def offset_entries(self) -> int:
        return len(self._offsets)

    @property
    def time_entries(self) -> int:
        return len(self._times)

    def batch(self, position: int, base_offset: int, last_offset: int, max_timestamp: int) -> None:
        """The next batch of the segment (file order)."""
        offsets, o = self._offsets, self._o
        while o < len(offsets) and offsets[o].position <= position:
            entry = offsets[o]
            if entry.position < position:
                self._not_a_batch_start(o, entry.position)
            if not base_offset <= entry.offset <= last_offset:
                raise CorruptRecordError(
                    f"offset index entry {o} maps offset {entry.offset} to position {position}, where the "
                    f"batch holds offsets {base_offset}..{last_offset}",
                    file=self.offset_file,
                    position=o * OFFSET_ENTRY_SIZE,
                )
            o += 1
        self._o = o
        if max_timestamp > self._max_ts:
            self._max_ts = max_timestamp
        times, t = self._times, self._t
        while t < len(times) and times[t].offset <= last_offset:
            entry = times[t]
            if entry.offset < base_offset:
                self._no_batch_holds(t, entry.offset)
            if entry.timestamp != self._max_ts:
                raise CorruptRecordError(
                    f"time index entry {t} says timestamp {entry.timestamp} at offset {entry.offset}, but the "
                    f"largest timestamp up to the batch holding it (offsets {base_offset}..{last_offset}) is "
                    f"{self._max_ts}",
                    file=self.time_file,
                    position=t * TIME_ENTRY_SIZE,
                )
            t += 1
        self._t = t
        self._previous = (position, base_offset, last_offset)

    def finish(self, size: int) -> None:
        """After the last batch: entries left point past the batches (or inside the last one)."""
        if self._o < len(self._offsets):
            entry = self._offsets[self._o]
            if entry.position >= size:
                raise CorruptRecordError(
                    f"offset index entry {self._o} maps offset {entry.offset} to position {entry.position}, "
                    f"past the end of the {size}-byte segment",
                    file=self.offset_file,
                    position=self._o * OFFSET_ENTRY_SIZE,
                )
            self._not_a_batch_start(self._o, entry.position)
        if self._t < len(self._times):
            self._no_batch_holds(self._t, self._times[self._t].offset)

    def _not_a_batch_start(self, i: int, position: int) -> None:
        inside = (
            f" (inside the batch at {self._previous[0]})"
            if self._previous is not None and self._previous[0] < position
            else ""
        )
        raise CorruptRecordError(
            f"offset index entry {i} points at position {position}, which is not the start of a batch{inside}",
            file=self.offset_file,
            position=i * OFFSET_ENTRY_SIZE,
        )

    def _no_batch_holds(self, i: int, offset: int) -> None:
        last = "" if self._previous is None else f" (the last batch ends at offset {self._previous[2]})"
        raise CorruptRecordError(
            f"time index entry {i} points at offset {offset}, which no batch of the segment holds{last}",
            file=self.time_file,
            position=i * TIME_ENTRY_SIZE,
        )
