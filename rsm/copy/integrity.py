"""The copy's integrity check of a segment, always run: nothing corrupt reaches the store.

 `SegmentIntegrityVerifier` is fed the segment's bytes in chunks, as they are read, and checks
every batch with `segment_format`'s `SegmentVerifier` (the project's one checker of segment bytes): the
CRC (CRC-32C over attributes..end for magic 2; CRC-32 over magic..end for the legacy magic 0/1 message
sets), header sanity (lengths, record count against the offset delta), offsets strictly increasing from the
metadata's start_offset and never past its end_offset, every magic-2 batch's leader epoch one of the
metadata's `segment_leader_epochs`, and that the batches exactly fill a file of the size the metadata
states. Any fault raises `SegmentIntegrityError` naming the file, the byte position of the batch and the
fault. It also counts, per chunk, the bytes of batches that are already compressed, so the copy can skip
compressing those chunks again. The copy runs it over the whole file before uploading anything, so a
corrupt segment never reaches the store.

Index integrity joins it: the segment's offset and time index (the files Kafka hands the copy) are checked
against the batches as they pass (`segment_format.index_check`): every position a batch start inside the
file, every offset inside the batch it points at, every time entry the largest timestamp so far. A bad
index would send Kafka's remote reads to the wrong bytes, so it refuses the copy like a corrupt batch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from rsm.api.errors import SegmentIntegrityError
from segment_format.errors import CorruptRecordError
from segment_format.index_check import SegmentIndexChecker
from segment_format.log_entries import AnyRecordBatch
from segment_format.segment import SegmentVerifier


@dataclass
class IntegritySummary:
    """What the copy needs from the check: size, batch and offset figures, and per chunk the bytes of
    batches that are already compressed (`compressed_bytes_per_chunk[i]` for file bytes
    `[i * chunk_size, (i + 1) * chunk_size)`), which decides where the copy skips compressing again."""

    size: int
    batches: int
    first_offset: int | None
    last_offset: int | None
    max_timestamp_ms: int
    compressed_bytes_per_chunk: list[int]
    magics: set[int] = field(default_factory=set)
    # the first batch's max timestamp (Kafka's getFirstBatchTimestamp, what time-based retention reads)
    first_batch_timestamp_ms: int = -1

    @property
    def compressed_batch_bytes(self) -> int:
        return sum(self.compressed_bytes_per_chunk)

    def manifest_record(self) -> dict[str, int]:
        """The manifest's `integrity` block: what readers and `rsm migrate verify` check the segment by."""
        return {
            "batches": self.batches,
            "first_offset": -1 if self.first_offset is None else self.first_offset,
            "last_offset": -1 if self.last_offset is None else self.last_offset,
            "max_timestamp_ms": self.max_timestamp_ms,
            "first_batch_timestamp_ms": self.first_batch_timestamp_ms,
            "compressed_batch_bytes": self.compressed_batch_bytes,
        }


class SegmentIntegrityVerifier:
    """Streaming batch-by-batch check of a segment; feed bytes in order, then `finish()`.

    A thin adapter over `segment_format.segment.SegmentVerifier` (the project's one integrity check):
    it fixes the RSM's semantics (offsets inside the metadata's `[start_offset, end_offset]`, magic-2
    batches of the metadata's leader epochs only, the file exactly `expected_size` bytes), has it count
    already-compressed bytes per chunk of `chunk_size`, and turns `CorruptRecordError` into
    `SegmentIntegrityError`.

    Why `end_offset` may lie past the last batch: Kafka's RemoteLogManager sets `endOffset` to
    the next segment's base offset minus one. That is the last batch's last offset except where the log
    has a hole at the segment's end: a topic compacted before it was switched to `delete` and tiered keeps
    the holes its cleaner made. Kafka retries a refused copy forever, so refusing those offsets would stop
    the partition from ever tiering again. The offsets between the last batch and `end_offset` hold no
    record in Kafka's log either (a consumer skips them), so the copy accepts them, records both offsets in
    the manifest (`segment.end_offset`, and `integrity.last_offset`, the last batch's last offset), and the
    catalog and readers take that range as compacted away: no rows, no data loss. What stays refused is a
    batch past `end_offset` (the copy would serve offsets Kafka attributes to the next segment) or below
    `start_offset`.

    Why leader epochs: a batch's `partitionLeaderEpoch` lies outside its CRC, yet the catalog's
    one-history rule places each offset by the epoch that wrote it. Kafka records every appended batch's
    epoch in its leader-epoch cache, from which it computes `segmentLeaderEpochs`, so a magic-2 batch of
    another epoch is damage (or not this segment's) and is refused, naming its offset. A metadata without
    epochs (never from Kafka, whose `RemoteLogSegmentMetadata` requires them) is not checked.
    """

    def __init__(
        self,
        file: str,
        start_offset: int,
        end_offset: int,
        expected_size: int,
        chunk_size: int,
        *,
        offset_index: bytes | None = None,
        time_index: bytes | None = None,
        offset_index_file: str | None = None,
        time_index_file: str | None = None,
        on_batch: Callable[[AnyRecordBatch], None] | None = None,
        leader_epochs: Collection[int] | None = None,
    ) -> None:
        """`offset_index` / `time_index`: the bytes of the segment's index files, checked against its
        batches (None: not checked); `on_batch` sees every batch once checked (see SegmentVerifier);
        `leader_epochs`: the metadata's `segment_leader_epochs` keys (None or empty: not checked)."""
        self.file = file
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.expected_size = expected_size
        self.chunk_size = chunk_size
        self.position = 0  # bytes consumed so far
        indexes = None
        if offset_index is not None or time_index is not None:
            try:
                indexes = SegmentIndexChecker(
                    start_offset,
                    offset_index=offset_index,
                    time_index=time_index,
                    offset_index_file=offset_index_file,
                    time_index_file=time_index_file,
                )
            except CorruptRecordError as exc:  # an index that does not even parse
                raise _integrity_error(exc, file) from None
        self._verifier = SegmentVerifier(
            file=file,
            expected_start_offset=start_offset,
            expected_end_offset=end_offset,
            exact_end_offset=False,
            total_size=expected_size,
            region_size=chunk_size,
            indexes=indexes,
            on_batch=on_batch,
            leader_epochs=leader_epochs,
        )

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Check the next bytes of the file; `SegmentIntegrityError` at the first fault."""
        try:
            self._verifier.update(data)
        except CorruptRecordError as exc:
            raise _integrity_error(exc, self.file) from None
        self.position += len(data) if not isinstance(data, memoryview) else data.nbytes

    def finish(self) -> IntegritySummary:
        """Check the file ended where the metadata says and nothing is half-read; return the figures."""
        try:
            s = self._verifier.finish()
        except CorruptRecordError as exc:
            raise _integrity_error(exc, self.file) from None
        return IntegritySummary(
            size=s.size_in_bytes,
            batches=s.batch_count,
            first_offset=s.first_offset,
            last_offset=None if s.first_offset is None else s.last_offset,
            max_timestamp_ms=s.max_timestamp,
            first_batch_timestamp_ms=s.first_batch_timestamp,
            compressed_bytes_per_chunk=self._verifier.compressed_bytes_per_region,
            magics=set(s.magics),
        )


def _integrity_error(exc: CorruptRecordError, file: str) -> SegmentIntegrityError:
    return SegmentIntegrityError(exc.file or file, 0 if exc.position is None else exc.position, exc.reason)


# --------------------------------------------------------------------------------------------------------


def read_index(source: Path | bytes | None) -> bytes | None:
    """The bytes of an index handed to the copy (a path or bytes); None when absent (not checked here:
    the upload refuses a missing offset or time index)."""
    if source is None or isinstance(source, bytes | bytearray):
        return None if source is None else bytes(source)
    try:
        return Path(source).read_bytes()
    except FileNotFoundError:
        return None
