"""A demo partition written with `segment_format`, shaped like a real broker's partition directory.

The quickstart and the tests need realistic input without a broker: several rolled segments in
different codecs, headers, null keys, an idempotent producer and a committed and an aborted
transaction, each segment with the companion files Kafka hands the RemoteStorageManager (offset and
time index, transaction index where something was aborted, producer snapshot, leader-epoch
checkpoint). Content is seeded, so the same seed always gives the same bytes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from segment_format import (
    CompressionType,
    ControlRecordType,
    EpochEntry,
    LeaderEpochCheckpoint,
    ProducerSnapshot,
    ProducerStateEntry,
    SegmentWriter,
    build_batch,
    build_control_batch,
)

DEMO_CODECS: tuple[CompressionType, ...] = (
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
)
_BASE_TIMESTAMP = 1_735_689_600_000  # 2025-01-01T00:00:00Z
_IDEMPOTENT_PID = 4000
_TXN_PID = 5000


@dataclass(frozen=True)
class DemoSegment:
    """One rolled segment of the demo partition and the companion files Kafka would upload with it."""

    base_offset: int
    end_offset: int
    codec: CompressionType
    log: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot: Path
    leader_epoch_checkpoint: bytes
    max_timestamp_ms: int

    @property
    def size_in_bytes(self) -> int:
        return self.log.stat().st_size


def _value(rng: random.Random, i: int, size: int) -> bytes:
    # JSON-ish values with some repetition, so compression has something realistic to work on
    words = ("order", "payment", "refund", "shipment", "invoice", "customer")
    text = f'{{"id":{i},"kind":"{rng.choice(words)}","amount":{rng.randint(1, 99999)},"note":"'
    filler = "".join(rng.choice("abcdefghij ") for _ in range(max(0, size - len(text) - 2)))
    return (text + filler + '"}').encode()


def write_demo_partition(
    directory: Path,
    *,
    records_per_segment: int = 2000,
    value_size: int = 100,
    batch_records: int = 50,
    seed: int = 7,
) -> list[DemoSegment]:
    """Write one segment per codec into ``directory`` (a partition directory) and return them.

    The last segment carries a committed and an aborted transaction, so it has a ``.txnindex``.
    """
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    segments: list[DemoSegment] = []
    offset = 0
    sequence = 0
    timestamp = _BASE_TIMESTAMP
    epochs = LeaderEpochCheckpoint([EpochEntry(0, 0)])
    for n, codec in enumerate(DEMO_CODECS):
        base = offset
        last_txn_segment = n == len(DEMO_CODECS) - 1
        with SegmentWriter(directory, base) as writer:
            written = 0
            while written < records_per_segment:
                count = min(batch_records, records_per_segment - written)
                records = []
                for _ in range(count):
                    timestamp += rng.randint(0, 40)
                    key = None if rng.random() < 0.1 else f"customer-{rng.randint(1, 500)}".encode()
                    headers = [("source", b"quickstart")] if rng.random() < 0.3 else []
                    records.append((key, _value(rng, offset + len(records), value_size), headers, timestamp))
                writer.append(
                    build_batch(
                        records,
                        base_offset=offset,
                        compression=codec,
                        producer_id=_IDEMPOTENT_PID,
                        producer_epoch=0,
                        base_sequence=sequence,
                    )
                )
                offset += count
                sequence += count
                written += count
            if last_txn_segment:
                for outcome in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    txn_records = [
                        (b"txn", f"{outcome.name.lower()}-{i}".encode(), [], timestamp) for i in range(5)
                    ]
                    writer.append(
                        build_batch(
                            txn_records,
                            base_offset=offset,
                            compression=codec,
                            producer_id=_TXN_PID,
                            producer_epoch=0,
                            base_sequence=0,
                            is_transactional=True,
                        )
                    )
                    offset += len(txn_records)
                    timestamp += 1
                    writer.append(
                        build_control_batch(
                            outcome,
                            base_offset=offset,
                            producer_id=_TXN_PID,
                            producer_epoch=0,
                            timestamp=timestamp,
                        )
                    )
                    offset += 1
        stem = f"{base:020d}"
        snapshot = directory / f"{offset:020d}.snapshot"
        snapshot.write_bytes(
            ProducerSnapshot(
                [ProducerStateEntry(_IDEMPOTENT_PID, 0, sequence - 1, offset - 1, 0, timestamp, -1, -1)]
            ).to_bytes()
        )
        txn_index = writer.txn_index_path if writer.txn_index_path.exists() else None
        segments.append(
            DemoSegment(
                base_offset=base,
                end_offset=offset - 1,
                codec=codec,
                log=writer.log_path,
                offset_index=directory / f"{stem}.index",
                time_index=directory / f"{stem}.timeindex",
                transaction_index=txn_index,
                producer_snapshot=snapshot,
                leader_epoch_checkpoint=epochs.to_bytes(),
                max_timestamp_ms=timestamp,
            )
        )
    (directory / "leader-epoch-checkpoint").write_bytes(epochs.to_bytes())
    return segments
