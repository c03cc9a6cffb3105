"""`count()` without decompressing a record: the rows of a split counted from its batch headers.

A query that needs no column (`df.count()`, `where partition = 3` answered by planning) only needs how
many rows `read_partition` would give. A magic-2 batch header says how many records the batch holds, its
offset range, whether it is a control batch or transactional, its producer and its leader epoch: for a
batch wholly inside the rows asked for, that count is exact, and the records section (compressed or not)
is never decompressed. Integrity still holds: each batch's CRC-32C is computed over its bytes as they
stream past (checking needs no decompression), and the leader-epoch rule is the reader's.

Where a header cannot say it exactly (a batch cut by the split's first or last offset or by an offset
filter, partly inside an aborted transaction or holding a dropped violation, timestamp rules or filters,
legacy magic 0/1 entries, anything malformed), the split is counted by `read_partition` itself, so the
answer is always the reader's: `reference_count` is that path, and the tests hold the two equal.

A hybrid query's live tail is counted the same way from the batch headers of the brokers' Fetch
responses (`spark_reader.tail.count_tail`, `spark_reader.brokerwire.count`).
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Iterable, Iterator

from rsm.fetch.reader import SegmentReader, cipher_for
from segment_format.crc import crc32c
from segment_format.records import CONTROL_FLAG_MASK, NO_PARTITION_LEADER_EPOCH, TRANSACTIONAL_FLAG_MASK
from segment_format.segment import leader_epoch_problem
from spark_reader.errors import ReaderError
from spark_reader.filters import UNBOUNDED
from spark_reader.partition_reader import TieredPartition, _chunks, _violations, clients, read_partition
from spark_reader.tail import BrokerTailPartition, count_tail

log = logging.getLogger(__name__)

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_CRC_FROM = 21  # the CRC covers the attributes to the batch's end
_AFTER_LENGTH = 12


class _Undecidable(Exception):
    """A header cannot give this split's count exactly: count it by reading."""


def reference_count(part: TieredPartition | BrokerTailPartition) -> int:
    """The rows `read_partition` gives for this split (decoding every batch): the definition."""
    return sum(batch.num_rows for batch in read_partition(part, columns=("offset",)))


def count_partition(part: object) -> int:
    """The rows of one input partition, from batch headers where they say it exactly (module docstring)."""
    if isinstance(part, BrokerTailPartition):  # a hybrid query's live tail: the brokers' batch headers
        return count_tail(part)
    if not isinstance(part, TieredPartition):
        return 0
    if part.start_timestamp is not None or part.end_timestamp is not None:
        return reference_count(part)
    if part.filters.timestamp_us != UNBOUNDED or part.filters.offset.values is not None:
        return reference_count(part)
    split, settings = part.split, part.settings
    if split.end_position <= split.start_position:
        return 0
    store, keyring = clients(settings.rsm_configs)
    where = store.describe(split.bucket, split.manifest.location.get("log", "?"))
    try:
        reader = SegmentReader(store, split.bucket, split.manifest, cipher_for(split.manifest, keyring))
        return _count_headers(part, _chunks(reader, split.start_position, split.end_position), where)
    except _Undecidable as why:
        log.debug("kafka-tiered: counting %r by reading (%s)", part, why)
    except ReaderError:
        raise
    except Exception:  # noqa: BLE001 - the reader names every failure (decryption, data loss) its way
        log.debug("kafka-tiered: counting %r by reading (headers failed)", part, exc_info=True)
    return reference_count(part)


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
                    raise _Undecidable("legacy magic")
                continue
            fields = _HEADER.unpack(head)
            if fields[3] != 2 or fields[1] < HEADER_SIZE - _AFTER_LENGTH:
                raise _Undecidable("not a magic-2 batch")
            crc = crc32c(bytes(head[_CRC_FROM:]))
            head.clear()
            left = fields[1] + _AFTER_LENGTH - HEADER_SIZE
            if not left:
                yield fields, crc == fields[4]
    if head or left:
        raise _Undecidable("a batch is cut by the split's end")


def _count_headers(part: TieredPartition, chunks: Iterable[memoryview], where: str) -> int:
    split, settings = part.split, part.settings
    lo, hi = split.first_offset, split.last_offset
    f_lo, f_hi = part.filters.offset.lo, part.filters.offset.hi
    lo = lo if f_lo is None else max(lo, f_lo)
    hi = hi if f_hi is None else min(hi, f_hi)
    dropped = sorted(_violations(split)) if settings.violations == "drop" else []
    chain = split.manifest.segment.segment_leader_epochs
    epochs = {int(e) for e in chain} if chain else None
    total = 0
    for fields, crc_ok in _batches(chunks):
        base, _, epoch, _, _, attributes, last_delta, _, _, producer_id, _, _, records = fields
        if not crc_ok:
            raise _Undecidable("CRC mismatch")  # the decoder names it exactly
        if not records:
            continue
        if epochs is not None and epoch != NO_PARTITION_LEADER_EPOCH and epoch not in epochs:
            raise ReaderError(f"refusing {where}: {leader_epoch_problem(base, epoch, sorted(epochs))}")
        if attributes & CONTROL_FLAG_MASK:
            continue
        last = base + last_delta
        if last < lo or base > hi:
            continue
        if base < lo or last > hi:
            raise _Undecidable("a batch cut by the offsets asked for")
        if dropped and bisect.bisect_left(dropped, base) < bisect.bisect_right(dropped, last):
            raise _Undecidable("a dropped violation")
        if attributes & TRANSACTIONAL_FLAG_MASK and _aborted(part, producer_id, base, last):
            continue
        total += records
    return total


def _aborted(part: TieredPartition, producer_id: int, base: int, last: int) -> bool:
    """Whether the whole batch lies in an aborted transaction of its producer (a part of it: undecidable)."""
    for pid, first, end in part.aborted:
        if pid != producer_id or end < base or first > last:
            continue
        if first <= base and last <= end:
            return True
        raise _Undecidable("a batch partly in an aborted transaction")
    return False
