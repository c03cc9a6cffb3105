"""The tests' local Spark session, built the way a user builds one: a plain builder on ``local[2]``.

Nothing the source depends on is set here: filter pushdown is left at Spark's default (off in Spark 4.3),
so every test sees what a user's session sees; tests that want pushdown call ``spark_reader.register``,
as README tells users to. The two settings below only make a 2-core test machine faster and quieter
(no web UI fighting for port 4040 with other sessions, 2 shuffle partitions instead of 200).

Python workers must run this interpreter (``PYSPARK_PYTHON=sys.executable``), as they do in a user's
virtualenv where ``python3`` is that virtualenv's; here ``python3`` on the PATH may be another one.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from harness.ports import LOOPBACK

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# test-machine settings only: none changes what a query reads or how the source plans it
TEST_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
}


def python_env() -> dict[str, str]:
    """The environment a Spark driver started from here needs: workers on this interpreter, loopback."""
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": LOOPBACK,
    }


# the Spark reader tests run each case on both paths in this one session (see `columnar_paths`)
COLUMNAR_CONF = "spark.kafkaTiered.columnar.enabled"
PATHS = ("python", "columnar")


def columnar_conf() -> dict[str, str]:
    """The columnar scan's jar on the class path (``spark.jars``, as a user adds it), the Python Data Source
    serving ``kafka-tiered`` unless a test turns the columnar scan on; nothing when no JDK can build it."""
    from spark_reader.jar import JarBuildError, jar_path  # noqa: PLC0415

    try:
        return {"spark.jars": jar_path(), COLUMNAR_CONF: "false"}
    except JarBuildError as exc:
        log.warning("no columnar scan in the test session: %s", exc)
        return {}


def make_spark_session(app_name: str = "rsm-tests", conf: Mapping[str, str] | None = None) -> SparkSession:
    """Start (or get) the local[2] session: a plain builder plus ``TEST_CONF``, the columnar scan's jar
    (off by default: `use_path` turns it on per test module) and ``conf``."""
    os.environ.update(python_env())
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is slow to import

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in {**TEST_CONF, **columnar_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    log.info("spark %s session started (local[2])", session.version)
    return session


def use_path(spark: SparkSession, path: str) -> None:
    """Serve ``format("kafka-tiered")`` in this session by the columnar scan or the Python Data Source."""
    import pytest  # noqa: PLC0415

    if path == "columnar" and not spark.conf.get("spark.jars", ""):
        pytest.skip("the columnar scan's jar could not be built here (no JDK)")
    spark.conf.set(COLUMNAR_CONF, str(path == "columnar").lower())
