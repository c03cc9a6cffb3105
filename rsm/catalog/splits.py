"""Read ranges of segments, planned from manifests and stored indexes only (no `.log` byte is read).

A `ReadSplit` is a byte range of one segment copy that starts and ends on batch boundaries, plus the
offsets of the partition's history it may yield. Ranges come from Kafka's own sparse indexes, kept in
the segment's `.indexes` object:

- offset index entry (o, p): the batches appended at position p hold offsets up to o, and later batches
  hold higher offsets. So offsets >= x start at or after `lookup(x).position`, and the batches at or after
  the entry following the first entry with offset >= y hold only offsets above y;
- time index entry (t, o): every record up to the batch holding o has a timestamp <= t (the index keeps
  the running maximum). So the first record with timestamp >= T lies after the batch of the last entry
  whose timestamp is below T.

A big segment is cut into several splits at index entries near chunk boundaries, so each task downloads
whole chunks and decodes from a batch boundary.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from rsm.api.metadata import IndexType
from rsm.catalog.history import SegmentSlice
from rsm.catalog.segments import StoredSegment
from rsm.config.keyring import Keyring
from rsm.fetch.reader import SegmentReader, cipher_for
from rsm.store.objects import ObjectStore
from rsm.stored.manifest import Manifest
from segment_format.leader_epoch import LeaderEpochCheckpoint
from segment_format.offset_index import OffsetIndex
from segment_format.producer_snapshot import ProducerSnapshot
from segment_format.time_index import TimeIndex
from segment_format.transaction_index import AbortedTxn, TransactionIndex


@dataclass(frozen=True)
class ReadSplit:
    """Bytes [start_position, end_position) of one segment copy; rows outside the offsets are dropped."""

    topic: str
    partition: int
    bucket: str
    manifest: Manifest = field(repr=False)
    start_position: int
    end_position: int
    first_offset: int
    last_offset: int

    @property
    def size(self) -> int:
        return self.end_position - self.start_position


class SegmentIndexes:
    """A segment's stored indexes, fetched on first use (planning reads only what a bound needs)."""

    def __init__(self, store: ObjectStore, segment: StoredSegment, keyring: Keyring | None) -> None:
        self.segment = segment
        self._store = store
        self._keyring = keyring
        self._reader: SegmentReader | None = None
        self._offset: OffsetIndex | None = None
        self._time: TimeIndex | None = None

    def _raw(self, index_type: IndexType) -> bytes | None:
        if index_type not in self.segment.manifest.indexes:
            return None
        if self._reader is None:
            manifest = self.segment.manifest
            self._reader = SegmentReader(
                self._store, self.segment.bucket, manifest, cipher_for(manifest, self._keyring)
            )
        return self._reader.index(index_type)

    def _name(self, index_type: IndexType) -> str:
        return f"{index_type.name} index of {self._store.describe(self.segment.bucket, self.segment.manifest_key)}"

    def offset_index(self) -> OffsetIndex:
        if self._offset is None:
            raw = self._raw(IndexType.OFFSET) or b""
            self._offset = OffsetIndex.from_bytes(
                raw, self.segment.start_offset, file=self._name(IndexType.OFFSET)
            )
        return self._offset

    def time_index(self) -> TimeIndex:
        if self._time is None:
            raw = self._raw(IndexType.TIMESTAMP) or b""
            self._time = TimeIndex.from_bytes(
                raw, self.segment.start_offset, file=self._name(IndexType.TIMESTAMP)
            )
        return self._time

    def aborted_transactions(self) -> list[AbortedTxn]:
        raw = self._raw(IndexType.TRANSACTION)
        if not raw:
            return []
        return list(TransactionIndex.from_bytes(raw, file=self._name(IndexType.TRANSACTION)))

    def leader_epochs(self) -> tuple[tuple[int, int], ...]:
        """The segment's leader-epoch checkpoint as (epoch, first offset): Kafka writes the whole epoch
        cache up to the segment's end there, so the newest copy's names the final log's lineage."""
        raw = self._raw(IndexType.LEADER_EPOCH)
        if not raw:
            return ()
        cp = LeaderEpochCheckpoint.from_bytes(raw, file=self._name(IndexType.LEADER_EPOCH))
        return tuple((e.epoch, e.start_offset) for e in cp.entries)

    def open_transaction_first_offset(self) -> int | None:
        """The first offset of the oldest transaction still open at the segment's end (its producer
        snapshot), or None: a read_committed reader stops before it, as a consumer stops at the LSO."""
        raw = self._raw(IndexType.PRODUCER_SNAPSHOT)
        if not raw:
            return None
        firsts = [
            e.current_txn_first_offset
            for e in ProducerSnapshot.from_bytes(raw, file=self._name(IndexType.PRODUCER_SNAPSHOT))
            if e.current_txn_first_offset >= 0
        ]
        return min(firsts) if firsts else None

    # -- positions -----------------------------------------------------------------------------------
    def start_position(self, offset: int) -> int:
        """A batch boundary at or before the first batch holding offsets >= `offset`."""
        if offset <= self.segment.start_offset:
            return 0
        return self.offset_index().lookup(offset).position

    def end_position(self, offset: int) -> int:
        """A batch boundary after which every batch holds only offsets > `offset` (segment end if none)."""
        if offset >= self.segment.end_offset:
            return self.segment.size
        entries = self.offset_index().entries
        keys = [e.offset for e in entries]
        i = bisect.bisect_left(keys, offset)  # first entry with offset >= `offset`
        return entries[i + 1].position if i + 1 < len(entries) else self.segment.size

    def position_for_timestamp(self, timestamp: int) -> int:
        """A batch boundary before the first record with a timestamp >= `timestamp`."""
        entries = self.time_index().entries
        below = [e for e in entries if e.timestamp < timestamp]
        if not below:
            return 0
        return self.start_position(below[-1].offset + 1)

    def boundaries(self, start: int, end: int, pieces: int) -> list[int]:
        """Batch boundaries cutting [start, end) into about `pieces` ranges, each at a chunk boundary or
        the first indexed batch after one (so a task downloads whole chunks of its own)."""
        if pieces <= 1 or end - start <= 0:
            return [start, end]
        positions = sorted({e.position for e in self.offset_index().entries if start < e.position < end})
        if not positions:
            return [start, end]
        cs = self.segment.manifest.log.chunk_size
        step = (end - start) / pieces
        cuts = [start]
        for k in range(1, pieces):
            target = start + step * k
            target = -(-int(target) // cs) * cs  # round up to a chunk boundary
            i = bisect.bisect_left(positions, target)
            if i < len(positions) and positions[i] > cuts[-1] and positions[i] < end:
                cuts.append(positions[i])
        cuts.append(end)
        return sorted(set(cuts))


def split_slice(
    topic: str,
    slice_: SegmentSlice,
    indexes: SegmentIndexes,
    *,
    start_position: int | None = None,
    pieces: int = 1,
) -> list[ReadSplit]:
    """The splits reading `slice_` (its offsets only), cut into about `pieces` ranges."""
    seg = slice_.segment
    start = indexes.start_position(slice_.first_offset) if start_position is None else start_position
    end = indexes.end_position(slice_.last_offset)
    cuts = indexes.boundaries(start, end, pieces)
    return [
        ReadSplit(
            topic, seg.partition, seg.bucket, seg.manifest, a, b, slice_.first_offset, slice_.last_offset
        )
        for a, b in zip(cuts, cuts[1:], strict=False)
        if b > a
    ]
