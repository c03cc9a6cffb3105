"""Compacted history on a real Kafka 4.4 broker: a compacted topic switched to delete and tiered.

One broker (KRaft), the JVM plugin and the Python bridge, a file store. A topic with `cleanup.policy=compact`
gets a committed and an aborted transaction, then keyed records overwritten several times and tombstones;
its log cleaner runs until a closed segment ends in a hole (its last batch below the next segment's base -
1). More transactions (one committed, one aborted) then go to the active segment, and the topic is altered
to `cleanup.policy=delete` with `remote.storage.enable=true` in one request (Kafka refuses remote storage on
a compacted topic, `LogConfig.validateNoRemoteStorageForCompactedTopic`, so the policy changes in the same
request). Kafka's RemoteLogManager hands each copy `endOffset = next segment's base - 1`, past the last
batch of a segment that ends in a hole: those copies must be taken (a refused one is retried forever and
the partition never tiers again). Once everything is tiered and gone locally, `format("kafka-tiered")` over
the store must give exactly the rows a kafka-python consumer reads from offset 0 through the broker (whose
remote reads skip the holes, KAFKA-15388), under read_uncommitted and read_committed.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from harness.kafka import tiered_storage_props
from harness.waiting import wait_until
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture

from segment_format.log_entries import iter_batches

if TYPE_CHECKING:
    from kafka.consumer.fetcher import ConsumerRecord

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

log = logging.getLogger(__name__)

TOPIC = "compacted-history"
RECORDS = 7_000
SHARED_KEYS = 1_200
VALUE_SIZE = 1_000
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1 << 20),  # Kafka 4's minimum; the cleaner merges segments only up to this size
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}
TIERED = {
    "cleanup.policy": "delete",
    "remote.storage.enable": "true",
    "segment.bytes": str(1 << 20),
    "local.retention.ms": "1000",
    "retention.ms": "-1",
}
ROW = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


def _value(tag: str) -> bytes:
    return (tag.encode() + b"/") * (VALUE_SIZE // (len(tag) + 1))


def _produce(bootstrap: str) -> None:
    """A committed and an aborted transaction, then ~7 MiB (7 segments, each too big to merge with another
    when cleaned): over the first 3000 records every tenth under a key of its own, the rest under keys
    rewritten five or six times, some of them deleted (tombstones). Kafka's cleaner keeps a magic-2 batch's
    offsets while one of its records is left (`lastOffsetDelta` is kept), so only whole batches of
    rewritten keys leave a hole: the segment holding record 3000 ends in one, and segments of rewritten
    keys only are emptied."""
    from kafka import KafkaProducer

    tx = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="compacted-tx")
    tx.init_transactions()
    _transaction(tx, "early-commit", commit=True)
    _transaction(tx, "early-abort", commit=False)
    tx.close()
    plain = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    for n in range(RECORDS):
        key = f"u{n}" if n % 10 == 0 and n < 3000 else f"k{n % SHARED_KEYS}"
        plain.send(TOPIC, key=key.encode(), value=None if n % 13 == 0 else _value(f"{key}@{n}"))
    plain.flush()
    plain.close()


def _transaction(tx: Any, name: str, *, commit: bool, n: int = 5) -> None:  # noqa: ANN401
    tx.begin_transaction()
    for i in range(n):
        tx.send(TOPIC, key=f"{name}-{i % 3}".encode(), value=_value(f"{name}-{i}"))
    tx.flush()
    if commit:
        tx.commit_transaction()
    else:
        tx.abort_transaction()


def _local_segments(partition_dir: Path) -> list[tuple[int, int | None]]:
    """(base offset, last batch's last offset or None when empty) of each local segment, oldest first."""
    out = []
    for path in sorted(partition_dir.glob("*.log")):
        last = None
        for _, batch in iter_batches(path.read_bytes(), file=str(path), strict=False):
            last = batch.last_offset
        out.append((int(path.stem), last))
    return out


def _tail_holes(partition_dir: Path) -> list[tuple[int, int]]:
    """Offsets between a closed segment's last batch and the next segment's base (what the cleaner left)."""
    try:
        segments = _local_segments(partition_dir)
    except (OSError, ValueError) as exc:  # a segment swapped by the cleaner while read: look again
        log.info("local segments changed while read: %s", exc)
        return []
    return [
        (last + 1, nxt - 1)
        for (_, last), (nxt, _) in zip(segments, segments[1:], strict=False)
        if last is not None and last + 1 < nxt
    ]


def _consume(bootstrap: str, isolation_level: str, timeout: float = 90) -> list[ConsumerRecord]:
    """Everything a consumer with `isolation_level` reads from offset 0 up to the end it sees at the start."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level,
                             enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"{isolation_level} consumer stuck at {consumer.position(tp)}"
            for batch in consumer.poll(timeout_ms=1000, max_records=5000).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def _spark_rows(spark: Any, properties: Path, isolation_level: str) -> list[ROW]:  # noqa: ANN401
    df = (
        spark.read.format("kafka-tiered")
        .option("rsm.properties", str(properties))
        .option("subscribe", TOPIC)
        .option("kafka.isolation.level", isolation_level)
        .load()
        .selectExpr("offset", "key", "value", "unix_millis(timestamp) AS ts", "partition")
    )
    rows = df.collect()
    assert {r["partition"] for r in rows} <= {0}
    return sorted((r["offset"], r["key"], r["value"], r["ts"]) for r in rows)


def _manifests(store: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_bytes()) for p in store.rglob(f"{TOPIC}-*/0/*.manifest")]


def test_a_compacted_topic_switched_to_delete_tiers_and_reads_as_a_consumer(
    bridge_plugin_jar,  # noqa: F811
    kafka_broker_factory,  # noqa: ANN001
    short_dir: Path,
    spark,  # noqa: ANN001
) -> None:
    from harness.ports import free_ports
    from kafka.admin import ConfigResource, ConfigResourceType

    import spark_reader

    store = short_dir / "store"
    rsm = {
        "storage.backend": "file", "storage.file.root": str(store), "bucket": "tiered",
        "chunk.size": str(64 * 1024),
        "bridge.socket.path": str(short_dir / "bridge.sock"), "bridge.command": bridge_command(),
        "bridge.log.file": str(short_dir / "bridge.log"),
    }  # fmt: skip
    props = tiered_storage_props("io.tieredrsm.bridge.BridgeRemoteStorageManager", rsm)
    props |= {
        "remote.log.storage.manager.class.path": str(bridge_plugin_jar),
        "log.segment.delete.delay.ms": "500",
        "log.cleaner.backoff.ms": "200",  # the cleaner looks for work every 200 ms (15 s by default)
    }
    broker = kafka_broker_factory(extra_props=props, start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    broker.start()
    bootstrap = broker.bootstrap_servers
    admin = broker.admin_client()
    started = time.monotonic()
    try:
        broker.create_topic(TOPIC, 1, COMPACTED)
        _produce(bootstrap)
        partition_dir = broker.partition_dir(TOPIC, 0)
        wait_until(
            "the cleaner leaves a hole at the end of a segment", lambda: _tail_holes(partition_dir), 120, 1
        )
        holes = _tail_holes(partition_dir)
        # the isolation levels differ in what is tiered: transactions the cleaner has not seen
        from kafka import KafkaProducer

        tx = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="compacted-tx")
        tx.init_transactions()
        _transaction(tx, "late-commit", commit=True)
        _transaction(tx, "late-abort", commit=False)
        tx.close()
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs=TIERED)])
        compacted_at = time.monotonic() - started

        def all_tiered() -> bool:
            segments = sorted(partition_dir.glob("*.log"))
            return len(segments) == 1 and segments[0].stat().st_size == 0 and bool(_manifests(store))

        wait_until("every segment tiered and deleted locally", all_tiered, 120, 1)
        manifests = _manifests(store)
        tails = [
            (m["segment"]["start_offset"], m["integrity"]["last_offset"], m["segment"]["end_offset"])
            for m in manifests
            if m["segment"]["end_offset"] > m["integrity"]["last_offset"]
        ]
        assert tails, f"no tiered segment ends in a compacted hole: {[m['segment'] for m in manifests]}"
        local_start = int(next(partition_dir.glob("*.log")).stem)

        uncommitted = _consume(bootstrap, "read_uncommitted")
        committed = _consume(bootstrap, "read_committed")
        want = {
            level: sorted((r.offset, r.key, r.value, r.timestamp) for r in records)
            for level, records in (("read_uncommitted", uncommitted), ("read_committed", committed))
        }
        offsets = [r[0] for r in want["read_uncommitted"]]
        assert offsets and offsets[-1] < local_start, "the consumer read records that were not tiered"
        assert len(offsets) < offsets[-1] + 1, "no offset hole in what the consumer reads"
        assert want["read_committed"] != want["read_uncommitted"]
        assert any(r[1] and r[1].startswith(b"late-abort") for r in want["read_uncommitted"])

        spark_reader.register(spark)
        for level, rows in want.items():
            got = _spark_rows(spark, broker.config_file, level)
            if got != rows:
                first = next((i for i, (g, w) in enumerate(zip(got, rows, strict=False)) if g != w), None)
                where = (
                    ""
                    if first is None
                    else f"; first difference at row {first}: {got[first]} vs {rows[first]}"
                )
                pytest.fail(f"{level}: kafka-tiered gives {len(got)} rows, the consumer {len(rows)}{where}")
        log.info(
            "compacted history: holes %s at the switch (%.0fs in), %d segments tiered, %d ending in a hole %s; "
            "%d rows read_uncommitted, %d read_committed, equal in kafka-tiered (%.0fs in all)",
            holes, compacted_at, len(manifests), len(tails), tails, len(want["read_uncommitted"]),
            len(want["read_committed"]), time.monotonic() - started,
        )  # fmt: skip
    finally:
        admin.close()
        bridge_log = short_dir / "bridge.log"
        if bridge_log.exists():
            refused = [line for line in bridge_log.read_text().splitlines() if "corrupt segment" in line]
            log.log(
                logging.WARNING if refused else logging.INFO,
                "copies refused: %d %s",
                len(refused),
                refused[:3],
            )
