"""The reader's checks under one PySpark line, run by tests/spark/test_spark_versions.py with that line's venv.

    python version_checks.py STORE_JSON TOPIC OUT_JSON

One local[2] session with the columnar scan's jar (built by `spark_reader.jar_path()` against THIS
pyspark's jars) on its class path. It reads the topic on both paths (the Python Data Source and the
columnar scan): a batch read, a filtered read with Spark's Python filter pushdown on (and how many input
partitions it planned, against the same read with pushdown off), and a `Trigger.AvailableNow` stream with
`maxOffsetsPerTrigger` (each micro-batch's rows, through foreachBatch). It writes what it read as JSON, with
which of PySpark's data source APIs this line has; the test compares the rows with what was tiered.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from typing import Any

from pyspark.sql import DataFrame, SparkSession

COLUMNAR = "spark.kafkaTiered.columnar.enabled"
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
FILTER = "partition = 1 and offset >= 60 and offset < 90"
LIMIT = 70
COLUMNS = ("partition", "offset", "key", "value", "unix_millis(timestamp)")


def b64(v: bytes | bytearray | None) -> str | None:
    return None if v is None else base64.b64encode(bytes(v)).decode()


def rows(df: DataFrame) -> list[list[Any]]:
    out = [[r[0], r[1], b64(r[2]), b64(r[3]), r[4]] for r in df.selectExpr(*COLUMNS).collect()]
    return sorted(out, key=lambda row: (row[0], row[1]))


def apis(spark: SparkSession) -> dict[str, Any]:
    """Which of the interfaces the reader uses this PySpark has (`spark_reader.streaming_api`)."""
    from pyspark.sql.datasource import DataSourceReader

    from spark_reader import streaming_api

    return {
        "admission_control": streaming_api.ADMISSION_CONTROL,
        "available_now": streaming_api.AVAILABLE_NOW,
        "push_filters": hasattr(DataSourceReader, "pushFilters"),
        "pushdown_default": spark.conf.get(PUSHDOWN),
    }


def stream_batches(spark: SparkSession, store: dict[str, str], topic: str) -> list[list[list[Any]]]:
    """Each AvailableNow micro-batch's rows, in order."""
    batches: list[list[list[Any]]] = []
    stream = (
        spark.readStream.format("kafka-tiered")
        .options(**store, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=str(LIMIT))
        .load()
    )
    with tempfile.TemporaryDirectory(prefix="version-checks-") as checkpoint:
        query = (
            stream.writeStream.foreachBatch(lambda df, _: batches.append(rows(df)))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    return batches


def reads(spark: SparkSession, store: dict[str, str], topic: str, path: str) -> dict[str, Any]:
    spark.conf.set(COLUMNAR, str(path == "columnar").lower())

    def read() -> DataFrame:
        return spark.read.format("kafka-tiered").options(**store, subscribe=topic).load()

    plan = read()._jdf.queryExecution().executedPlan().toString()
    out: dict[str, Any] = {"scan": "columnar" if "KafkaTieredColumnarScan" in plan else "python"}
    out["batch"] = rows(read())
    out["batch_partitions"] = read().rdd.getNumPartitions()
    for pushdown in ("true", "false"):
        spark.conf.set(PUSHDOWN, pushdown)
        filtered = read().where(FILTER)  # a DataFrame per query (see spark_reader.pushdown)
        out[f"filtered_{pushdown}"] = rows(filtered)
        out[f"filtered_partitions_{pushdown}"] = filtered.rdd.getNumPartitions()
    out["stream"] = stream_batches(spark, store, topic)
    return out


def main() -> None:
    store, topic, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    import pyspark

    import spark_reader

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("version-checks")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars", spark_reader.jar_path())
        .config(COLUMNAR, "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    given = apis(spark)
    spark_reader.register(spark)
    result = {"version": pyspark.__version__, "spark": spark.version, "apis": given, "limit": LIMIT}
    for path in ("python", "columnar"):
        result[path] = reads(spark, store, topic, path)
    with open(out, "w") as f:
        json.dump(result, f)
    spark.stop()


if __name__ == "__main__":
    main()
