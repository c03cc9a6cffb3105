"""A streaming application following a broker-only topic into a foreachBatch sink, run by
tests/spark/test_kafka_broker_stream_restart.py as a plain Python process (it is killed with SIGKILL mid-stream).

    python follow_broker_topic.py OPTIONS_JSON OUT CHECKPOINT [--until N]

`format("kafka-tiered")` with the given options, a 1 s ProcessingTime trigger, and a foreachBatch sink that
writes each micro-batch's rows to `OUT/batch-<id>.json` (a temporary file renamed into place): a batch run
again after a restart (same id, same offsets, as Spark replays a batch planned but not committed) replaces
its own file, so the files hold each record once however often a batch ran. Without `--until` it runs until
killed; with `--until N` it stops once its offsets reach N in total over the partitions.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession


def reached(query) -> int:  # noqa: ANN001
    """The query's end offsets summed over its partitions (-1 before its first batch)."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return -1
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return sum(int(o) for parts in (end or {}).values() for o in parts.values()) if end else -1


def main(argv: list[str]) -> None:
    options, out, checkpoint = json.loads(argv[0]), Path(argv[1]), argv[2]
    until = int(argv[argv.index("--until") + 1]) if "--until" in argv else None
    out.mkdir(parents=True, exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("follow-broker-topic")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    import spark_reader

    spark_reader.register(spark)

    def write(df, batch_id: int) -> None:  # noqa: ANN001
        rows = [[r["partition"], r["offset"], r["key"].decode()] for r in df.collect()]
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"batch-{batch_id}.json")

    query = (
        spark.readStream.format("kafka-tiered")
        .options(**options)
        .load()
        .select("partition", "offset", "key")
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    if until is None:
        query.awaitTermination()
        return
    deadline = time.monotonic() + 300
    while reached(query) < until:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"the query reached {reached(query)} of {until} offsets")
        time.sleep(0.3)
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
