"""readStream.format("kafka-tiered") on local[2]: new segments picked up, restarts exactly once.

The sink is Spark's own file sink (parquet, with its checkpoint), so "exactly once" is Spark's
guarantee built on our offsets: a query stopped and restarted from its checkpoint must write every
record once.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition


def _stream(spark, opts: dict[str, str], **options: str):  # noqa: ANN001, ANN202
    reader = spark.readStream.format("kafka-tiered")
    for k, v in {**opts, **options}.items():
        reader = reader.option(k, v)
    return reader.load()


def _written(spark, path: Path) -> list[tuple[int, int, bytes]]:  # noqa: ANN001
    if not path.exists():
        return []
    return sorted((r["partition"], r["offset"], r["value"]) for r in spark.read.parquet(str(path)).collect())


def test_a_stream_picks_up_new_segments_and_restarts_exactly_once(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "8192"}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    tid = uuid.uuid4()
    logs = [PartitionLog(rsm, TopicIdPartition(tid, "live", p), tmp_path / f"w{p}") for p in range(2)]
    for log in logs:
        log.append(50)
        log.roll()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def expected() -> list[tuple[int, int, bytes]]:
        return sorted(
            (log.tip.partition, r.offset, r.value) for log in logs for r in log.records if log.copied
        )

    def start():  # noqa: ANN202
        df = _stream(
            tiered_spark, opts, subscribe="live", startingOffsets="earliest", maxOffsetsPerTrigger="40"
        )
        return (
            df.select("partition", "offset", "value")
            .writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start(str(out))
        )

    query = start()
    try:
        query.processAllAvailable()
        assert _written(tiered_spark, out) == expected()
        # micro-batches respect maxOffsetsPerTrigger (spread over the two partitions)
        assert all(p["numInputRows"] <= 40 for p in query.recentProgress)
        # a segment tiered while the query runs is picked up by a later micro-batch
        logs[0].append(30)
        logs[0].roll()
        query.processAllAvailable()
        assert _written(tiered_spark, out) == expected()
    finally:
        query.stop()
    last = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert last == {"live": {"0": 80, "1": 50}}  # Kafka source's checkpoint shape: next offset per partition

    # stopped; more data arrives; restarted from the checkpoint: every record once
    logs[1].append(25)
    logs[1].roll()
    logs[0].append(10)
    logs[0].roll()
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    written = _written(tiered_spark, out)
    assert written == expected()
    assert len(written) == len(set(written)) == 165
    rsm.close()


def test_a_stream_starting_latest_reads_only_what_comes_after(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "tail", 0), tmp_path / "w")
    log.append(20)
    log.roll()
    query = (
        _stream(tiered_spark, opts, subscribe="tail")  # streams start at latest by default, as Spark's
        .writeStream.format("memory")
        .queryName("tail_rows")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert tiered_spark.table("tail_rows").count() == 0
        log.append(7)
        log.roll()
        query.processAllAvailable()
        got = sorted(r["offset"] for r in tiered_spark.table("tail_rows").collect())
        assert got == list(range(20, 27))
    finally:
        query.stop()
    rsm.close()


def test_a_foreach_batch_sink_of_a_stream_starting_latest_sees_only_what_comes_after(
    tiered_spark, tmp_path: Path
) -> None:  # noqa: ANN001
    """A foreachBatch sink's batch DataFrame is optimized as a batch query: the columnar scan's statistics
    must then be the micro-batch's, not a batch plan of the options (which refuses startingOffsets=latest)."""
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "sink", 0), tmp_path / "w")
    log.append(12)
    log.roll()
    seen: list[int] = []

    def sink(batch, _batch_id: int) -> None:  # noqa: ANN001
        seen.extend(r["offset"] for r in batch.select("offset").collect())

    query = _stream(tiered_spark, opts, subscribe="sink").writeStream.foreachBatch(sink).start()
    try:
        query.processAllAvailable()
        log.append(5)
        log.roll()
        query.processAllAvailable()
        assert sorted(seen) == list(range(12, 17)), (seen, query.exception())
    finally:
        query.stop()
    rsm.close()


def test_retention_past_a_checkpoint_is_data_loss(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    """The query stopped at offset 10; retention then removed offsets 0..19 from the store."""
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "expiring", 0), tmp_path / "w")
    log.append(10)
    log.roll()
    checkpoint, out = tmp_path / "cp", tmp_path / "out"

    def run(**extra: str) -> None:
        df = _stream(tiered_spark, opts, subscribe="expiring", startingOffsets="earliest", **extra)
        q = df.select("offset").writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
        q.trigger(availableNow=True).start(str(out)).awaitTermination()

    run()
    for _ in range(2):
        log.append(10)
        log.roll()
    rsm.delete_log_segment_data(log.copied[0])
    rsm.delete_log_segment_data(log.copied[1])
    with pytest.raises(Exception, match=r"expiring-0: offsets 10\.\.19 are no longer in the store"):
        run()
    run(failOnDataLoss="false")
    offsets = sorted(r["offset"] for r in tiered_spark.read.parquet(str(out)).collect())
    assert offsets == list(range(10)) + list(range(20, 30))
    rsm.close()
