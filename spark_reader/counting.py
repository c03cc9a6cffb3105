"""`count()` without decompressing a record: the rows of a split counted from its batch headers.

A query that needs no column (`df.count()`, `where partition = 3` answered by planning) only needs how
many rows the split's `rows` would give. A magic-2 batch header says how many records the batch holds, its
offset range, whether it is a control batch or transactional, its producer and its leader epoch: for a
batch wholly inside the rows asked for, that count is exact, and the records section (compressed or not)
is never decompressed. Integrity still holds: each batch's CRC-32C is computed over its bytes as they
stream past (checking needs no decompression), and the leader-epoch rule is the reader's.

Where a header cannot say it exactly (a batch cut by the split's first or last offset or by an offset
filter, partly inside an aborted transaction or holding a dropped violation, timestamp rules or filters,
legacy magic 0/1 entries, anything malformed), the split is counted by reading it, so the
answer is always the reader's: `reference_count` is that path, and the tests hold the two equal.

Each split counts itself (`OffsetRangePartition.count`): a store split with `count_headers` over its
bytes (`partition_reader.TieredPartition`), a hybrid query's live tail the same way from the batch headers
of the brokers' Fetch responses (`spark_reader.tail.count_tail`, `spark_reader.brokerwire.count`).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator, Sequence

from segment_format.crc import crc32c
from segment_format.records import CONTROL_FLAG_MASK, NO_PARTITION_LEADER_EPOCH, TRANSACTIONAL_FLAG_MASK
from segment_format.segment import leader_epoch_problem
from spark_reader.errors import ReaderError
from spark_reader.offset_range import OffsetRangePartition

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_CRC_FROM = 21  # the CRC covers the attributes to the batch's end
_AFTER_LENGTH = 12


class Undecidable(Exception):
    """A header cannot give this split's count exactly: count it by reading."""


def reference_count(part: OffsetRangePartition) -> int:
    """The rows the split gives (decoding every batch): the definition."""
    return part.read_count()


def count_partition(part: object) -> int:
    """The rows of one input partition, from batch headers where they say it exactly (its `count`); none
    for Spark's placeholder partition of a query planned to nothing."""
    return part.count() if isinstance(part, OffsetRangePartition) else 0


def _batches(chunks: Iterable[memoryview]) -> Iterator[tuple[tuple, bool]]:
    """(header fields, CRC ok) of each batch in the stream, its records section checksummed but not kept."""
    head = bytearray()
    crc = 0
    left = 0  # bytes of the current batch's records section still to checksum
    fields: tuple = ()
    for chunk in chunks:
        view, i, n = chunk, 0, len(chunk)
        while i < n:
            if left:
                take = min(left, n - i)
                crc = crc32c(view[i : i + take], crc)
                i += take
                left -= take
                if not left:
                    yield fields, crc == fields[4]
                continue
            take = min(HEADER_SIZE - len(head), n - i)
            head += view[i : i + take]
            i += take
            if len(head) < HEADER_SIZE:
                if len(head) >= 17 and head[16] != 2:
                    raise Undecidable("legacy magic")
                continue
            fields = _HEADER.unpack(head)
            if fields[3] != 2 or fields[1] < HEADER_SIZE - _AFTER_LENGTH:
                raise Undecidable("not a magic-2 batch")
            crc = crc32c(bytes(head[_CRC_FROM:]))
            head.clear()
            left = fields[1] + _AFTER_LENGTH - HEADER_SIZE
            if not left:
                yield fields, crc == fields[4]
    if head or left:
        raise Undecidable("a batch is cut by the split's end")


def count_headers(
    chunks: Iterable[memoryview],
    first: int,
    last: int,
    *,
    where: str,
    epochs: set[int] | None = None,
    dropped: Sequence[int] = (),
    aborted: Sequence[tuple[int, int, int]] = (),
) -> int:
    """The rows of offsets [first, last] in a stream of batches, from their headers: no control batch, no
    batch of an aborted transaction (`aborted`: producer id, first and last offset), none of another
    leader epoch than `epochs` (refused, naming `where`). Raises `Undecidable` where a header cannot say
    it exactly (a batch cut by the bounds, partly aborted, holding one of the sorted `dropped` offsets)."""
    total = 0
    for fields, crc_ok in _batches(chunks):
        base, _, epoch, _, _, attributes, last_delta, _, _, producer_id, _, _, records = fields
        if not crc_ok:
            raise Undecidable("CRC mismatch")  # the decoder names it exactly
        if not records:
            continue
        if epochs is not None and epoch != NO_PARTITION_LEADER_EPOCH and epoch not in epochs:
            raise ReaderError(f"refusing {where}: {leader_epoch_problem(base, epoch, sorted(epochs))}")
        if attributes & CONTROL_FLAG_MASK:
            continue
        end = base + last_delta
        if end < first or base > last:
            continue
        if base < first or end > last:
            raise Undecidable("a batch cut by the offsets asked for")
        if dropped and bisect.bisect_left(dropped, base) < bisect.bisect_right(dropped, end):
            raise Undecidable("a dropped violation")
        if attributes & TRANSACTIONAL_FLAG_MASK and _aborted(aborted, producer_id, base, end):
            continue
        total += records
    return total


def _aborted(aborted: Sequence[tuple[int, int, int]], producer_id: int, base: int, last: int) -> bool:
    """Whether the whole batch lies in an aborted transaction of its producer (a part of it: undecidable)."""
    for pid, first, end in aborted:
        if pid != producer_id or end < base or first > last:
            continue
        if first <= base and last <= end:
            return True
        raise Undecidable("a batch partly in an aborted transaction")
    return False
