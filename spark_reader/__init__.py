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

__all__ = ["FORMAT_NAME", "KafkaTieredDataSource", "register"]

FORMAT_NAME = "kafka-tiered"


def register(spark: SparkSession) -> None:
    """Make `format("kafka-tiered")` available in this Spark session."""
    from spark_reader.source import KafkaTieredDataSource

    spark.dataSource.register(KafkaTieredDataSource)


def __getattr__(name: str) -> object:
    if name == "KafkaTieredDataSource":  # imported lazily: pyspark is slow to import
        from spark_reader.source import KafkaTieredDataSource

        return KafkaTieredDataSource
    raise AttributeError(name)
