"""Reading one input partition on an executor: chunks through the RSM's fetch path, decoded by the C kernel.

A task downloads only the chunks of its byte range (one ranged GET each, the next one in flight while the
current one decodes), decrypts, decompresses and checks them with the RSM's own `SegmentReader`, and hands
the bytes to the columnar decoder as a stream: memory stays at about two chunks plus one decoded batch,
whatever the segment size. Rows then pass, in order:

1. the timestamp rules of `startingTimestamp` / `endingTimestamp` (rows before the first record with a
   timestamp >= T, or from it on, as Kafka's offsetsForTimes would place the offset; control records
   count, as they do in Kafka's time lookup);
2. the leader-epoch check: every row's batch must carry one of the segment's leader epochs (the manifest's
   `segment_leader_epochs`), the copy's own rule (`rsm.validation`), since the history that chose this
   segment for these offsets trusted those epochs and the field lies outside the batch CRC; a batch of
   another epoch fails the task with one line naming the object and the batch's offset. Rows of epoch -1
   are legacy magic 0/1 messages (no epoch; the copy refuses a magic-2 batch of epoch -1) and pass; an
   empty batch (left by compaction) has no rows and nothing to misplace;
3. the filter that makes them a consumer's rows: no control records, offsets of this partition's history
   only, no records of aborted transactions under read_committed, the pushed filters, and (violations=drop)
   no flagged records;
4. the conversion to Spark's Kafka source schema.

Clients (store, keyring) are made lazily once per Python worker and reused by later tasks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rsm.api.errors import RemoteStorageException
from rsm.catalog.splits import ReadSplit
from rsm.config.keyring import Keyring, keyring_for
from rsm.config.settings import RsmConfig
from rsm.fetch.prefetch import prefetched
from rsm.fetch.reader import SegmentReader, cipher_for
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.pieces import TransformError
from segment_format.columnar import iter_stream_record_batches
from segment_format.errors import CorruptRecordError
from segment_format.records import NO_PARTITION_LEADER_EPOCH
from segment_format.segment import leader_epoch_problem
from spark_reader.counting import Undecidable, count_headers
from spark_reader.errors import DataLossError, ReaderError, spark_error
from spark_reader.filters import NO_FILTERS, UNBOUNDED, PushedFilters
from spark_reader.offset_range import OffsetRangePartition
from spark_reader.schema import VIOLATION_COLUMN, decoder_projection, to_spark_batch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadSettings:
    """What every task of a query shares: the store (may hold credentials: never shown) and the options."""

    rsm_configs: tuple[tuple[str, str], ...] = field(repr=False)
    include_headers: bool
    violations: str  # include | drop | flag
    fail_on_data_loss: bool


class TieredPartition(OffsetRangePartition):
    """One Spark input partition: a split of a segment copy, with everything needed to read it exactly
    (the store's variant of `OffsetRangePartition`)."""

    def __init__(
        self,
        split: ReadSplit,
        settings: ReadSettings,
        *,
        aborted: tuple[tuple[int, int, int], ...] = (),
        start_timestamp: int | None = None,
        end_timestamp: int | None = None,
        filters: PushedFilters = NO_FILTERS,
    ) -> None:
        super().__init__(None)
        self.split = split
        self.settings = settings
        self.aborted = aborted  # (producer id, first offset, last offset) of aborted transactions
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp
        self.filters = filters

    def __repr__(self) -> str:
        s = self.split
        return (
            f"TieredPartition({s.topic}-{s.partition} offsets {s.first_offset}..{s.last_offset}, "
            f"bytes {s.start_position}..{s.end_position} of {self.source})"
        )

    @property
    def topic(self) -> str:  # type: ignore[override]
        return self.split.topic

    @property
    def partition(self) -> int:  # type: ignore[override]
        return self.split.partition

    @property
    def start(self) -> int:  # type: ignore[override]
        return self.split.first_offset

    @property
    def end(self) -> int:  # type: ignore[override]
        return self.split.last_offset + 1

    def rows(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        return _store_rows(self, columns)

    def count(self) -> int:
        return _store_count(self)

    def stored_bytes(self) -> int:
        """The segment's bytes the split reads (what the columnar scan packs tasks by)."""
        return max(0, self.split.end_position - self.split.start_position)

    @property
    def include_headers(self) -> bool:
        return self.settings.include_headers

    @property
    def flags_violations(self) -> bool:
        return self.settings.violations == "flag"

    @property
    def source(self) -> str:
        """The segment copy's log object: its bucket and key."""
        return f"{self.split.bucket}/{self.split.manifest.location.get('log')}"


_clients: dict[tuple[tuple[str, str], ...], tuple[ObjectStore, Keyring | None]] = {}
_clients_lock = threading.Lock()


def clients(rsm_configs: tuple[tuple[str, str], ...]) -> tuple[ObjectStore, Keyring | None]:
    """The store and keyring for these store options, made once per Python worker."""
    with _clients_lock:
        hit = _clients.get(rsm_configs)
        if hit is None:
            config = RsmConfig(dict(rsm_configs))
            hit = (ObjectStore.from_config(config), keyring_for(config))  # the keyring file's keys and KMS's
            _clients[rsm_configs] = hit
        return hit


def _chunks(reader: SegmentReader, start: int, end: int) -> Iterator[memoryview]:
    """Bytes [start, end) of the segment as decoded chunk pieces, the next chunk fetched in the background."""
    cs = reader.manifest.log.chunk_size
    first, last = start // cs, (end - 1) // cs
    for i, data in enumerate(prefetched(reader.chunk, range(first, last + 1), "tiered-read"), first):
        lo = start - i * cs if i == first else 0
        hi = end - i * cs if i == last else len(data)
        yield memoryview(data)[lo:hi]


class _RowRules:
    """The stateful part of a split's rows: where the timestamp rules start and stop it."""

    def __init__(self, start_timestamp: int | None, end_timestamp: int | None) -> None:
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp
        self.started = start_timestamp is None
        self.stopped = False

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        ts = batch.column("timestamp").to_numpy()
        lo, hi = 0, batch.num_rows
        if not self.started:
            hits = np.flatnonzero(ts >= self.start_timestamp)
            if not len(hits):
                return None
            lo = int(hits[0])
            self.started = True
        if self.end_timestamp is not None:
            hits = np.flatnonzero(ts[lo:] >= self.end_timestamp)
            if len(hits):
                hi = lo + int(hits[0])
                self.stopped = True
        return batch.slice(lo, hi - lo) if (lo, hi) != (0, batch.num_rows) else batch


def _check_leader_epochs(batch: pa.RecordBatch, epochs: pa.Array, where: str) -> None:
    """Refuse rows whose batch carries a leader epoch the segment does not have (see the module).

    A batch's rows share its epoch and a segment is mostly one epoch's: when the column's minimum and
    maximum are the same known epoch, that settles it without a lookup per row."""
    column = batch.column("partition_leader_epoch")
    bounds = pc.min_max(column)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low == high and (low == NO_PARTITION_LEADER_EPOCH or low in epochs.to_pylist()):
        return
    ok = pc.or_(pc.is_in(column, value_set=epochs), pc.equal(column, NO_PARTITION_LEADER_EPOCH))
    if ok.false_count:
        i = int(np.flatnonzero(np.logical_not(ok.to_numpy(zero_copy_only=False)))[0])
        base = batch.column("batch_base_offset")[i].as_py()
        problem = leader_epoch_problem(base, column[i].as_py(), epochs.to_pylist())
        raise ReaderError(f"refusing {where}: {problem}")


def _keep_mask(batch: pa.RecordBatch, part: TieredPartition, dropped: frozenset[int]) -> pa.Array:
    split = part.split
    offsets = batch.column("offset")
    keep = pc.and_(
        pc.invert(batch.column("is_control")),
        pc.and_(pc.greater_equal(offsets, split.first_offset), pc.less_equal(offsets, split.last_offset)),
    )
    if part.aborted:
        txn = batch.column("is_transactional")
        pids = batch.column("producer_id")
        for pid, first, last in part.aborted:
            hit = pc.and_(
                pc.and_(txn, pc.equal(pids, pid)),
                pc.and_(pc.greater_equal(offsets, first), pc.less_equal(offsets, last)),
            )
            keep = pc.and_(keep, pc.invert(hit))
    pushed = part.filters.row_mask(offsets, batch.column("timestamp"))
    if pushed is not None:
        keep = pc.and_(keep, pushed)
    if dropped:
        keep = pc.and_(keep, pc.invert(pc.is_in(offsets, value_set=pa.array(sorted(dropped), pa.int64()))))
    return keep


def _violations(split: ReadSplit) -> dict[int, str]:
    report = split.manifest.validation or {}
    out = {}
    for v in report.get("violations") or ():
        try:
            out[int(v["offset"])] = str(v.get("reason", "violation"))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def read_partition(part: InputPartition, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition as Arrow batches of the source's schema, or of only its `columns`
    in that order (the columnar scan's pruning: the decoder then copies no key, value or headers not
    asked for; every rule below still runs on the batch fields, which are always decoded): its variant's
    `rows`, a store split's here, a hybrid query's live tail from the brokers (`spark_reader.tail`) in
    the same schema. A query planned to nothing gives none (Spark still runs one task with a placeholder).

    The source's errors leave as `errors.TaskError`: one line in Spark's message, no traceback."""
    if not isinstance(part, OffsetRangePartition):
        return
    try:
        yield from part.rows(columns)
    except ReaderError as exc:
        raise spark_error(exc) from None


def _store_count(part: TieredPartition) -> int:
    """`TieredPartition.count`: from the batch headers of its bytes (`spark_reader.counting`) where they
    say it exactly, else by reading it (timestamp rules, filters headers cannot settle, undecidable)."""
    if part.start_timestamp is not None or part.end_timestamp is not None:
        return part.read_count()
    if part.filters.timestamp_us != UNBOUNDED or part.filters.offset.values is not None:
        return part.read_count()
    split, settings = part.split, part.settings
    if split.end_position <= split.start_position:
        return 0
    store, keyring = clients(settings.rsm_configs)
    where = store.describe(split.bucket, split.manifest.location.get("log", "?"))
    f_lo, f_hi = part.filters.offset.lo, part.filters.offset.hi
    first = split.first_offset if f_lo is None else max(split.first_offset, f_lo)
    last = split.last_offset if f_hi is None else min(split.last_offset, f_hi)
    chain = split.manifest.segment.segment_leader_epochs
    try:
        reader = SegmentReader(store, split.bucket, split.manifest, cipher_for(split.manifest, keyring))
        return count_headers(
            _chunks(reader, split.start_position, split.end_position),
            first,
            last,
            where=where,
            epochs={int(e) for e in chain} if chain else None,
            dropped=sorted(_violations(split)) if settings.violations == "drop" else (),
            aborted=part.aborted,
        )
    except Undecidable as why:
        log.debug("kafka-tiered: counting %r by reading (%s)", part, why)
    except ReaderError:
        raise
    except Exception:  # noqa: BLE001 - the reader names every failure (decryption, data loss) its way
        log.debug("kafka-tiered: counting %r by reading (headers failed)", part, exc_info=True)
    return part.read_count()


def _store_rows(part: TieredPartition, columns: Sequence[str] | None) -> Iterator[pa.RecordBatch]:
    """`TieredPartition.rows` (see the module docstring)."""
    split, settings = part.split, part.settings
    try:  # the executor's own store client and keyring file (the driver's opened: this host's may not)
        store, keyring = clients(settings.rsm_configs)
    except RemoteStorageException as exc:
        raise ReaderError(f"{split.topic}-{split.partition}: on this executor: {exc}") from None
    where = store.describe(split.bucket, split.manifest.location.get("log", "?"))
    if split.end_position <= split.start_position:
        return
    try:
        reader = SegmentReader(store, split.bucket, split.manifest, cipher_for(split.manifest, keyring))
    except RemoteStorageException as exc:
        raise ReaderError(f"cannot decrypt {where}: {exc}") from None
    violations = _violations(split) if settings.violations != "include" else {}
    dropped = frozenset(violations) if settings.violations == "drop" else frozenset()
    rules = _RowRules(part.start_timestamp, part.end_timestamp)
    chain = split.manifest.segment.segment_leader_epochs
    epochs = pa.array(sorted(int(e) for e in chain), pa.int32()) if chain else None
    batches = iter_stream_record_batches(
        _chunks(reader, split.start_position, split.end_position),
        file=where,
        base_position=split.start_position,
        projection=decoder_projection(columns, settings.include_headers),
    )
    want_flag = settings.violations == "flag" and (columns is None or VIOLATION_COLUMN in columns)
    try:
        for batch in batches:
            if epochs is not None:
                _check_leader_epochs(batch, epochs, where)
            if rules.start_timestamp is not None or rules.end_timestamp is not None:
                ruled = rules.apply(batch)
                if ruled is None:
                    continue
                batch = ruled
            keep = _keep_mask(batch, part, dropped)
            if keep.true_count != batch.num_rows:
                batch = batch.filter(keep)
            if batch.num_rows:
                flag = None
                if want_flag:
                    flag = pa.array(
                        [violations.get(o) for o in batch.column("offset").to_pylist()], pa.string()
                    )
                yield to_spark_batch(
                    batch, split.topic, split.partition, settings.include_headers, flag, columns
                )
            if rules.stopped:
                return
    except ObjectNotFound:
        message = (
            f"{split.topic}-{split.partition}: segment {where} was deleted after the query was planned "
            f"(offsets {split.first_offset}..{split.last_offset})"
        )
        if settings.fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to skip it") from None
        log.warning("%s; skipped (failOnDataLoss=false)", message)
    except (CorruptRecordError, TransformError) as exc:
        raise ReaderError(f"corrupt data in {where}: {exc}") from None
    except RemoteStorageException as exc:
        raise ReaderError(f"{split.topic}-{split.partition}: {exc}") from None
