"""How many rows `decode_chunk` gives for a chunk, counted from its batch headers (`count()` of the tail).

A magic-2 batch header says how many records the batch holds, its offset range, whether it is a control
batch or transactional, and its producer. For a batch wholly inside the offsets asked for, that count is
exact, and the records section (compressed or not) is never decompressed or parsed: a `count()` of the
live tail costs a walk over the batch headers and a CRC-32C of each batch (checked, as the decoder checks
it). read_committed is the Java consumer's rule (`spark_reader.brokerwire.aborts`), which reads only those
header fields, so it is applied here batch by batch as `AbortedBatches` applies it to decoded rows: the
same response's aborted list, the same walk in offset order, only batches with records taking part.

What a header cannot say exactly is decoded, that entry alone and its offsets only (no key, value or
header is copied): a batch cut by the window (a compressed batch the broker returned whole from before
the fetch offset, the last one running past the end, an offset filter's bound inside it), a legacy magic
0/1 entry, and a batch whose CRC does not match (so the decoder's error names it). tests/spark/test_tail.py
holds `count_chunk` equal to the rows of `decode_chunk`.
"""

from __future__ import annotations

import struct
from collections import deque

import pyarrow.compute as pc

from segment_format.columnar import Projection, iter_record_batches
from segment_format.crc import crc32c
from segment_format.errors import CorruptRecordError
from segment_format.records import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from spark_reader.brokerwire.errors import WireError
from spark_reader.brokerwire.reader import WireChunk
from spark_reader.options import IsolationLevel

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_ENTRY = struct.Struct(">qi")
_LOG_OVERHEAD = 12
_MAGIC_AT = 16
_CRC_FROM = 21  # the CRC covers the attributes to the batch's end
#: offsets only: what a decoded entry is counted by
OFFSETS_ONLY = Projection(key_bytes=0, value_bytes=0, headers=False, batch_fields=False, control=False)


def count_chunk(
    chunk: WireChunk,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    """The rows `decode_chunk(chunk, isolation)` gives with `lo <= offset <= hi` (None: unbounded)."""
    start = chunk.start if lo is None else max(chunk.start, lo)
    stop = chunk.end if hi is None else min(chunk.end, hi + 1)
    records = chunk.records
    where = f"{chunk.topic}-{chunk.partition} from the brokers (fetch at offset {chunk.start})"
    committed = isolation is IsolationLevel.READ_COMMITTED and bool(chunk.aborted)
    pending = deque(sorted(chunk.aborted, key=lambda a: a.first_offset))
    producers = {a.producer_id for a in chunk.aborted} if committed else set()
    inside: set[int] = set()
    total, position, n = 0, 0, len(records)
    while position < n:
        base, length = _ENTRY.unpack_from(records, position)
        end = position + _LOG_OVERHEAD + length
        entry = records[position:end]
        position = end
        if entry[_MAGIC_AT] < 2:  # legacy: no transactions nor control records; its offset is its last one
            total += 0 if base < start else _decoded(entry, start, stop, where)
            continue
        _, _, _, _, crc, attributes, last_delta, _, _, producer_id, _, _, count = _HEADER.unpack_from(entry)
        if crc32c(entry[_CRC_FROM:]) != crc:
            _decoded(entry, start, stop, where)  # the decoder names the mismatch
            raise WireError(f"corrupt records: {where}: CRC mismatch in the batch at offset {base}")
        if not count:
            continue  # emptied by compaction: no rows, no part in the aborted-transaction walk
        last, control = base + last_delta, bool(attributes & CONTROL_FLAG_MASK)
        if attributes & TRANSACTIONAL_FLAG_MASK and producer_id in producers:
            while pending and pending[0].first_offset <= last:
                inside.add(pending.popleft().producer_id)
            if control:
                inside.discard(producer_id)  # its transaction's ABORT marker
            elif producer_id in inside:
                continue  # aborted: its records are dropped
        if control or last < start or base >= stop:
            continue
        if start <= base and last < stop:
            total += count
        else:
            total += _decoded(entry, start, stop, where)
    return total


def _decoded(entry: memoryview, start: int, stop: int, where: str) -> int:
    """The records of one entry with start <= offset < stop, decoded (offsets only)."""
    total = 0
    try:
        for batch in iter_record_batches(entry, file=where, projection=OFFSETS_ONLY):
            offsets = batch.column("offset")
            total += pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, stop)).true_count
    except CorruptRecordError as exc:
        raise WireError(f"corrupt records: {exc}") from None
    return total
