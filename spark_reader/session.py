"""A local Spark session set up for this source: what the CLI (`rsm quickstart`) and the benchmarks use.

Python workers must run this interpreter (`PYSPARK_PYTHON=sys.executable`), or they start another
Python that cannot import the project. Filter pushdown stays as Spark ships it (see `spark_reader.register`).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


class SparkUnavailable(RuntimeError):
    """Spark cannot start here (no pyspark, no Java): the message says what to install."""


def check_spark() -> None:
    """Raise SparkUnavailable with one line naming what is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkUnavailable("pyspark is not installed: pip install 'kafka-tiered-rsm[spark]'") from None
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (
        java_home and os.path.exists(os.path.join(java_home, "bin", "java"))
    ):
        raise SparkUnavailable("Spark needs Java 17 or newer on the PATH (or JAVA_HOME), and none was found")


QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
# the source's errors without Python's traceback: Spark's first line then holds our one line
HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def _this_interpreter() -> None:
    """Spark's Python workers run `python3` from the PATH unless told: a tool started as
    /path/to/venv/bin/rsm without an activated venv would get workers that cannot import it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def tool_session(app_name: str) -> SparkSession:
    """The session a command runs its Spark jobs in (`rsm migrate --engine spark`).

    The active session when there is one (the command runs inside an application or spark-submit);
    else a new one on Spark's default master (spark-defaults.conf, PYSPARK_SUBMIT_ARGS) whose Python
    workers run this interpreter unless PYSPARK_PYTHON says otherwise, with the JVM logging only errors
    (the command's own output stays readable) and the source's errors one line.
    """
    check_spark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    _this_interpreter()
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}")
        .config("spark.ui.showConsoleProgress", "false")
        .config(HIDE_TRACEBACK, "true")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def local_session(
    app_name: str = "kafka-tiered",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    *,
    quiet: bool = True,
) -> SparkSession:
    """A Spark session with `format("kafka-tiered")` registered (the JVM logging only errors if `quiet`)."""
    check_spark()
    _this_interpreter()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if quiet:
        conf = {
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}",
            HIDE_TRACEBACK: "true",
            **(conf or {}),
        }
    from pyspark.sql import SparkSession

    import spark_reader

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    spark_reader.register(session)
    return session
