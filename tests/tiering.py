"""Tier partitions through the real RSM the way a broker does, for the catalog and Spark reader tests.

`PartitionLog` plays the partition leader: it appends batches (plain, transactional, control markers,
any codec, any leader epoch), rolls segments with `SegmentWriter` (Kafka's index layout, the
`.txnindex` a broker writes), a producer snapshot listing transactions still open at the roll, and the
leader-epoch checkpoint, and copies each rolled segment with `copy_log_segment_data`. `records` keeps
what a consumer of the final log would read, independently of the reader under test.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rsm import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.metadata import CustomMetadata
from segment_format.log_entries import iter_batches
from segment_format.producer_snapshot import ProducerSnapshot, ProducerStateEntry
from segment_format.records import ControlRecordType
from segment_format.transaction_index import AbortedTxn, TransactionIndex
from segment_format.writer import SegmentWriter, build_batch, build_control_batch

BASE_TS = 1_700_000_000_000


@dataclass
class Expected:
    """One row a consumer reads: (offset, key, value, timestamp ms, headers, producer id, transactional)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int = -1
    txn: bool = False
    aborted: bool = False


@dataclass
class PartitionLog:
    rsm: RemoteStorageManager
    tip: TopicIdPartition
    directory: Path
    epoch: int = 0
    next_offset: int = 0
    epochs: dict[int, int] = field(default_factory=dict)  # the leader-epoch cache: epoch -> start offset
    records: list[Expected] = field(default_factory=list)
    pending: list[bytes] = field(default_factory=list)
    open_txns: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(
        default_factory=list
    )  # of the pending segment, as the broker indexes them
    log_config: dict[str, str] | None = None

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.epochs.setdefault(self.epoch, self.next_offset)

    def new_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.epochs[epoch] = self.next_offset

    def append(
        self,
        n: int,
        *,
        codec: int = 0,
        value_size: int = 100,
        producer_id: int = -1,
        transactional: bool = False,
        headers: bool = True,
        ts_step: int = 1,
        timestamps: list[int] | None = None,
        incompressible: bool = False,
    ) -> list[Expected]:
        base = self.next_offset
        rows = []
        for i in range(n):
            off = base + i
            ts = timestamps[i] if timestamps is not None else BASE_TS + off * ts_step
            hs = (("h", f"v{off}".encode()), ("n", None)) if headers and off % 3 == 0 else ()
            if incompressible:
                value = random.Random(off).randbytes(value_size)
            else:
                value = (f"value-{off}-".encode() * (value_size // 8 + 1))[:value_size]
            key = None if off % 7 == 0 else f"key-{off}".encode()
            rows.append(Expected(off, key, value, ts, hs, producer_id, transactional))
        raw = build_batch(
            [(r.key, r.value, r.headers, r.timestamp) for r in rows],
            base_offset=base,
            compression=codec,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            partition_leader_epoch=self.epoch,
            is_transactional=transactional,
        )
        if transactional:
            self.open_txns.setdefault(producer_id, base)
        self.pending.append(raw)
        self.records += rows
        self.next_offset += n
        return rows

    def compact_away(self, n: int) -> None:
        """`n` offsets the log cleaner removed: no batch holds them, and a roll right after leaves them
        between the segment's last batch and its end offset (Kafka's: the next segment's base - 1)."""
        self.next_offset += n

    def end_txn(self, producer_id: int, commit: bool) -> None:
        first = self.open_txns.pop(producer_id)
        raw = build_control_batch(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            base_offset=self.next_offset,
            producer_id=producer_id,
            producer_epoch=0,
            timestamp=BASE_TS + self.next_offset,
            partition_leader_epoch=self.epoch,
        )
        if not commit:
            others = [o for p, o in self.open_txns.items() if p != producer_id]
            lso = min(others) if others else self.next_offset + 1
            self.aborted.append(AbortedTxn(producer_id, first, self.next_offset, lso))
            for r in self.records:
                if r.producer_id == producer_id and r.txn and r.offset >= first:
                    r.aborted = True
        self.pending.append(raw)
        self.next_offset += 1

    def roll(
        self, *, segment_id: uuid.UUID | None = None, copy: bool = True
    ) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
        """Close the pending batches as a segment and (by default) tier it."""
        base = int.from_bytes(self.pending[0][:8], "big")
        seg_dir = self.directory / uuid.uuid4().hex[:8]
        with SegmentWriter(seg_dir, base, index_interval_bytes=1024) as w:
            for raw in self.pending:
                w.append(raw)
        last = w.next_offset - 1  # the last batch's last offset
        end = self.next_offset - 1  # Kafka's endOffset: past `last` after compacted-away offsets
        # the broker's producer state spans segments: an abort whose transaction began in an earlier
        # segment is indexed here with its true first offset (the writer sees only this segment)
        txn = seg_dir / f"{base:020d}.txnindex"
        if self.aborted:
            txn.write_bytes(TransactionIndex(self.aborted).to_bytes())
        self.aborted = []
        max_ts = max(b.max_timestamp for raw in self.pending for _, b in iter_batches(raw))
        self.pending = []
        snapshot = seg_dir / f"{end + 1:020d}.snapshot"
        entries = [
            ProducerStateEntry(pid, 0, 0, last, 0, BASE_TS, 0, first)
            for pid, first in sorted(self.open_txns.items())
        ]
        snapshot.write_bytes(ProducerSnapshot(entries).to_bytes())
        live = {e: o for e, o in self.epochs.items() if o <= end}
        live = {e: o for e, o in live.items() if not any(e2 > e and o2 <= base for e2, o2 in live.items())}
        chain = {e: max(o, base) for e, o in live.items()}
        checkpoint = f"0\n{len(chain)}\n" + "".join(f"{e} {o}\n" for e, o in sorted(chain.items()))
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(self.tip, segment_id or uuid.uuid4()),
            start_offset=base,
            end_offset=end,
            max_timestamp_ms=max_ts,
            broker_id=1,
            event_timestamp_ms=BASE_TS,
            segment_size_in_bytes=w.size_in_bytes,
            segment_leader_epochs=chain,
        )
        data = LogSegmentData(
            w.log_path,
            w.index_path,
            w.time_index_path,
            txn if txn.exists() else None,
            snapshot,
            checkpoint.encode(),
        )
        if copy:
            self.tier(metadata, data)
        return metadata, data

    def tier(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> RemoteLogSegmentMetadata:
        custom: CustomMetadata | None = self.rsm.copy_log_segment_data(metadata, data, self.log_config)
        md = dataclasses.replace(metadata, custom_metadata=custom)
        self.copied.append(md)
        return md

    def consumer_rows(self, read_committed: bool = False) -> list[Expected]:
        """What a consumer of this partition reads (records still in an open transaction excluded under
        read_committed, as the last stable offset stops it)."""
        rows = [r for r in self.records if not (read_committed and r.aborted)]
        if read_committed and self.open_txns:
            lso = min(self.open_txns.values())
            rows = [r for r in rows if r.offset < lso]
        return rows


def tier_mixed_topic(
    base: Path,
    topic: str,
    store: dict[str, str],
    *,
    records: int = 120,
    tail_records: int = 60,
    tail_value_size: int = 40,
    txn_partition: int = 0,
    partitions: int = 3,
    segments: int = 3,
) -> list[PartitionLog]:
    """A topic of `partitions` x `segments` segments tiered into `store` (8 KiB chunks): codecs mixed, each
    segment ending with `tail_records` zstd records of `tail_value_size`-byte values, and a committed and an
    aborted transaction in the second segment of `txn_partition`."""
    rsm = RemoteStorageManager()
    rsm.configure({**store, "chunk.size": "8192"})
    tid = uuid.uuid4()
    logs = []
    try:
        for p in range(partitions):
            log = PartitionLog(rsm, TopicIdPartition(tid, topic, p), base / f"w{p}")
            for s in range(segments):
                log.append(records, codec=(p + s) % 5)
                if p == txn_partition and s == 1:
                    log.append(20, producer_id=11, transactional=True)
                    log.append(15, producer_id=12, transactional=True)
                    log.end_txn(11, commit=True)
                    log.end_txn(12, commit=False)
                log.append(tail_records, codec=4, value_size=tail_value_size)
                log.roll()
            logs.append(log)
    finally:
        rsm.close()
    return logs


def tier_directory(
    rsm: RemoteStorageManager,
    tip: TopicIdPartition,
    out_dir: Path,
    log_config: dict[str, str] | None = None,
) -> RemoteLogSegmentMetadata:
    """Tier a segment a broker (or the Java oracle) left in `out_dir`: `<base>.log` with its indexes,
    producer snapshot and `leader-epoch-checkpoint`; metadata as the broker's RemoteLogManager builds it."""
    from segment_format.leader_epoch import LeaderEpochCheckpoint

    log_path = next(out_dir.glob("*.log"))
    base = int(log_path.stem)
    last, max_ts = base - 1, -1
    for _, batch in iter_batches(log_path.read_bytes(), file=str(log_path)):
        last, max_ts = batch.last_offset, max(max_ts, batch.max_timestamp)
    checkpoint_path = out_dir / "leader-epoch-checkpoint"
    checkpoint = checkpoint_path.read_bytes() if checkpoint_path.exists() else b"0\n1\n0 0\n"
    epochs = {
        e.epoch: max(e.start_offset, base) for e in LeaderEpochCheckpoint.from_bytes(checkpoint).entries
    }
    snapshots = sorted(out_dir.glob("*.snapshot"))
    snapshot = snapshots[-1] if snapshots else out_dir / f"{last + 1:020d}.snapshot"
    if not snapshots:
        snapshot.write_bytes(ProducerSnapshot([]).to_bytes())
    stem = log_path.with_suffix("")
    txn = stem.with_suffix(".txnindex")
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset=base,
        end_offset=last,
        max_timestamp_ms=max_ts,
        broker_id=1,
        event_timestamp_ms=BASE_TS,
        segment_size_in_bytes=log_path.stat().st_size,
        segment_leader_epochs=epochs,
    )
    data = LogSegmentData(
        log_path, stem.with_suffix(".index"), stem.with_suffix(".timeindex"), txn if txn.exists() else None,
        snapshot, checkpoint,
    )  # fmt: skip
    custom = rsm.copy_log_segment_data(metadata, data, log_config)
    return dataclasses.replace(metadata, custom_metadata=custom)
