"""The Python Data Source under a second name, for sessions where the jar serves `kafka-tiered`.

With the columnar scan's jar on the class path Spark refuses to register a Python source named
`kafka-tiered` (DATA_SOURCE_ALREADY_EXISTS: the JVM's name wins, see `spark_reader.jar`). The jar can
still hand a query to the Python Data Source (`spark.kafkaTiered.columnar.enabled=false`); it finds it
under this name when the package's automatic registration (`pyspark_kafka_tiered`) did not run.
"""

from __future__ import annotations

from spark_reader.source import KafkaTieredDataSource

FALLBACK_NAME = "kafka-tiered-python"


class PythonFallbackDataSource(KafkaTieredDataSource):
    """`KafkaTieredDataSource`, registered as `kafka-tiered-python`: same options, rows and errors."""

    @classmethod
    def name(cls) -> str:
        return FALLBACK_NAME
