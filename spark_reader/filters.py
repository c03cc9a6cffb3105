"""Filters Spark pushes (`pushFilters`) on `partition`, `offset` and `timestamp`, applied exactly.

Spark removes an accepted filter from its own plan, so an accepted filter must be applied exactly here:
planning narrows to the partitions, segments and chunk ranges that can hold matching rows, and every row
read is checked against the same bounds. Accepted: =, <, <=, >, >= and IN on those three columns (their
AND is the list Spark passes). Anything else goes back to Spark.

Timestamps are compared in microseconds, Spark's unit (a record's milliseconds times 1000): a literal with
a fraction of a millisecond is exact.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FILTERED_COLUMNS = ("partition", "offset", "timestamp")


@dataclass(frozen=True)
class Bound:
    """An interval over integers [lo, hi] (None: unbounded) with an optional set of allowed values."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def and_(self, other: Bound) -> Bound:
        lo = other.lo if self.lo is None else self.lo if other.lo is None else max(self.lo, other.lo)
        hi = other.hi if self.hi is None else self.hi if other.hi is None else min(self.hi, other.hi)
        values = (
            other.values
            if self.values is None
            else self.values
            if other.values is None
            else self.values & other.values
        )
        return Bound(lo, hi, values)

    @property
    def empty(self) -> bool:
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            return True
        return self.values is not None and not any(self.contains(v) for v in self.values)

    def contains(self, v: int) -> bool:
        return (
            (self.lo is None or v >= self.lo)
            and (self.hi is None or v <= self.hi)
            and (self.values is None or v in self.values)
        )

    def span(self) -> tuple[int | None, int | None]:
        """The tightest [lo, hi] holding every allowed value."""
        lo, hi = self.lo, self.hi
        if self.values is not None:
            inside = [v for v in self.values if self.contains(v)]
            if inside:
                lo = min(inside) if lo is None else max(lo, min(inside))
                hi = max(inside) if hi is None else min(hi, max(inside))
        return lo, hi

    def mask(self, column: pa.Array, scale: int = 1) -> pa.Array | None:
        """Rows of an int64 column (times `scale`) inside the bound; None when every row is."""
        conditions = []
        if self.lo is not None:
            conditions.append(pc.greater_equal(pc.multiply(column, scale) if scale != 1 else column, self.lo))
        if self.hi is not None:
            conditions.append(pc.less_equal(pc.multiply(column, scale) if scale != 1 else column, self.hi))
        if self.values is not None:
            scaled = pc.multiply(column, scale) if scale != 1 else column
            conditions.append(pc.is_in(scaled, value_set=pa.array(sorted(self.values), pa.int64())))
        if not conditions:
            return None
        out = conditions[0]
        for c in conditions[1:]:
            out = pc.and_(out, c)
        return out


UNBOUNDED = Bound()


@dataclass(frozen=True)
class PushedFilters:
    """The AND of the accepted filters, one bound per column (timestamp in microseconds)."""

    partition: Bound = UNBOUNDED
    offset: Bound = UNBOUNDED
    timestamp_us: Bound = UNBOUNDED

    @property
    def empty(self) -> bool:
        return self.partition.empty or self.offset.empty or self.timestamp_us.empty

    def row_mask(self, offsets: pa.Array, timestamps_ms: pa.Array) -> pa.Array | None:
        """Rows of a batch inside the offset and timestamp bounds (its `offset` and millisecond
        `timestamp` columns); None when every row is."""
        keep = None
        for mask in (self.offset.mask(offsets), self.timestamp_us.mask(timestamps_ms, 1000)):
            if mask is not None:
                keep = mask if keep is None else pc.and_(keep, mask)
        return keep


NO_FILTERS = PushedFilters()


def _micros(value: object) -> int | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        # PySpark hands naive datetimes in the Python process's local time zone
        return int(time.mktime(value.timetuple())) * 1_000_000 + value.microsecond
    return None


def _integral(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return None


def _bound(kind: str, value: int) -> Bound | None:
    return {
        "EqualTo": Bound(value, value),
        "GreaterThan": Bound(value + 1, None),
        "GreaterThanOrEqual": Bound(value, None),
        "LessThan": Bound(None, value - 1),
        "LessThanOrEqual": Bound(None, value),
    }.get(kind)


def _accept(f: object) -> tuple[str, Bound] | None:
    attribute = getattr(f, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1 or attribute[0] not in FILTERED_COLUMNS:
        return None
    column = attribute[0]
    convert = _micros if column == "timestamp" else _integral
    kind = type(f).__name__
    if kind == "In":
        values = [convert(v) for v in getattr(f, "value", ())]
        if not values or any(v is None for v in values):
            return None
        return column, Bound(values=frozenset(values))  # type: ignore[arg-type]
    value = convert(getattr(f, "value", None))
    if value is None:
        return None
    bound = _bound(kind, value)
    return None if bound is None else (column, bound)


def push_filters(filters: Iterable[object]) -> tuple[PushedFilters, list[object]]:
    """(the accepted filters' AND, the filters handed back to Spark)."""
    bounds = {"partition": UNBOUNDED, "offset": UNBOUNDED, "timestamp": UNBOUNDED}
    rejected = []
    for f in filters:
        accepted = _accept(f)
        if accepted is None:
            rejected.append(f)
            continue
        column, bound = accepted
        bounds[column] = bounds[column].and_(bound)
    return PushedFilters(bounds["partition"], bounds["offset"], bounds["timestamp"]), rejected
