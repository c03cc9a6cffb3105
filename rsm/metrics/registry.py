"""The process-wide registry (`REGISTRY`): every family's series and the gauges, summed per level on read."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from rsm.metrics.families import FAMILIES_BY_NAME, GAUGES, counter_names, metric_docs
from rsm.metrics.series import Series, _Pulled, _Sums

log = logging.getLogger(__name__)

# a series' tags: (("topic", "t"), ("partition", "0"), ...) in family order
Tags = tuple[tuple[str, str], ...]


class MetricsRegistry:
    """Every family's series and the gauges; thread-safe, cheap to record into."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # (families recorded together, key) -> series; a key is (topic, partition, *tag values) for a
        # partition's families, else the tag values
        self._series: dict[tuple[tuple[str, ...], tuple[Any, ...]], Series | _Pulled] = {}
        self._lock = threading.Lock()
        self._gauges: dict[str, Callable[[], float | None]] = {}

    # -- recording -----------------------------------------------------------------------------------------
    def series(self, families: tuple[str, ...], key: tuple[Any, ...]) -> Series:
        """The series of ``families`` (recorded together, each event one value per family) for ``key``.
        Keep it to record into it without a lookup."""
        found = self._series.get((families, key))
        if found is None:
            for name in families:
                if name not in FAMILIES_BY_NAME:
                    raise ValueError(f"unknown metric family {name!r}")
            with self._lock:
                found = self._series.setdefault((families, key), Series(len(families), self.clock()))
        return found  # type: ignore[return-value]

    def record(self, family: str, key: tuple[Any, ...], value: float = 1.0) -> None:
        self.series((family,), key).record1(value)

    def pulled(self, family: str, key: tuple[Any, ...], read: Callable[[], float]) -> None:
        """Show a counter kept elsewhere as ``family`` (its total read when shown); the newest wins."""
        with self._lock:
            self._series[((family,), key)] = _Pulled(read, self.clock())

    def gauge(self, name: str, read: Callable[[], float | None]) -> None:
        """Show ``read()`` under ``name`` (one of `GAUGES`); the newest registration wins."""
        if name not in GAUGES:
            raise ValueError(f"unknown gauge {name!r}")
        self._gauges[name] = read

    def clear(self) -> None:
        """Forget every series (tests)."""
        with self._lock:
            self._series.clear()
            self._gauges.clear()

    # -- reading -------------------------------------------------------------------------------------------
    def collect(self) -> list[tuple[Tags, dict[str, float]]]:
        """Every series as (tags, {metric name: value}), partitions then topics then totals.

        Tags of a partition's series: topic, partition, then the family's own; its topic's: topic and the
        family's own; the total: the family's own only. Families of the process: their tags, and the total
        without any.
        """
        now = self.clock()
        with self._lock:
            items = list(self._series.items())
        sums: dict[tuple[str, Tags], _Sums] = {}
        for (names, key), series in items:
            try:
                figures = series.window(now)
            except Exception:  # noqa: BLE001 - a pulled counter that cannot be read is left out
                log.debug("series %s %s failed", names, key, exc_info=True)
                continue
            for name, figure in zip(names, figures, strict=True):
                family = FAMILIES_BY_NAME[name]
                if family.partition:
                    topic, partition, extra = key[0], key[1], key[2:]
                    own = tuple(zip(family.tags, (str(v) for v in extra), strict=True))
                    levels: Iterable[Tags] = (
                        (("topic", str(topic)), ("partition", str(partition)), *own),
                        (("topic", str(topic)), *own),
                        own,
                    )
                else:
                    own = tuple(zip(family.tags, (str(v) for v in key), strict=True))
                    levels = (own, ()) if own else ((),)
                for tags in levels:
                    sums.setdefault((name, tags), _Sums()).add(*figure)
        rows: dict[Tags, dict[str, float]] = {}
        for (name, tags), s in sums.items():
            family = FAMILIES_BY_NAME[name]
            values = rows.setdefault(tags, {})
            for stat in family.stats:
                v = s.stat(stat)
                if v is not None:
                    values[f"{name}-{stat}"] = v
        self._derive(rows)
        for gauge, read in list(self._gauges.items()):
            try:
                value = read()
            except Exception:  # noqa: BLE001 - a gauge that cannot be read is left out, not fatal
                log.debug("gauge %s failed", gauge, exc_info=True)
                continue
            if value is not None:
                rows.setdefault((), {})[gauge] = float(value)
        return sorted(rows.items(), key=lambda r: (-len(r[0]), r[0]))

    @staticmethod
    def _derive(rows: dict[Tags, dict[str, float]]) -> None:
        for values in rows.values():
            requested = values.get("segment-fetch-requested-bytes-total")
            if requested:
                values["segment-fetch-download-ratio"] = (
                    values.get("segment-fetch-downloaded-bytes-total", 0.0) / requested
                )

    def values(self, **tags: str | int) -> dict[str, float]:
        """The metrics of the series with exactly these tags (``values()``: the totals; ``values(topic=t,
        partition=0)``: a partition's)."""
        want = tuple(sorted((k, str(v)) for k, v in tags.items()))
        for row_tags, values in self.collect():
            if tuple(sorted(row_tags)) == want:
                return values
        return {}

    def snapshot(self) -> dict[str, Any]:
        """What the bridge's ``metrics`` operation answers (rsm/bridge/PROTOCOL.md): the series, which metrics are
        counters (cumulative: the plugin carries them across bridge restarts) and each metric's doc."""
        series = [{"tags": dict(tags), "values": values} for tags, values in self.collect()]
        return {"series": series, "counters": counter_names(), "docs": metric_docs()}


REGISTRY = MetricsRegistry()
