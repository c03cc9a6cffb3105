"""Planning a query: partitions' histories + offset options + pushed filters -> Spark input partitions.

Everything here runs on the driver from manifests and stored indexes only (no `.log` byte is read):

- each partition's range comes from the offset options, resolved by `spark_reader.offset_resolver` (the
  one copy of the rules for batch, stream and hybrid reads: earliest and latest from the history, under
  read_committed stopped at the oldest transaction still open at the end of the tiered data, as a
  consumer stops at the last stable offset), then narrowed by pushed `offset` filters;
- timestamp options pick the first segment whose maximum timestamp reaches them and hand the exact cut
  to the task reading that segment; pushed `timestamp >= T` filters skip segments and the start of a
  segment through the time index;
- each slice of a segment becomes one input partition, or several for big segments (128 MiB of log
  bytes each, `maxRecordsPerPartition`, `minPartitions`), cut at batch boundaries near chunk boundaries;
- under read_committed, aborted transactions are gathered from the transaction indexes of the segments
  from the start of the range on (an abort's records can sit in segments before its marker), up to the
  first abort written when no transaction begun before the range's end was still open (its last stable
  offset: Kafka's own bound) or the first segment at or past the end whose producer snapshot shows no
  such transaction open: every marker of a transaction touching the range lies at or before it.

Holes are data loss (failOnDataLoss: fail naming the partition and the offsets, or warn and read the
rest; `rsm.catalog.holes`): offsets between segments that no copy holds, where the plan reads; and,
for a read from a partition's start (earliest, a timestamp before its first segment, an offset below
it), the offsets between where the log starts and the store's first one: the log start is the brokers'
(`kafka.bootstrap.servers`, asked by `spark_reader.hybrid`), else the mark the RSM's deletes left
(`rsm.store.log_starts`). A location the topic's record names that cannot be read is data loss too
(`spark_reader.topics`).

Histories are `rsm.catalog.ranged.RangedHistory`: a listing per partition, then the manifests
a range needs: earliest and latest from the first and last copies, a timestamp by bisection, the range's
own copies; so a narrow query's requests grow with its range, not with the partition's history.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.catalog import SegmentSlice, TopicCatalog
from rsm.catalog.holes import (
    Hole,
    before_start,
    between_segments,
    broker_start_why,
    clipped,
    recorded_start_why,
)
from rsm.catalog.segments import StoredSegment
from rsm.catalog.splits import SegmentIndexes, split_slice
from rsm.config.keyring import Keyring, is_kms_key, keyring_for
from rsm.store.objects import ObjectStore
from rsm.stored.data_keys import unwrap_data_key
from rsm.stored.pieces import TransformError
from segment_format.errors import CorruptRecordError
from spark_reader.errors import DataLossError, ReaderError
from spark_reader.filters import PushedFilters
from spark_reader.offset_resolver import OffsetResolver, PartitionFacts, Resolved
from spark_reader.offsets import Position
from spark_reader.options import IsolationLevel, SourceOptions
from spark_reader.partition_reader import ReadSettings, TieredPartition
from spark_reader.topics import SelectedPartition, select_partitions

log = logging.getLogger(__name__)

MAX_SPLIT_BYTES = 128 << 20


@dataclass(frozen=True)
class PartitionRange:
    """What one partition contributes: offsets [start, end) and the timestamp cuts inside them."""

    selected: SelectedPartition
    start: int
    end: int
    start_timestamp: int | None = None
    start_slice: SegmentSlice | None = None
    end_timestamp: int | None = None
    end_slice: SegmentSlice | None = None
    hole_before: Hole | None = None  # offsets before `start` the read asked for and the store lacks


class Planner:
    """The driver's view of the store for one query (catalog, indexes, keyring), made lazily."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._catalog: TopicCatalog | None = None
        self._keyring: Keyring | None = None
        self._indexes: dict[int, SegmentIndexes] = {}
        self._opened: set[str] = set()  # key ids that opened a segment's data key

    def __getstate__(self) -> dict[str, object]:  # clients are rebuilt where the planner is unpickled
        return {"opts": self.opts, "_catalog": None, "_keyring": None, "_indexes": {}, "_opened": set()}

    @property
    def catalog(self) -> TopicCatalog:
        if self._catalog is None:
            config = self.opts.rsm_config()
            try:  # read-only: a file store's missing root or bucket is refused, not made and read as empty
                store = ObjectStore.from_config(config, create=False)
                self._keyring = keyring_for(config)  # the keyring file's keys and KMS's
            except RemoteStorageException as exc:
                raise ReaderError(f"store options: {exc}") from None
            self._check_bucket(store, str(config.get("bucket")))
            if config.catalog_bucket != str(config.get("bucket")):  # where the location record lives
                self._check_bucket(store, config.catalog_bucket, "catalog.bucket")
            self._catalog = TopicCatalog(config, store)
        return self._catalog

    @staticmethod
    def _check_bucket(store: ObjectStore, bucket: str, setting: str = "bucket") -> None:
        """Refuse an S3 bucket that does not exist (the reader would otherwise find no topic): the
        configured bucket holds the record of every location a topic wrote to. The store's own check and
        wording (`ObjectStore.require_bucket`), as every command has them; buckets are never created."""
        try:
            store.require_bucket(bucket, setting)
        except ConfigException as exc:
            raise ReaderError(str(exc)) from None  # it says buckets are never created
        except Exception as exc:  # noqa: BLE001 - an unreachable endpoint is named, not a traceback
            raise ReaderError(
                f"cannot reach {store.backend.value} bucket {bucket} ({setting}) at {store.where}: {exc}"
            ) from None

    def settings(self) -> ReadSettings:
        return ReadSettings(
            rsm_configs=tuple(sorted(self.opts.rsm_configs.items())),
            include_headers=self.opts.include_headers,
            violations=self.opts.violations.value,
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )

    def indexes(self, segment: StoredSegment) -> SegmentIndexes:
        found = self._indexes.get(id(segment))
        if found is None:
            store = self.catalog.store  # also loads the keyring
            self._check_key(segment)
            found = SegmentIndexes(store, segment, self._keyring)
            self._indexes[id(segment)] = found
        return found

    def _check_key(self, segment: StoredSegment) -> None:
        """An encrypted segment whose key the driver lacks, or whose key does not open it, is refused at
        planning, in one line naming the key id and where keys come from: the executors have the same
        keyring, so every task would fail. A key is tried once per query (its first segment's data key is
        unwrapped: the manifest's bytes, no object read); a wrong key opens none of its segments."""
        encryption = segment.manifest.encryption
        if encryption is None:
            return
        if self._keyring is not None and encryption.key_id in self._keyring:
            if encryption.key_id in self._opened:
                return
            try:
                unwrap_data_key(segment.manifest, self._keyring)
            except RemoteStorageException as exc:
                where = "KMS (encryption.kms.*)" if is_kms_key(encryption.key_id) else self._keyring_source()
                raise ReaderError(f"{exc}, with {where}: give the reader the brokers' keys") from None
            self._opened.add(encryption.key_id)
            return
        raise ReaderError(
            f"{segment.manifest_key} is encrypted under key id {encryption.key_id!r}, which "
            f"{self._keyring_source()} does not hold: give the reader the brokers' keyring"
        )

    def _keyring_source(self) -> str:
        where = self.opts.rsm_config().get("encryption.keyring.path")
        return (
            f"the keyring {where} (encryption.keyring.path)"
            if where
            else "no keyring (encryption.keyring.path)"
        )

    def select(
        self,
        filters: PushedFilters,
        after: Mapping[tuple[str, int], int] | None = None,
        opts: SourceOptions | None = None,
    ) -> list[SelectedPartition]:
        """The partitions read, their histories not read yet; ``after``: (topic, partition) -> a base
        offset at or before every range to be asked (a stream's previous end), listed from there;
        ``opts``: the query's options narrowed to some of its topics (the hybrid read skips those the
        store lacks), with this planner's catalog and caches."""
        return select_partitions(
            self.catalog,
            opts or self.opts,
            filters.partition,
            after=after,
            epoch_cache=self._epoch_cache,
            data_loss=self.data_loss,
        )

    def _epoch_cache(self, segment: StoredSegment) -> tuple[tuple[int, int], ...]:
        """The newest copy's leader-epoch checkpoint (`RangedHistory` lineage); none if unreadable: its
        chain alone then, with one line saying so."""
        try:
            return self.indexes(segment).leader_epochs()
        except (CorruptRecordError, RemoteStorageException, TransformError) as exc:
            log.warning("cannot read the leader-epoch checkpoint of %s: %s", segment.manifest_key, exc)
            return ()

    # -- ranges --------------------------------------------------------------------------------------
    def data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to read what is left)")
        log.warning("%s; reading what is left (failOnDataLoss=false)", message)

    def start_hole(self, sp: SelectedPartition, log_start: int | None = None) -> Hole | None:
        """The offsets between where the partition's log starts and the store's first offset: the
        brokers' `log_start` when given, else the RSM's log-start mark; None when there is no hole."""
        if log_start is not None:
            why = broker_start_why(log_start, self.opts.bootstrap_servers or "")
        elif sp.recorded_start is not None:
            log_start, why = sp.recorded_start, recorded_start_why(sp.recorded_start)
        else:
            return None
        return before_start(sp.topic, sp.partition, sp.history.first_offset, log_start, why, sp.looked_in)

    def partition_range(
        self, sp: SelectedPartition, start: Position, end: Position, log_start: int | None = None
    ) -> PartitionRange | None:
        """Offsets [start, end) of a partition for these positions (`OffsetResolver`); None when it
        contributes nothing.

        ``log_start``: the brokers' log start offset, when asked (`spark_reader.hybrid`): a read from the
        partition's start measures the store's history against it (else against the RSM's mark)."""
        facts = PartitionFacts.of(sp.key, sp, log_start=log_start)
        return self.store_range(OffsetResolver(self).range(facts, start, end))

    def store_range(self, resolved: Resolved, stop: int | None = None) -> PartitionRange | None:
        """The store's part of a resolved range: offsets [start, stop) (`stop`: its end by default);
        None when empty, a hole the read asked for then being data loss up to `stop`."""
        sp = resolved.facts.store
        assert sp is not None
        hi = resolved.end if stop is None else stop
        if resolved.start >= hi:
            hole = resolved.hole_before
            if hole is not None and (hole := clipped(hole, None, hi - 1)) is not None:
                self.data_loss(hole.message())  # the range lies in the hole: nothing else to read
            return None
        # gaps are data loss where the plan reads (`plan`, after pushed offset filters narrowed the range):
        # finding them here would read the manifests of the whole range before the filters narrow it
        return PartitionRange(
            sp, resolved.start, hi, resolved.start_timestamp, resolved.start_slice,
            resolved.end_timestamp, resolved.end_slice, resolved.hole_before,
        )  # fmt: skip

    def stable_end(self, sp: SelectedPartition, hi: int) -> int:
        """`hi`, stopped under read_committed at the oldest transaction still open at the end of the
        tiered data (the last segment's producer snapshot): a consumer stops at the last stable offset."""
        last_slice = sp.history.last_slice
        if self.opts.isolation_level is not IsolationLevel.READ_COMMITTED or last_slice is None:
            return hi
        lso = self._open_transaction_first(last_slice.segment, f"{sp.topic}-{sp.partition}: ")
        return lso if lso is not None and lso < hi else hi

    def _open_transaction_first(self, segment: StoredSegment, where: str = "") -> int | None:
        """The first offset of the oldest transaction open at the segment's end (its producer snapshot);
        an unreadable snapshot is one line, after `where`."""
        try:
            return self.indexes(segment).open_transaction_first_offset()
        except (CorruptRecordError, RemoteStorageException) as exc:
            raise ReaderError(
                f"{where}cannot read the producer snapshot of {segment.manifest_key}: {exc}"
            ) from None

    # -- splits --------------------------------------------------------------------------------------
    def aborted(self, pr: PartitionRange) -> list[tuple[int, int, int]]:
        """Aborted transactions touching [start, end): from the segments holding offsets >= start, up to
        where no transaction begun before `end` can still be open (see the module docstring)."""
        out = []
        for s in pr.selected.history.walk(pr.start):
            idx = self.indexes(s.segment)
            complete = False
            try:
                for txn in idx.aborted_transactions():
                    if txn.last_offset >= pr.start and txn.first_offset < pr.end:
                        out.append((txn.producer_id, txn.first_offset, txn.last_offset))
                    complete = complete or txn.last_stable_offset >= pr.end
            except (CorruptRecordError, RemoteStorageException) as exc:
                raise ReaderError(
                    f"cannot read the transaction index of {s.segment.manifest_key}: {exc}"
                ) from None
            if complete:
                break
            if s.segment.end_offset >= pr.end - 1:
                still_open = self._open_transaction_first(s.segment)
                if still_open is None or still_open >= pr.end:
                    break
        return sorted(set(out))

    def plan(self, ranges: Iterable[PartitionRange], filters: PushedFilters) -> list[TieredPartition]:
        """Input partitions for the ranges (see the module docstring)."""
        settings = self.settings()
        ts_lo_ms = None if filters.timestamp_us.lo is None else -(-filters.timestamp_us.lo // 1000)
        offset_lo, offset_hi = filters.offset.span()
        work: list[tuple[PartitionRange, SegmentSlice, int, tuple[tuple[int, int, int], ...]]] = []
        for pr in ranges:
            lo = pr.start if offset_lo is None else max(pr.start, offset_lo)
            hi = pr.end - 1 if offset_hi is None else min(pr.end - 1, offset_hi)
            before = None if pr.hole_before is None else clipped(pr.hole_before, offset_lo, offset_hi)
            if before is not None:
                self.data_loss(before.message())
            if lo > hi:
                continue
            sp = pr.selected
            for hole in between_segments(
                sp.topic, sp.partition, sp.history.gaps_between(lo, hi), sp.looked_in
            ):
                self.data_loss(hole.message())
            read_committed = self.opts.isolation_level is IsolationLevel.READ_COMMITTED
            aborted = tuple(self.aborted(pr)) if read_committed else ()
            for s in pr.selected.history.between(lo, hi):
                if ts_lo_ms is not None and s.segment.max_timestamp_ms < ts_lo_ms:
                    continue
                records = s.last_offset - s.first_offset + 1
                seg_records = max(1, s.segment.end_offset - s.segment.start_offset + 1)
                estimate = s.segment.size * records // seg_records
                pieces = max(1, math.ceil(estimate / MAX_SPLIT_BYTES))
                if self.opts.max_records_per_partition:
                    pieces = max(pieces, math.ceil(records / self.opts.max_records_per_partition))
                mine = tuple(a for a in aborted if a[2] >= s.first_offset and a[1] <= s.last_offset)
                work.append((pr, s, pieces, mine))
        if self.opts.min_partitions and work:
            total = sum(p for _, _, p, _ in work)
            if total < self.opts.min_partitions:
                sizes = [max(1, s.last_offset - s.first_offset + 1) for _, s, _, _ in work]
                whole = sum(sizes)
                work = [
                    (pr, s, max(p, math.ceil(self.opts.min_partitions * n / whole)), a)
                    for (pr, s, p, a), n in zip(work, sizes, strict=True)
                ]
        out: list[TieredPartition] = []
        for pr, s, pieces, aborted in work:
            out += self._split(pr, s, pieces, aborted, filters, ts_lo_ms, settings)
        return out

    def _split(
        self,
        pr: PartitionRange,
        s: SegmentSlice,
        pieces: int,
        aborted: tuple[tuple[int, int, int], ...],
        filters: PushedFilters,
        ts_lo_ms: int | None,
        settings: ReadSettings,
    ) -> list[TieredPartition]:
        seg = s.segment
        idx = self.indexes(seg)
        start_ts = (
            pr.start_timestamp if pr.start_slice is not None and pr.start_slice.segment is seg else None
        )
        end_ts = pr.end_timestamp if pr.end_slice is not None and pr.end_slice.segment is seg else None
        try:
            start_position = None
            if start_ts is not None or ts_lo_ms is not None:
                cut = start_ts if start_ts is not None else ts_lo_ms
                assert cut is not None
                start_position = max(idx.start_position(s.first_offset), idx.position_for_timestamp(cut))
            if start_ts is not None or end_ts is not None:
                pieces = 1  # the timestamp cut is found while reading: one task reads the whole range
            splits = split_slice(pr.selected.topic, s, idx, start_position=start_position, pieces=pieces)
        except (CorruptRecordError, RemoteStorageException) as exc:
            raise ReaderError(f"cannot read the indexes of {seg.manifest_key}: {exc}") from None
        return [
            TieredPartition(
                split,
                settings,
                aborted=aborted,
                start_timestamp=start_ts,
                end_timestamp=end_ts,
                filters=filters,
            )
            for split in splits
        ]
