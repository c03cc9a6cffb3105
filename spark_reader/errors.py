"""Errors a user of the source can act on: each one line naming the topic, partition or object at fault."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar


class ReaderError(Exception):
    """The source cannot answer the query (unknown topic, bad option, unreadable or corrupt object)."""


class DataLossError(ReaderError):
    """Offsets the query asked for are no longer in the store (failOnDataLoss=true)."""


F = TypeVar("F", bound=Callable)


def one_line_errors(method: F) -> F:
    """Raise the source's own errors (a bad option, a missing store) afresh from the method Spark called.

    Spark's planner worker prints the exception with its traceback after "[PYTHON_DATA_SOURCE_ERROR]
    Failed to ...:"; raised here, that traceback is this one frame instead of the parser's whole stack,
    and with `spark.sql.execution.pyspark.udf.hideTraceback.enabled=true` (which the CLI's sessions set)
    it is gone and the message is Spark's first line.
    """

    @functools.wraps(method)
    def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        try:
            return method(*args, **kwargs)
        except ReaderError as exc:
            error = exc.with_traceback(None)
        raise error from None

    return call  # type: ignore[return-value]
