"""A user's streaming application following a topic, run by `spark-submit` in tests/spark/test_kafka_hybrid.py.

    spark-submit --master local[2] [--jars ...] follow_topic.py OPTIONS_JSON OUT CHECKPOINT [--until N]

It builds its session the plain way, calls `spark_reader.register`, and streams `format("kafka-tiered")`
with the given options into a parquet file sink (Spark's exactly-once sink: a batch's files count only once
its entry is in `OUT/_spark_metadata`) with a checkpoint. Without `--until` it runs until it is killed (the
test kills it with SIGKILL, mid-stream); with `--until N` it runs until its offsets reach N in total over
the partitions, lets the last batch finish, prints which scan
it ran on (`scan: columnar` or `scan: python`) and stops, so a restarted query can be checked to the record.
"""

from __future__ import annotations

import json
import sys
import time

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
    options, out, checkpoint = json.loads(argv[0]), argv[1], argv[2]
    until = int(argv[argv.index("--until") + 1]) if "--until" in argv else None
    spark = SparkSession.builder.appName("follow-topic").getOrCreate()
    import spark_reader

    spark_reader.register(spark)
    query = (
        spark.readStream.format("kafka-tiered")
        .options(**options)
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start(out)
    )
    if until is None:
        query.awaitTermination()
        return
    deadline = time.monotonic() + 240
    while reached(query) < until:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"the query reached {reached(query)} of {until} offsets")
        time.sleep(0.3)
    query.processAllAvailable()
    source = query.lastProgress["sources"][0]["description"]  # the JVM stream's class, or Python's
    print("scan:", "columnar" if "kafkatieredrsm.spark" in source else "python", flush=True)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
