"""Errors a user of the source can act on: each one line naming the topic, partition or object at fault."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TypeVar

SOURCE = "kafka-tiered"
# PySpark's worker environment: the traceback of the exception a task reports is left out when the first
# is set (Spark sets it from spark.sql.execution.pyspark.udf.hideTraceback.enabled), and cut to the frames
# outside PySpark when the second is (from ...udf.simplifiedTraceback.enabled, on by default)
HIDE_TRACEBACK_ENV = "SPARK_HIDE_TRACEBACK"
SIMPLIFIED_TRACEBACK_ENV = "SPARK_SIMPLIFIED_TRACEBACK"


class ReaderError(Exception):
    """The source cannot answer the query (unknown topic, bad option, unreadable or corrupt object)."""


class DataLossError(ReaderError):
    """Offsets the query asked for are no longer in the store (failOnDataLoss=true)."""


class TaskError(ReaderError):
    """A reader error as it leaves the source for Spark (a task, a planning call): printed by Python's
    traceback module (as PySpark's workers report an exception) as `kafka-tiered: <line>`, the source's
    name where a class path would be.

    That printing names a class of module `builtins` by its bare `__qualname__`; the class keeps its own
    name for `repr`, and `except ReaderError` (or `DataLossError`, see below) still catches it. It
    pickles as its plain kind (a `builtins` class cannot be found by name)."""

    __module__ = "builtins"
    __qualname__ = SOURCE
    plain: type[ReaderError] = ReaderError

    def __reduce__(self) -> tuple[type[ReaderError], tuple[object, ...]]:
        return self.plain, self.args


class TaskDataLossError(TaskError, DataLossError):
    """`TaskError` for data loss: still a `DataLossError`."""

    __module__ = "builtins"
    __qualname__ = SOURCE
    plain = DataLossError


def spark_error(exc: ReaderError) -> TaskError:
    """The error the source raises to Spark for `exc` (a task's, or a planning call's): Spark's message
    then holds `kafka-tiered: <line>` and no traceback.

    In a PySpark worker whose session kept Spark's simplified tracebacks on (the default: Spark then sets
    its variable in the worker's environment; the columnar scan's worker and a driver have none), the
    worker's traceback switch is set for this exception: PySpark reads it when it formats the exception
    the worker ends with, and a task's or a planner's worker exits right after reporting it (`worker.py`,
    `sql/worker/utils.py`: `handle_worker_exception`, then `sys.exit(-1)`), so nothing else that process
    runs is formatted under it. A session that turned simplified tracebacks off (to debug) keeps the
    whole traceback. A task's caught exception is then Spark's PythonException: "An exception was thrown
    from the Python worker:" and, on the next line, our line; a planning call's, Spark's one line
    "[PYTHON_DATA_SOURCE_ERROR] Failed to ... Python data source ...: kafka-tiered: <line>".
    """
    if os.environ.get(SIMPLIFIED_TRACEBACK_ENV):
        os.environ[HIDE_TRACEBACK_ENV] = "1"
    kind = TaskDataLossError if isinstance(exc, DataLossError) else TaskError
    return kind(*exc.args)


F = TypeVar("F", bound=Callable)


def one_line_errors(method: F) -> F:
    """Raise the source's own errors (a bad option, a missing store) afresh from the method Spark called,
    as `spark_error` words them: Spark's planner worker prints "[PYTHON_DATA_SOURCE_ERROR] Failed to ...:"
    and `kafka-tiered: <line>`, with no traceback under Spark's defaults (else this one frame, not the
    parser's whole stack)."""

    @functools.wraps(method)
    def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        try:
            return method(*args, **kwargs)
        except ReaderError as exc:
            error = spark_error(exc)
        raise error from None

    return call  # type: ignore[return-value]
