"""Fixtures the broker-tail tests share: a store holding nothing (every row then comes from the brokers),
and the Spark session with both sources, ours and Spark's own Kafka source (the judge)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An empty file store: nothing tiers, so every row is read from the brokers."""
    root = tmp_path_factory.mktemp("empty-store")
    (root / "tiered").mkdir()
    return {"storage.backend": "file", "storage.file.root": str(root), "bucket": "tiered"}


@pytest.fixture(scope="module")
def session(spark):  # noqa: ANN001, ANN201
    """The tests' Spark session with both sources: `kafka-tiered` (Python Data Source) and `kafka`."""
    from harness.spark_kafka import add_kafka_source

    import spark_reader

    spark_reader.register(spark)
    add_kafka_source(spark)
    return spark
