"""A log segment on disk (``<base offset>.log`` plus indexes), viewed without loading it whole.

:class:`LogSegment` iterates batches with their positions, finds the position for an offset or a
timestamp (through the sparse indexes when they are there, then a short scan) and verifies the whole
file. :class:`SegmentVerifier` does the same verification on bytes fed in order, so a copy can be
checked while it streams, reading the data once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .codecs import CompressionType
from .entry_file import parse_segment_name
from .errors import CorruptRecordError
from .index_check import SegmentIndexChecker
from .log_entries import AnyRecordBatch, check_prefix, iter_batches, parse_batch
from .offset_index import OffsetIndex
from .records import HEADER_PREFIX, NO_TIMESTAMP, RecordBatch
from .time_index import TimeIndex

__all__ = ["LogSegment", "SegmentSummary", "SegmentVerifier", "leader_epoch_problem", "parse_segment_name"]

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What a verified segment holds.

    ``max_timestamp_offset`` is the last offset of the batch holding the largest timestamp (the offset
    Kafka's time index records); ``first_batch_timestamp`` the first batch's max timestamp (Kafka's
    ``getFirstBatchTimestamp``, used for time-based retention).
    """

    base_offset: int
    last_offset: int
    batch_count: int
    record_count: int
    size_in_bytes: int
    max_timestamp: int
    max_timestamp_offset: int
    first_batch_timestamp: int
    compression_types: frozenset[CompressionType] = field(default_factory=frozenset)
    has_transactional: bool = False
    has_control: bool = False
    magics: frozenset[int] = field(default_factory=frozenset)
    first_offset: int | None = None

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def leader_epoch_problem(base_offset: int, epoch: int, epochs: Collection[int]) -> str:
    """The one wording of a batch whose leader epoch is not the segment's (the copy's and the reader's)."""
    return (
        f"batch at offset {base_offset} carries partition leader epoch {epoch}, which is not one of the "
        f"segment's leader epochs {sorted(epochs)} (partitionLeaderEpoch lies outside the batch CRC: "
        "damaged, or not this segment's batch)"
    )


class SegmentVerifier:
    """Verifies a segment's bytes fed in order with :meth:`update`; :meth:`finish` returns the summary.

    This is the one integrity check of segment bytes in the project (the RSM's copy-time check in
    :mod:`rsm.validation` adapts it). Checks every batch CRC, that sizes are consistent and nothing is
    truncated, that offsets increase and stay within ``[expected_start_offset, expected_end_offset]``
    (the segment's base offset is the default lower bound). With ``deep`` every record is decoded too
    (varints, lengths, compression).

    ``exact_end_offset`` (default) also requires the last batch to end exactly at ``expected_end_offset``,
    which is right for a caller that knows the segment's last offset. Kafka's RemoteLogManager sets
    ``RemoteLogSegmentMetadata.endOffset`` to the next segment's base offset minus one, and a log can have
    offset gaps before that point (``LocalLog.roll`` rolls at the larger of the expected next offset and
    the log end offset; a once-compacted log keeps its holes); ``exact_end_offset=False`` only requires
    every offset to lie inside the range, so an end offset past the last batch is accepted and one below
    it is still refused, at the batch that crosses it. The RSM's copy uses that (see ``rsm.validation``).

    ``leader_epochs`` (the epochs of the segment's leader-epoch entries, Kafka's ``segmentLeaderEpochs``)
    refuses a magic-2 batch whose ``partitionLeaderEpoch`` is not one of them, naming its offsets. The
    field lies outside the batch CRC, so a flipped bit there passes every other check. Kafka stamps every
    batch it appends with the leader's epoch and records each batch's epoch in its leader-epoch cache
    (``UnifiedLog.append`` -> ``LeaderEpochFileCache.assign``, which refuses a negative epoch, so a
    magic-2 batch of epoch -1 is refused too); legacy magic 0/1 batches carry no epoch and are skipped.
    Only membership is checked, not the epoch's offset range: the cache's first entry is moved up to the
    log start offset (``truncateFromStart``), which can lie inside a segment, so batches of that epoch can
    sit before its recorded start. None or empty: not checked.

    When ``total_size`` (the size the segment's metadata states) is given, a batch length running past it
    is refused as soon as its 17-byte prefix is read, and feeding more or fewer bytes than that is an
    error. With ``region_size``, :attr:`compressed_bytes_per_region` counts, for every region of that
    many bytes (``[i * region_size, (i + 1) * region_size)``), the bytes of batches whose payload is
    already compressed: a copy that compresses in chunks uses it to leave such chunks alone.

    Batches wholly inside a fed chunk are checked in place (no copy); only a batch straddling two chunks
    is gathered in a side buffer, so memory stays at one batch plus the caller's chunk and the cost is
    one pass over the bytes however the feed is cut.

    ``indexes`` (a :class:`~segment_format.index_check.SegmentIndexChecker`) checks the segment's offset and
    time indexes against the batches as they pass; ``on_batch`` is called with every batch once it has
    been checked (its bytes may be a view of the fed chunk: do not keep it).
    """

    def __init__(
        self,
        *,
        file: str | None = None,
        base_offset: int | None = None,
        expected_start_offset: int | None = None,
        expected_end_offset: int | None = None,
        deep: bool = False,
        total_size: int | None = None,
        exact_end_offset: bool = True,
        region_size: int | None = None,
        indexes: SegmentIndexChecker | None = None,
        on_batch: Callable[[AnyRecordBatch], None] | None = None,
        leader_epochs: Collection[int] | None = None,
    ) -> None:
        self.file = file
        self.leader_epochs = frozenset(leader_epochs) if leader_epochs else None
        self.indexes = indexes
        self.on_batch = on_batch
        self.total_size = total_size
        self.base_offset = base_offset
        self.lower = expected_start_offset if expected_start_offset is not None else base_offset
        self.upper = expected_end_offset
        self.exact_end_offset = exact_end_offset
        self.deep = deep
        if region_size is not None and region_size <= 0:
            raise ValueError(f"region_size must be positive, got {region_size}")
        self.region_size = region_size
        regions = -(-total_size // region_size) if region_size and total_size else 0
        self.compressed_bytes_per_region: list[int] = [0] * regions
        self._pending = bytearray()  # the start of an entry that straddles fed chunks
        self._buf_pos = 0  # file position of the next entry (the first byte of self._pending)
        self._fed = 0
        self._need: int | None = None  # size of the entry at self._buf_pos, once its prefix is read
        self._batch_count = 0
        self._record_count = 0
        self._first_offset: int | None = None
        self._last_offset: int | None = None
        self._max_ts = NO_TIMESTAMP
        self._max_ts_offset = -1
        self._first_batch_ts = NO_TIMESTAMP
        self._codecs: set[CompressionType] = set()
        self._magics: set[int] = set()
        self._txn = False
        self._control = False
        self._finished = False

    def update(self, chunk: bytes | bytearray | memoryview) -> None:
        """Feed the next bytes of the segment."""
        if self._finished:
            raise ValueError("verifier already finished")
        mv = memoryview(chunk).cast("B") if isinstance(chunk, memoryview) else memoryview(chunk)
        n = len(mv)
        if self.total_size is not None and self._fed + n > self.total_size:
            raise CorruptRecordError(
                f"file is longer than the {self.total_size} bytes its metadata states",
                file=self.file,
                position=self.total_size,
            )
        self._fed += n
        i = 0
        pending = self._pending
        if pending:  # finish the entry started in an earlier chunk
            if self._need is None:
                i = min(HEADER_PREFIX - len(pending), n)
                pending += mv[:i]
                if len(pending) < HEADER_PREFIX:
                    return
                self._prefix(pending)
            assert self._need is not None
            take = min(self._need - len(pending), n - i)
            pending += mv[i : i + take]
            i += take
            if len(pending) < self._need:
                return
            self._entry(bytes(pending))
            pending.clear()
        while n - i >= HEADER_PREFIX:  # entries wholly inside this chunk: checked in place
            need = self._prefix(mv[i : i + HEADER_PREFIX])
            if n - i < need:
                break
            self._entry(mv[i : i + need])
            i += need
        if i < n:
            pending += mv[i:]

    def _prefix(self, prefix: bytes | bytearray | memoryview) -> int:
        need = self._need = check_prefix(prefix, self._buf_pos, self.file)
        if self.total_size is not None and self._buf_pos + need > self.total_size:
            # known size: refuse a bogus length now instead of buffering the rest of the stream
            raise CorruptRecordError(
                f"truncated log entry: a batch of {need} bytes runs past the end of the "
                f"{self.total_size}-byte file ({self.total_size - self._buf_pos} bytes left)",
                file=self.file,
                position=self._buf_pos,
            )
        return need

    def _entry(self, data: bytes | memoryview) -> None:
        if data[16] == 2:
            batch: AnyRecordBatch = RecordBatch.from_bytes(data, position=self._buf_pos, file=self.file)  # type: ignore[arg-type]
        else:  # legacy entries keep their own bytes (a wrapper's inner messages are parsed lazily)
            batch = parse_batch(bytes(data), position=self._buf_pos, file=self.file)
        self._check(batch)
        self._buf_pos += len(data)
        self._need = None

    def _check(self, batch: AnyRecordBatch) -> None:
        # hot path (one call per batch): fields read once into locals
        magic = batch.magic
        if self.deep and magic < 2:
            batch.ensure_valid_deep()
        else:
            batch.ensure_valid()
        pos = batch.position
        base, last = batch.base_offset, batch.last_offset
        if magic == 2:
            delta, count = batch.last_offset_delta, batch.record_count
            if delta < 0:
                raise CorruptRecordError(
                    f"negative last offset delta {delta}", file=self.file, position=pos + 23
                )
            if count < 0 or count > delta + 1:
                raise CorruptRecordError(
                    f"record count {count} does not fit offsets {base}..{last}",
                    file=self.file,
                    position=pos + 57,
                )
            epochs = self.leader_epochs
            if epochs is not None and batch.partition_leader_epoch not in epochs:
                raise CorruptRecordError(
                    leader_epoch_problem(base, batch.partition_leader_epoch, epochs),
                    file=self.file,
                    position=pos,
                )
        codec = batch.compression_type
        if self.deep or magic < 2:
            records = batch.records()
            count = len(records)
            if records and (records[0].offset < base or records[-1].offset > last):
                raise CorruptRecordError(
                    f"record offsets {records[0].offset}..{records[-1].offset} fall outside the batch's "
                    f"{base}..{last}",
                    file=self.file,
                    position=pos,
                )
            for a, b in zip(records, records[1:], strict=False):
                if b.offset <= a.offset:
                    raise CorruptRecordError(
                        f"record offsets go backwards ({a.offset} then {b.offset})",
                        file=self.file,
                        position=pos,
                    )
        previous = self._last_offset
        if previous is not None and base <= previous:
            raise CorruptRecordError(
                f"batch offsets {base}..{last} do not increase past {previous}", file=self.file, position=pos
            )
        if self.lower is not None and base < self.lower:
            raise CorruptRecordError(
                f"batch base offset {base} is below the segment's start offset {self.lower} "
                f"(offsets {base}..{last} outside the segment's range {self._range()})",
                file=self.file,
                position=pos,
            )
        if self.upper is not None and last > self.upper:
            raise CorruptRecordError(
                f"batch last offset {last} is beyond the expected end offset {self.upper} "
                f"(offsets {base}..{last} outside the segment's range {self._range()})",
                file=self.file,
                position=pos,
            )
        max_ts = batch.max_timestamp
        if previous is None:
            self._first_offset = base
            self._first_batch_ts = max_ts
        self._last_offset = last
        self._batch_count += 1
        self._record_count += count
        if max_ts > self._max_ts:
            self._max_ts = max_ts
            self._max_ts_offset = last
        self._codecs.add(codec)
        self._magics.add(magic)
        if not self._txn and batch.is_transactional:
            self._txn = True
        if not self._control and batch.is_control_batch:
            self._control = True
        if self.region_size is not None and codec is not CompressionType.NONE:
            self._count_compressed(pos, pos + batch.size_in_bytes)
        if self.indexes is not None:
            self.indexes.batch(pos, base, last, max_ts)
        if self.on_batch is not None:
            self.on_batch(batch)

    def _count_compressed(self, start: int, end: int) -> None:
        size, counts = self.region_size, self.compressed_bytes_per_region
        assert size is not None
        last_region = (end - 1) // size
        if last_region >= len(counts):  # no total size given: grow as the file does
            counts.extend([0] * (last_region + 1 - len(counts)))
        for region in range(start // size, last_region + 1):
            counts[region] += min(end, (region + 1) * size) - max(start, region * size)

    def _range(self) -> str:
        lower = "" if self.lower is None else str(self.lower)
        return f"{lower}..{'' if self.upper is None else self.upper}"

    def finish(self) -> SegmentSummary:
        """Check nothing is left half-read and return the summary."""
        self._finished = True
        if self.total_size is not None and self._fed != self.total_size:
            raise CorruptRecordError(
                f"file is {self._fed} bytes, the metadata states {self.total_size}",
                file=self.file,
                position=self._fed,
            )
        if self._pending:
            raise CorruptRecordError(
                f"truncated log entry: {len(self._pending)} bytes at the end"
                + (f" of a {self._need}-byte entry" if self._need else ""),
                file=self.file,
                position=self._buf_pos,
            )
        base = self.base_offset if self.base_offset is not None else (self._first_offset or 0)
        last = self._last_offset if self._last_offset is not None else base - 1
        if (
            self.exact_end_offset
            and self.upper is not None
            and self._last_offset is not None
            and self._last_offset != self.upper
        ):
            raise CorruptRecordError(
                f"segment ends at offset {self._last_offset}, expected {self.upper}",
                file=self.file,
                position=self._buf_pos,
            )
        if self.indexes is not None:
            self.indexes.finish(self._buf_pos)
        return SegmentSummary(
            base_offset=base,
            last_offset=last,
            batch_count=self._batch_count,
            record_count=self._record_count,
            size_in_bytes=self._buf_pos,
            max_timestamp=self._max_ts,
            max_timestamp_offset=self._max_ts_offset,
            first_batch_timestamp=self._first_batch_ts,
            compression_types=frozenset(self._codecs),
            has_transactional=self._txn,
            has_control=self._control,
            magics=frozenset(self._magics),
            first_offset=self._first_offset,
        )


class LogSegment:
    """A ``.log`` file and its sibling ``.index`` / ``.timeindex`` (used when present)."""

    def __init__(self, path: Path | str, base_offset: int | None = None) -> None:
        self.path = Path(path)
        self.base_offset = parse_segment_name(self.path) if base_offset is None else base_offset
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None

    def __repr__(self) -> str:
        return f"LogSegment({str(self.path)!r}, base_offset={self.base_offset})"

    @property
    def size_in_bytes(self) -> int:
        return self.path.stat().st_size

    @property
    def offset_index_path(self) -> Path:
        return self.path.with_suffix(".index")

    @property
    def time_index_path(self) -> Path:
        return self.path.with_suffix(".timeindex")

    @property
    def txn_index_path(self) -> Path:
        return self.path.with_suffix(".txnindex")

    def offset_index(self) -> OffsetIndex | None:
        """The sibling ``.index`` (None when absent)."""
        if self._offset_index is None and self.offset_index_path.exists():
            self._offset_index = OffsetIndex.read(self.offset_index_path, self.base_offset)
        return self._offset_index

    def time_index(self) -> TimeIndex | None:
        """The sibling ``.timeindex`` (None when absent)."""
        if self._time_index is None and self.time_index_path.exists():
            self._time_index = TimeIndex.read(self.time_index_path, self.base_offset)
        return self._time_index

    def batches(self, start_position: int = 0, *, strict: bool = True) -> Iterator[AnyRecordBatch]:
        """Batches from ``start_position`` on (positions in ``batch.position``); the file is streamed."""
        with open(self.path, "rb") as fh:
            for _, batch in iter_batches(
                fh, file=str(self.path), start_position=start_position, strict=strict
            ):
                yield batch

    def verify(
        self,
        expected_start_offset: int | None = None,
        expected_end_offset: int | None = None,
        *,
        deep: bool = False,
        check_indexes: bool = False,
    ) -> SegmentSummary:
        """Verify the whole file (see :class:`SegmentVerifier`); CorruptRecordError names file and byte.

        ``check_indexes`` also checks the sibling ``.index`` and ``.timeindex`` (those present) against the
        batches (:class:`~segment_format.index_check.SegmentIndexChecker`).
        """
        indexes = None
        if check_indexes:
            paths = {"offset": self.offset_index_path, "time": self.time_index_path}
            present = {k: p for k, p in paths.items() if p.exists()}
            indexes = SegmentIndexChecker(
                self.base_offset,
                offset_index=present["offset"].read_bytes() if "offset" in present else None,
                time_index=present["time"].read_bytes() if "time" in present else None,
                offset_index_file=str(paths["offset"]),
                time_index_file=str(paths["time"]),
            )
        verifier = SegmentVerifier(
            file=str(self.path),
            base_offset=self.base_offset,
            expected_start_offset=expected_start_offset,
            expected_end_offset=expected_end_offset,
            deep=deep,
            total_size=self.size_in_bytes,
            indexes=indexes,
        )
        with open(self.path, "rb") as fh:
            while chunk := fh.read(READ_CHUNK):
                verifier.update(chunk)
        return verifier.finish()

    def position_for_offset(self, offset: int) -> int:
        """Start position of the batch containing ``offset`` (or the first batch after it, if compacted).

        Raises ValueError when the segment holds nothing at or after ``offset``.
        """
        if offset < self.base_offset:
            raise ValueError(f"offset {offset} is below the segment's base offset {self.base_offset}")
        index = self.offset_index()
        start = index.lookup(offset).position if index is not None else 0
        for batch in self.batches(start):
            if batch.last_offset >= offset:
                return batch.position
        raise ValueError(f"offset {offset} is beyond the end of {self.path}")

    def position_for_timestamp(self, timestamp: int) -> int | None:
        """Start position of the first batch whose max timestamp is >= ``timestamp``; None if none."""
        start = 0
        tindex, oindex = self.time_index(), self.offset_index()
        if tindex is not None and oindex is not None:
            entry = tindex.lookup(timestamp)
            start = oindex.lookup(entry.offset).position
        for batch in self.batches(start):
            if batch.max_timestamp >= timestamp:
                return batch.position
        return None

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose record timestamp is >= ``timestamp`` (Kafka's ``findOffsetByTimestamp``)."""
        pos = self.position_for_timestamp(timestamp)
        if pos is None:
            return None
        for batch in self.batches(pos):
            for record in batch.records():
                if record.timestamp >= timestamp:
                    return record.offset
        return None
