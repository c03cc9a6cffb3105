"""Whether Spark will hand the batch reader its filters, so the source reads in any session.

Spark (4.1+) refuses every read of a Python reader that implements `pushFilters` while
`spark.sql.python.filterPushdown.enabled` is false (`DATA_SOURCE_PUSHDOWN_DISABLED`), and Spark 4.3 ships
that setting off. The setting never reaches the source: Spark's planning worker reads it from the JVM and
keeps it to itself, and the automatic registration of an installed package (`pyspark_kafka_tiered`) has
no session to look at. What the source can see is which of Spark's Python workers asks it for a reader,
and that says enough:

- `pyspark.sql.worker.data_source_pushdown_filters` runs only when the setting is on and the query has
  filters to push: it gets the filtering reader, whose `pushFilters` narrows planning to the partitions,
  segments and chunks that can hold matching rows (Spark then drops the filters it accepted);
- `pyspark.sql.worker.plan_data_source_read` runs when the setting is off, or when it is on but there
  was nothing to push: it gets the plain reader. Spark keeps every filter and applies it to the rows
  read, as it does for its own Kafka source, so the rows are the same; only more of the store is read;
- anyone else (a caller of `DataSource.reader()` outside Spark) gets the filtering reader.

Should a later Spark rename its workers, the pushdown worker is the one matched by name and any other
Spark worker gets the plain reader, which is correct in every session. The callers are found through the
interpreter's public frame API (`inspect.currentframe`); the worker module names are Spark's internals,
listed in docs/INTERNALS.md and checked against the installed PySpark by tests/tools/test_internals.py.

Why the setting stays the user's (`spark_reader.register` leaves it alone): Spark 4.3.0 stores the plan
that filter pushdown returns (partitions and read function) on the loaded DataFrame's data source, and a
later query of that same DataFrame whose filters cannot be pushed (none, or only on other columns) reuses
it instead of planning afresh (`PythonScanBuilder.pushFilters` -> `PythonDataSourceV2.setReadInfo`; Spark's
master keeps it per scan now). So `df.where("offset < 10").count()` followed by `df.count()` counts ten
rows, whatever the source does: its reader is never asked again. With pushdown on, load a DataFrame per
query (a temporary view over one DataFrame is one DataFrame too).
"""

from __future__ import annotations

import inspect
from enum import Enum

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

SPARK_WORKERS = "pyspark.sql.worker."
PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"

# how far up the stack Spark's worker can be from `DataSource.reader` (it calls it directly today)
MAX_DEPTH = 8


class ReaderKind(Enum):
    """Which batch reader a planning request gets."""

    FILTERING = "filtering"  # implements pushFilters
    PLAIN = "plain"  # leaves every filter to Spark


def reader_kind(depth: int = 2) -> ReaderKind:
    """The reader the caller `depth` frames up (and its callers) can take (see the module docstring)."""
    frame = inspect.currentframe()  # None on an interpreter without frames: the filtering reader
    for _ in range(depth):
        frame = frame.f_back if frame is not None else None
    for _ in range(MAX_DEPTH):
        if frame is None:
            break
        module = frame.f_globals.get("__name__", "")
        if module == PUSHDOWN_WORKER:
            return ReaderKind.FILTERING
        if module.startswith(SPARK_WORKERS):
            return ReaderKind.PLAIN
        frame = frame.f_back
    return ReaderKind.FILTERING
