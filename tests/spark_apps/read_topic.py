"""A user's Spark application reading a tiered topic, run by `spark-submit` in tests/spark/test_spark_sessions.py.

    spark-submit --master local[2] [--conf ...] read_topic.py STORE_JSON TOPIC OUT_JSON [--register]

It builds its session the plain way (master and settings come from spark-submit), calls
`spark_reader.register` only with `--register` (an installed package registers the source itself), runs
the same queries with filter pushdown as given and then flipped, and writes what it read as JSON: rows
with bytes in base64 and timestamps in ms, the input partitions of the filtered query, and where the
executors imported `spark_reader` from.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
FILTER = "partition = 1 and offset >= 100 and offset < 300 and length(value) > 3"


def b64(v: bytes | bytearray | None) -> str | None:
    return None if v is None else base64.b64encode(bytes(v)).decode()


def rows(df: DataFrame) -> list[list[Any]]:
    out = [
        [r[0], r[1], b64(r[2]), b64(r[3]), r[4]]
        for r in df.selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp)").collect()
    ]
    return sorted(out, key=lambda row: (row[0], row[1]))


def queries(spark: SparkSession, store: dict[str, str], topic: str) -> dict[str, Any]:
    def read(**options: str) -> DataFrame:
        return (
            spark.read.format("kafka-tiered")
            .options(**store)
            .option("subscribe", topic)
            .options(**options)
            .load()
        )

    filtered = read().where(FILTER)
    plan = filtered._jdf.queryExecution().executedPlan().toString()
    return {
        "scan": "columnar" if "KafkaTieredColumnarScan" in plan else "python",
        "pushdown": spark.conf.get(PUSHDOWN),
        "full": rows(read()),
        "filtered": rows(filtered),
        "filtered_partitions": filtered.rdd.getNumPartitions(),
        "committed": rows(read(**{"kafka.isolation.level": "read_committed"})),
    }


def main() -> None:
    store, topic, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    spark = SparkSession.builder.appName("read-tiered").getOrCreate()
    if "--register" in sys.argv[4:]:
        import spark_reader

        spark_reader.register(spark)
    given = queries(spark, store, topic)
    spark.conf.set(PUSHDOWN, "false" if given["pushdown"] == "true" else "true")
    flipped = queries(spark, store, topic)
    where = (
        spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("spark_reader").__file__).collect()
    )
    with open(out, "w") as f:
        json.dump({"given": given, "flipped": flipped, "executor_module": where[0]}, f)
    spark.stop()


if __name__ == "__main__":
    main()
