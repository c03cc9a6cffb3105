"""Spark's automatic registration hook: Spark imports every top-level `pyspark_*` module on its Python
path and registers its `DefaultSource`, so `format("kafka-tiered")` works in an installed environment
without calling `spark_reader.register(spark)`."""

from spark_reader.source import KafkaTieredDataSource as DefaultSource

__all__ = ["DefaultSource"]
