"""A small local Spark session for tests: ``local[2]``, UI off, 2 shuffle partitions.

Python workers must run this interpreter (``PYSPARK_PYTHON=sys.executable``), or they import from
another Python and fail to find the project's packages.
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

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.executor.memory": "1g",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.sql.session.timeZone": "UTC",
    # Python data sources that override pushFilters fail every query unless this is on (Spark 4.1+).
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.python.worker.reuse": "true",
}


def make_spark_session(app_name: str = "rsm-tests", conf: Mapping[str, str] | None = None) -> SparkSession:
    """Start (or get) the local Spark session with the harness defaults plus ``conf``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is slow to import

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    log.info("spark %s session started (local[2])", session.version)
    return session
