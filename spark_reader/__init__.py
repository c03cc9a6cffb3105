"""A PySpark data source reading the segments this RSM tiered, straight from the store.

    import spark_reader
    spark_reader.register(spark)
    df = (spark.read.format("kafka-tiered")
          .option("rsm.properties", "/etc/kafka/server.properties")
          .option("subscribe", "payments")
          .load())

Rows are those of Spark's own Kafka source (`key`, `value`, `topic`, `partition`, `offset`, `timestamp`,
`timestampType`, optional `headers`), so a query written for `format("kafka")` runs unchanged. See
`spark_reader.options` for the options and README for a table of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT_NAME", "KafkaTieredDataSource", "jar_path", "register"]

FORMAT_NAME = "kafka-tiered"


def register(spark: SparkSession) -> None:
    """Make `format("kafka-tiered")` available in this Spark session, in any session.

    The session's `spark.sql.python.filterPushdown.enabled` is left as it is. Off (Spark 4.3's default),
    the source leaves every filter to Spark, which applies it to the rows read; on, the source takes the
    filters on `partition`, `offset` and `timestamp` and reads only the segments and chunks that can hold
    matching rows (`spark_reader.pushdown` picks the reader). It is not turned on here because Spark
    4.3.0 keeps a pushed-down plan on the loaded DataFrame and replays it for that DataFrame's next query
    without pushable filters: `df.where("offset < 10").count()` then `df.count()` counts ten rows (see
    `spark_reader.pushdown`). Turn it on knowing that: load a DataFrame per query.

    With the columnar scan's jar on the class path (`jar_path()`), Spark's JVM source already answers to
    `kafka-tiered` and Spark refuses a Python source of that name: the Python Data Source is then
    registered as `kafka-tiered-python` (`spark_reader.fallback`), which the jar's scan hands a query to
    when `spark.kafkaTiered.columnar.enabled` is false.
    """
    from spark_reader.source import KafkaTieredDataSource

    try:
        spark.dataSource.register(KafkaTieredDataSource)
    except Exception as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        from spark_reader.fallback import PythonFallbackDataSource

        spark.dataSource.register(PythonFallbackDataSource)


def jar_path() -> str:
    """The columnar scan's jar (built first if needed), for `spark.jars` or `spark-submit --jars`: with it
    on the class path `format("kafka-tiered")` is the columnar scan (`spark_reader.jar`)."""
    from spark_reader.jar import jar_path as path

    return path()


def __getattr__(name: str) -> object:
    if name == "KafkaTieredDataSource":  # imported lazily: pyspark is slow to import
        from spark_reader.source import KafkaTieredDataSource

        return KafkaTieredDataSource
    raise AttributeError(name)
