"""`Trigger.AvailableNow` with `maxOffsetsPerTrigger` on both Spark paths (`tiered_spark`: the Python Data
Source, `SupportsTriggerAvailableNow`, and the columnar scan).

A query must run several micro-batches, none over the limit, reading every record there was when it
started exactly once and nothing that arrived after: each test adds records while the first micro-batch
runs (in `foreachBatch`, so the moment is fixed, not timed), which that run must leave out and the next
run of the same checkpoint must read. Two kinds of topic: one only the store holds (tiered by the real RSM,
`tiering.PartitionLog`), and one only a real Kafka broker holds, read through `kafka.bootstrap.servers`
(`spark_reader.hybrid`, the brokers' latest offsets), whose rows are compared with Spark's own Kafka
source (`format("kafka")`).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import KafkaBroker
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

COLUMNS = ("partition", "offset", "key", "value", "timestamp")
Row = tuple


class Run:
    """One AvailableNow run through foreachBatch: each micro-batch's rows; `on_first` runs in the first."""

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        self.batches: list[list[Row]] = []
        self.on_first = on_first

    def __call__(self, df: Any, batch_id: int) -> None:  # noqa: ANN401 - a pyspark DataFrame
        self.batches.append([tuple(r) for r in df.selectExpr(*COLUMNS).collect()])
        if self.on_first is not None:
            self.on_first()
            self.on_first = None

    @property
    def rows(self) -> list[Row]:
        return sorted(r for batch in self.batches for r in batch)


def _run(spark: Any, options: dict[str, str], checkpoint: Path, run: Run) -> Run:  # noqa: ANN401
    stream = spark.readStream.format("kafka-tiered").options(**options).load()
    query = (
        stream.writeStream.foreachBatch(run)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return run


def _check_batches(run: Run, limit: int, total: int) -> None:
    sizes = [len(b) for b in run.batches if b]
    assert sizes and max(sizes) <= limit, sizes
    assert len(sizes) >= math.ceil(total / limit), sizes
    keys = [(r[0], r[1]) for r in run.rows]
    assert len(keys) == len(set(keys)) == total, (
        f"{len(keys)} rows, {len(set(keys))} distinct, {total} wanted"
    )


def test_a_store_topic_runs_to_its_end_at_start_in_limited_batches(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192"}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    tid = uuid.uuid4()
    logs = [PartitionLog(rsm, TopicIdPartition(tid, "backfill", p), tmp_path / f"w{p}") for p in range(2)]
    for log, segments in zip(logs, (3, 2), strict=True):
        for _ in range(segments):
            log.append(100)
            log.roll()

    def expected() -> list[Row]:
        return sorted(
            (log.tip.partition, r.offset, r.key, r.value, r.timestamp) for log in logs for r in log.records
        )

    def more() -> None:  # tiered while the first micro-batch runs: past the query's end
        logs[0].append(40)
        logs[0].roll()

    before = expected()
    options = {**opts, "subscribe": "backfill", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "120"}
    checkpoint = tmp_path / "checkpoint"
    first = _run(tiered_spark, options, checkpoint, Run(more))
    _check_batches(first, 120, 500)
    assert [(p, o, k, v, round(ts.timestamp() * 1000)) for p, o, k, v, ts in first.rows] == before
    second = _run(tiered_spark, options, checkpoint, Run())
    assert [(r[0], r[1]) for r in second.rows] == [(0, o) for o in range(300, 340)]
    _check_batches(second, 120, 40)
    rsm.close()


@pytest.mark.kafka
def test_a_broker_topic_runs_to_its_end_at_start_in_limited_batches(
    tiered_spark,  # noqa: ANN001
    kafka_broker: KafkaBroker,
    tmp_path: Path,
) -> None:
    """Everything from the brokers (an empty store): the end is the brokers' latest when the query starts."""
    from confluent_kafka import Producer
    from harness.spark_kafka import add_kafka_source

    topic = f"available-now-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 5, "acks": "all"})

    def produce(start: int, count: int) -> None:
        for n in range(start, start + count):
            producer.produce(topic, key=f"k{n % 7}".encode(), value=f"v{n}".encode(), partition=n % 2)
        assert producer.flush(60) == 0

    produce(0, 800)
    add_kafka_source(tiered_spark)

    def sparks_rows() -> list[Row]:
        df = tiered_spark.read.format("kafka").option(
            "kafka.bootstrap.servers", kafka_broker.bootstrap_servers
        )
        return sorted(tuple(r) for r in df.option("subscribe", topic).load().selectExpr(*COLUMNS).collect())

    want = sparks_rows()
    assert len(want) == 800
    root = tmp_path / "store"
    (root / "tiered").mkdir(parents=True)
    options = {
        "storage.backend": "file", "storage.file.root": str(root), "bucket": "tiered", "subscribe": topic,
        "kafka.bootstrap.servers": kafka_broker.bootstrap_servers, "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "250",
    }  # fmt: skip
    checkpoint = tmp_path / "checkpoint"
    first = _run(tiered_spark, options, checkpoint, Run(lambda: produce(800, 100)))
    _check_batches(first, 250, 800)
    assert first.rows == want
    second = _run(tiered_spark, options, checkpoint, Run())
    _check_batches(second, 250, 100)
    assert second.rows == sorted(set(sparks_rows()) - set(want))
