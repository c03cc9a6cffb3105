"""A log segment on disk (``<base offset>.log`` plus indexes), viewed without loading it whole.

:class:`LogSegment` iterates batches with their positions, finds the position for an offset or a
timestamp (through the sparse indexes when they are there, then a short scan) and verifies the whole
file. :class:`SegmentVerifier` does the same verification on bytes fed in order, so a copy can be
checked while it streams, reading the data once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .codecs import CompressionType
from .errors import CorruptRecordError
from .offset_index import OffsetIndex
from .records import HEADER_PREFIX, NO_TIMESTAMP, AnyRecordBatch, _check_prefix, iter_batches, parse_batch
from .time_index import TimeIndex

__all__ = ["LogSegment", "SegmentSummary", "SegmentVerifier", "parse_segment_name"]

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


def parse_segment_name(path: Path | str) -> int:
    """Base offset from a segment file name (``00000000000000000042.log`` -> 42)."""
    name = Path(path).name
    stem = name.split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{name} is not a segment file name (20-digit base offset + suffix)")
    return int(stem)


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


class SegmentVerifier:
    """Verifies a segment's bytes fed in order with :meth:`update`; :meth:`finish` returns the summary.

    Checks every batch CRC, that sizes are consistent and nothing is truncated, that offsets increase
    and stay within ``[expected_start_offset, expected_end_offset]`` (the segment's base offset is the
    default lower bound). With ``deep`` every record is decoded too (varints, lengths, compression).
    Memory stays at one batch plus one chunk; when ``total_size`` (the segment's size) is given a
    length running past it is refused as soon as it is read.
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
    ) -> None:
        self.file = file
        self.total_size = total_size
        self.base_offset = base_offset
        self.lower = expected_start_offset if expected_start_offset is not None else base_offset
        self.upper = expected_end_offset
        self.deep = deep
        self._buf = bytearray()
        self._buf_pos = 0  # file position of self._buf[0]
        self._need: int | None = None
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
        self._buf += chunk
        while True:
            if self._need is None:
                if len(self._buf) < HEADER_PREFIX:
                    return
                self._need = _check_prefix(bytes(self._buf[:HEADER_PREFIX]), self._buf_pos, self.file)
                if self.total_size is not None and self._buf_pos + self._need > self.total_size:
                    # known size: refuse a bogus length now instead of buffering the rest of the stream
                    raise CorruptRecordError(
                        f"truncated log entry: size {self._need} but only {self.total_size - self._buf_pos} "
                        "bytes left",
                        file=self.file,
                        position=self._buf_pos,
                    )
            if len(self._buf) < self._need:
                return
            data = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._check(parse_batch(data, position=self._buf_pos, file=self.file))
            self._buf_pos += self._need
            self._need = None

    def _check(self, batch: AnyRecordBatch) -> None:
        if self.deep and batch.magic < 2:
            batch.ensure_valid_deep()
        else:
            batch.ensure_valid()
        pos = batch.position
        if batch.magic == 2:
            if batch.last_offset_delta < 0:
                raise CorruptRecordError(
                    f"negative last offset delta {batch.last_offset_delta}", file=self.file, position=pos + 23
                )
            if batch.record_count < 0 or batch.record_count > batch.last_offset_delta + 1:
                raise CorruptRecordError(
                    f"record count {batch.record_count} does not fit offsets {batch.base_offset}..{batch.last_offset}",
                    file=self.file,
                    position=pos + 57,
                )
        codec = batch.compression_type
        if self.deep or batch.magic < 2:
            records = batch.records()
            count = len(records)
            if records and (records[0].offset < batch.base_offset or records[-1].offset > batch.last_offset):
                raise CorruptRecordError(
                    f"record offsets {records[0].offset}..{records[-1].offset} fall outside the batch's "
                    f"{batch.base_offset}..{batch.last_offset}",
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
        else:
            count = batch.record_count
        base, last = batch.base_offset, batch.last_offset
        if self._last_offset is not None and base <= self._last_offset:
            raise CorruptRecordError(
                f"batch offsets {base}..{last} do not increase past {self._last_offset}",
                file=self.file,
                position=pos,
            )
        if self.lower is not None and base < self.lower:
            raise CorruptRecordError(
                f"batch base offset {base} is below the segment's start offset {self.lower}",
                file=self.file,
                position=pos,
            )
        if self.upper is not None and last > self.upper:
            raise CorruptRecordError(
                f"batch last offset {last} is beyond the expected end offset {self.upper}",
                file=self.file,
                position=pos,
            )
        if self._first_offset is None:
            self._first_offset = base
            self._first_batch_ts = batch.max_timestamp
        self._last_offset = last
        self._batch_count += 1
        self._record_count += count
        if batch.max_timestamp > self._max_ts:
            self._max_ts = batch.max_timestamp
            self._max_ts_offset = last
        self._codecs.add(codec)
        self._magics.add(batch.magic)
        self._txn |= batch.is_transactional
        self._control |= batch.is_control_batch

    def finish(self) -> SegmentSummary:
        """Check nothing is left half-read and return the summary."""
        self._finished = True
        if self._buf:
            raise CorruptRecordError(
                f"truncated log entry: {len(self._buf)} bytes at the end"
                + (f" of a {self._need}-byte entry" if self._need else ""),
                file=self.file,
                position=self._buf_pos,
            )
        base = self.base_offset if self.base_offset is not None else (self._first_offset or 0)
        last = self._last_offset if self._last_offset is not None else base - 1
        if self.upper is not None and self._last_offset is not None and self._last_offset != self.upper:
            raise CorruptRecordError(
                f"segment ends at offset {self._last_offset}, expected {self.upper}",
                file=self.file,
                position=self._buf_pos,
            )
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
    ) -> SegmentSummary:
        """Verify the whole file (see :class:`SegmentVerifier`); CorruptRecordError names file and byte."""
        verifier = SegmentVerifier(
            file=str(self.path),
            base_offset=self.base_offset,
            expected_start_offset=expected_start_offset,
            expected_end_offset=expected_end_offset,
            deep=deep,
            total_size=self.size_in_bytes,
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
