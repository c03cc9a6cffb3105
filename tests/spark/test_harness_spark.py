"""The local Spark session runs real queries, with Python workers on this interpreter."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.spark


def test_sql_aggregation_runs(spark) -> None:  # noqa: ANN001 - pyspark types are optional
    df = spark.range(0, 1000).selectExpr("id", "id % 7 AS bucket")
    rows = df.groupBy("bucket").count().orderBy("bucket").collect()
    assert [r["bucket"] for r in rows] == list(range(7))
    assert sum(r["count"] for r in rows) == 1000
    assert rows[0]["count"] == len([i for i in range(1000) if i % 7 == 0])


def test_python_workers_use_this_interpreter(spark) -> None:  # noqa: ANN001
    def worker_python(_: object) -> str:
        import sys as worker_sys

        return worker_sys.executable

    executables = spark.sparkContext.parallelize(range(4), 2).map(worker_python).distinct().collect()
    assert executables == [sys.executable]


def test_session_settings(spark) -> None:  # noqa: ANN001
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.ui.enabled") == "false"
