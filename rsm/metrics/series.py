"""A series: the running figures of one key of a group of families recorded together, and their window."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from rsm.metrics.families import WINDOW_S

FOLD_AFTER = 1024  # fetch events queued before they are added in without a reader asking (memory bound)


class Series:
    """The figures of one key of a group of families recorded together (a fetch's count, bytes and time):
    running totals per family, one event count, and the largest value per family since the last mark.

    Recording takes one lock and adds numbers: no clock. Windows come from marks taken when the series is
    read (at most one per `WINDOW_S`; the bridge's plugin reads every few seconds, Prometheus every scrape):
    the rate is the change since the oldest of the last two marks over the time since it (at least one
    window), the average that change over the events since, the maximum the largest value since it. That
    is Kafka's two-sample window, with sample boundaries where the readers happen to look.
    """

    __slots__ = ("totals", "count", "maxes", "lock", "created", "marks", "pending")

    def __init__(self, width: int, now: float) -> None:
        self.totals = [0.0] * width
        self.count = 0
        self.maxes = [float("-inf")] * width
        self.lock = threading.Lock()
        self.created = now
        # (time, totals, count, maxes of the period it closed), oldest first, at most two
        self.marks: list[tuple[float, list[float], int, list[float]]] = []
        # events appended without the lock by the hottest recorder (a fetch's close, `PartitionFetches`),
        # each a tuple of one value per family, added in when the series is read or the queue grows long
        self.pending: collections.deque[tuple[float, ...]] = collections.deque()

    def _add(self, values: tuple[float, ...]) -> None:
        """One event into the totals and maxima; the caller holds the lock."""
        self.count += 1
        totals, maxes = self.totals, self.maxes
        for i, v in enumerate(values):
            totals[i] += v
            if v > maxes[i]:
                maxes[i] = v

    def record(self, *values: float) -> None:
        with self.lock:
            self._add(values)

    def queue(self, values: tuple[float, ...]) -> None:
        """`record` without the lock, for the hottest recorder (a fetch's close): one append to a deque,
        added in when the series is read (`window`) or once `FOLD_AFTER` events wait (memory stays bounded)."""
        pending = self.pending
        pending.append(values)
        if len(pending) >= FOLD_AFTER:
            self.fold()

    def fold(self) -> None:
        """Add the queued events in (deque.popleft is atomic: an event appended meanwhile waits, none is
        lost or added twice)."""
        pending = self.pending
        with self.lock:
            while pending:
                try:
                    values = pending.popleft()
                except IndexError:  # pragma: no cover - another fold took the last one
                    break
                self._add(values)

    def record1(self, value: float) -> None:
        """`record` of a one-family group, a little cheaper."""
        with self.lock:
            self.count += 1
            self.totals[0] += value
            if value > self.maxes[0]:
                self.maxes[0] = value

    def window(self, now: float) -> list[tuple[float, float, float, int, float]]:
        """Per family: (total, rate, change over the window, events over the window, max over it)."""
        if self.pending:
            self.fold()
        with self.lock:
            marks = self.marks
            if not marks or now - marks[-1][0] >= WINDOW_S:
                marks.append((now, list(self.totals), self.count, self.maxes))
                self.maxes = [float("-inf")] * len(self.totals)
                if len(marks) > 2:
                    del marks[0]
            since, base, base_count, _ = marks[0] if len(marks) == 2 else (self.created, None, 0, None)
            recent = marks[-1][3] if len(marks) == 2 else None
            elapsed = max(now - since, WINDOW_S)
            events = self.count - base_count
            out = []
            for i, total in enumerate(self.totals):
                change = total - (base[i] if base is not None else 0.0)
                largest = self.maxes[i]
                if recent is not None and recent[i] > largest:
                    largest = recent[i]
                if base is None and marks[-1][3][i] > largest:  # the first mark closed the only period
                    largest = marks[-1][3][i]
                out.append((total, change / elapsed, change, events, largest))
            return out


class _Pulled:
    """A counter kept elsewhere (the chunk cache's hits): its total read when shown, windows as a Series'."""

    def __init__(self, read: Callable[[], float], now: float) -> None:
        self.read = read
        self.series = Series(1, now)

    def window(self, now: float) -> list[tuple[float, float, float, int, float]]:
        total = float(self.read())
        with self.series.lock:
            self.series.count = int(total)
            self.series.totals[0] = total
        return self.series.window(now)


@dataclass
class _Sums:
    """Series added up into a topic's or the global figure."""

    total: float = 0.0
    rate: float = 0.0
    change: float = 0.0
    events: int = 0
    largest: float = float("-inf")

    def add(self, total: float, rate: float, change: float, events: int, largest: float) -> None:
        self.total += total
        self.rate += rate
        self.change += change
        self.events += events
        if largest > self.largest:
            self.largest = largest

    def stat(self, name: str) -> float | None:
        if name == "total":
            return self.total
        if name == "rate":
            return self.rate
        if name == "avg":
            return self.change / self.events if self.events else None
        if name == "max":
            return self.largest if self.events else None
        raise ValueError(name)
