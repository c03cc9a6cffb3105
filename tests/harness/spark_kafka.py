"""Spark's own Kafka source (`format("kafka")`) in the tests' Spark session, as the oracle of a hybrid read.

PySpark does not ship spark-sql-kafka-0-10: its jars (spark-sql-kafka-0-10_2.13 4.2.0, the token provider,
kafka-clients, commons-pool2) are resolved from Maven Central by `benchmarks/spark_read_pom.xml` into the
git-ignored `.cache/spark-read/spark-kafka` (the benchmark's own cache) and added to a running session with
`ADD JAR`, which puts them on the session's class loader and ships them to executors: the shared `spark`
fixture stays a plain session for every other test.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.maven import run_maven

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "benchmarks" / "spark_read_pom.xml"
JARS_DIR = REPO / ".cache" / "spark-read"


def kafka_source_jars() -> list[Path]:
    """The jars of Spark's Kafka source, resolved once (Maven's cache, then `.cache/spark-read`)."""
    spark_dir = JARS_DIR / "spark-kafka"
    if not list(spark_dir.glob("spark-sql-kafka-*.jar")):
        run_maven(
            POM,
            ["dependency:copy-dependencies@spark-kafka"],
            REPO / ".cache" / "logs" / "maven-spark-kafka.log",
            properties={"jars.dir": str(JARS_DIR)},
            offline_first=False,
        )
    return sorted(spark_dir.glob("*.jar"))


def add_kafka_source(spark: SparkSession) -> None:
    """Make `format("kafka")` available in this running session (idempotent)."""
    added = {Path(str(row[0])).name for row in spark.sql("LIST JARS").collect()}
    for jar in kafka_source_jars():
        if jar.name not in added:
            spark.sql(f"ADD JAR '{jar}'")
