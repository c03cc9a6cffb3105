"""The RSM's metrics: counters, windowed rates and avg/max, per topic and partition, named in Kafka's style.

One process-wide registry (``REGISTRY``) holds every figure the RSM, its store and the bridge record. Three
readers take them from it:

- the bridge's ``metrics`` operation answers a snapshot, which the JVM plugin registers in the broker's
  own metrics registry (the broker's JMX, beside Kafka's ``RemoteLogManager`` metrics);
- a Prometheus text endpoint (``prometheus_client``), off unless ``metrics.prometheus.port`` is set
  (`serve_prometheus`), for the bridge on its own and the tools;
- tests and benchmarks (`MetricsRegistry.values`).

Names are Kafka's: kebab-case, one family per recorded quantity with its statistics as suffixes. Each
family records a value per event (1 for a count, bytes, milliseconds) and offers some of

- ``<family>-total``: the sum of the values since the process started (the count of events for counts);
- ``<family>-rate``: the sum per second over the last 30 to 60 s or so (two windows of at least 30 s, as
  Kafka's ``metrics.sample.window.ms`` and ``metrics.num.samples``; see `Series`);
- ``<family>-avg`` / ``<family>-max``: the average and the largest value over the same window.

Families recorded at the same event form a group kept in one `Series` (a fetch's count, bytes and time), so
an event costs one lock.

Families of a partition are recorded once, at the partition (tags ``topic`` and ``partition``, plus the
family's own, e.g. ``operation`` and ``kind`` of an error); the topic's figure (tag ``topic`` only) and the
global one (no topic tag) are added up from them when read, so recording costs one update however many
levels are shown. Families of the process (S3 requests per operation, the bridge's connections) have their
own tags and a figure over all of them without any.

Why this and not prometheus_client's own metric classes: the broker's registry wants Kafka's windowed
``-rate``/``-avg``/``-max`` figures, which Prometheus leaves to its queries, and one recording must serve
both readers; the Prometheus endpoint is a collector over this registry, so it reports exactly what JMX
shows.

Cost: an event takes one lock and adds a few numbers, no clock; a fetch (one event at its close, two clock
readings for its time) adds a microsecond or two (`benchmarks/metrics_overhead.py` measures it).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)

FOLD_AFTER = 1024  # fetch events queued before they are added in without a reader asking (memory bound)
WINDOW_S = 30.0  # one sample, as Kafka's metrics.sample.window.ms
PROMETHEUS_PREFIX = "rsm_"

_STAT_DOCS = {
    "total": "since the process started",
    "rate": "per second over the last 30-60 s or so",
    "avg": "average over the last 30-60 s or so",
    "max": "largest over the last 30-60 s or so",
}


@dataclass(frozen=True)
class Family:
    """One recorded quantity: its name, the statistics shown of it, and how it is keyed.

    ``partition=True``: recorded per (topic, partition, *tags) and shown per partition, per topic and in
    total; else recorded per ``tags`` and shown per tag value and in total.
    """

    name: str
    doc: str
    stats: tuple[str, ...]
    partition: bool = True
    tags: tuple[str, ...] = ()
    unit: str = ""

    def metric_names(self) -> list[str]:
        return [f"{self.name}-{s}" for s in self.stats]


COUNT = ("rate", "total")
TIME = ("avg", "max")

FAMILIES: tuple[Family, ...] = (
    # copy
    Family("segment-copy", "segments copied (committed)", COUNT),
    Family("segment-copy-bytes", "bytes of the segments copied, as Kafka has them", COUNT, unit="bytes"),
    Family(
        "object-upload-bytes",
        "bytes uploaded for copied segments: their .log, .indexes and manifest objects as stored",
        COUNT,
        unit="bytes",
    ),
    Family("object-upload", "objects uploaded for copied segments", COUNT),
    Family("segment-copy-time", "time of a copy, ms", TIME, unit="ms"),
    Family("segment-copy-errors", "copies that failed", COUNT),
    # fetch
    Family("segment-fetch", "segment fetches", COUNT),
    Family(
        "segment-fetch-requested-bytes", "bytes of segments read by the fetches' callers", COUNT, unit="bytes"
    ),
    Family(
        "segment-fetch-downloaded-bytes",
        "stored bytes downloaded for segment fetches (chunks)",
        COUNT,
        unit="bytes",
    ),
    Family("segment-fetch-time", "time of a fetch from its call to its close, ms", TIME, unit="ms"),
    Family("segment-fetch-errors", "segment fetches that failed", COUNT),
    Family("index-fetch", "index fetches", COUNT),
    Family("index-fetch-errors", "index fetches that failed", COUNT),
    # the cache's own count (kept by it anyway, so a hit costs nothing more): of the process, not per partition
    Family("chunk-cache-hits", "chunks found decoded in the chunk cache", COUNT, partition=False),
    Family("chunk-cache-misses", "chunks downloaded and decoded (not in the chunk cache)", COUNT),
    # delete
    Family("segment-delete", "segments deleted", COUNT),
    Family("segment-delete-bytes", "bytes of the segments deleted, as Kafka had them", COUNT, unit="bytes"),
    Family("segment-delete-time", "time of a delete, ms", TIME, unit="ms"),
    Family("segment-delete-errors", "deletes that failed", COUNT),
    # errors of every operation by kind
    Family(
        "errors",
        "failed operations by operation (copy, fetch, index-fetch, delete) and kind (not-found, integrity, "
        "validation, config, invalid-argument, timeout, storage, internal)",
        COUNT,
        tags=("operation", "kind"),
    ),
    # record validation (seed 002)
    Family("record-validation-segments", "segments whose records were validated", COUNT),
    Family("record-validation-records", "records checked by the topic's validation policy", COUNT),
    Family("record-validation-violations", "records violating the topic's validation policy", COUNT),
    Family("record-validation-refused", "copies refused for violations", COUNT),
    Family("record-validation-time", "time of a segment's validation, ms", TIME, unit="ms"),
    # S3
    Family(
        "s3-requests",
        "S3 requests (API calls, retries not counted)",
        COUNT,
        partition=False,
        tags=("operation",),
    ),
    Family(
        "s3-retries", "S3 attempts after the first of a request", COUNT, partition=False, tags=("operation",)
    ),
    Family(
        "s3-throttles",
        "S3 answers asking to slow down (503 SlowDown, 429, throttling codes)",
        COUNT,
        partition=False,
        tags=("operation",),
    ),
    Family(
        "s3-errors",
        "S3 requests that failed after their attempts",
        COUNT,
        partition=False,
        tags=("operation",),
    ),
    Family(
        "s3-request-time",
        "time of an S3 request with its attempts, ms",
        TIME,
        partition=False,
        tags=("operation",),
    ),
    # rsm migrate (its process's figures: served by its own Prometheus endpoint)
    Family(
        "migrate-segments",
        "segments rsm migrate finished, by command (move, rekey, reencrypt, verify, import) and status "
        "(done, skipped, vanished, failed)",
        COUNT,
        tags=("command", "status"),
    ),
    Family(
        "migrate-bytes",
        "bytes of the segments rsm migrate moved, re-keyed, verified or imported, by command",
        COUNT,
        tags=("command",),
        unit="bytes",
    ),
    # the bridge process
    Family("bridge-server-requests", "requests the bridge served", COUNT, partition=False),
    Family(
        "bridge-server-streamed-bytes", "bytes the bridge streamed to its clients", COUNT, partition=False
    ),
    Family(
        "bridge-server-connections-refused",
        "connections refused (bridge.max.connections)",
        ("total",),
        partition=False,
    ),
)
FAMILIES_BY_NAME = {f.name: f for f in FAMILIES}

# gauges (a value read when shown) of the process: name -> doc
GAUGES: dict[str, str] = {
    "chunk-cache-size-bytes": "bytes of decoded chunks held by the chunk cache",
    "segment-fetch-download-ratio": "stored bytes downloaded per byte requested by segment fetches, since start",
    "bridge-server-connections": "connections the bridge serves",
    "bridge-server-in-flight-requests": "requests the bridge is working on",
}
# gauges kept per topic and partition as well (derived from families)
_DERIVED_GAUGES = ("segment-fetch-download-ratio",)


def metric_names() -> list[str]:
    """Every metric name the registry can show (``<family>-<stat>`` and the gauges), sorted."""
    return sorted({n for f in FAMILIES for n in f.metric_names()} | set(GAUGES))


def prometheus_name(name: str) -> str:
    """``segment-copy-total`` -> ``rsm_segment_copy_total`` (Prometheus allows no ``-``)."""
    return PROMETHEUS_PREFIX + name.replace("-", "_")


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
        """What the bridge's ``metrics`` operation answers (see PROTOCOL.md): the series, which metrics are
        counters (cumulative: the plugin carries them across bridge restarts) and each metric's doc."""
        series = [{"tags": dict(tags), "values": values} for tags, values in self.collect()]
        return {"series": series, "counters": counter_names(), "docs": metric_docs()}


def counter_names() -> list[str]:
    return sorted(f"{f.name}-total" for f in FAMILIES if "total" in f.stats)


def metric_docs() -> dict[str, str]:
    docs = {f"{f.name}-{s}": f"{f.doc} ({_STAT_DOCS[s]})" for f in FAMILIES for s in f.stats}
    docs.update(GAUGES)
    return docs


REGISTRY = MetricsRegistry()


# ----------------------------------------------------------------------------------------------- the RSM


def error_kind(exc: BaseException) -> str:
    """A short, stable name for what went wrong (the ``kind`` tag of ``errors``)."""
    from rsm.errors import (
        ConfigException,
        InvalidArgumentException,
        RecordValidationError,
        RemoteResourceNotFoundException,
        RemoteStorageException,
        SegmentIntegrityError,
    )

    if isinstance(exc, RemoteResourceNotFoundException):
        return "not-found"
    if isinstance(exc, SegmentIntegrityError):
        return "integrity"
    if isinstance(exc, RecordValidationError):
        return "validation"
    if isinstance(exc, ConfigException):
        return "config"
    if isinstance(exc, InvalidArgumentException):
        return "invalid-argument"
    cause: BaseException | None = exc
    for _ in range(5):  # a store timeout arrives wrapped in a RemoteStorageException
        if cause is None:
            break
        if isinstance(cause, TimeoutError):
            return "timeout"
        cause = cause.__cause__ or cause.__context__
    return "storage" if isinstance(exc, RemoteStorageException) else "internal"


_OP_ERRORS = {
    "copy": "segment-copy-errors",
    "fetch": "segment-fetch-errors",
    "index-fetch": "index-fetch-errors",
    "delete": "segment-delete-errors",
}
COPY = ("segment-copy", "segment-copy-bytes", "object-upload-bytes", "object-upload", "segment-copy-time")
FETCH = ("segment-fetch", "segment-fetch-requested-bytes", "segment-fetch-time")
DOWNLOAD = ("chunk-cache-misses", "segment-fetch-downloaded-bytes")
DELETE = ("segment-delete", "segment-delete-bytes", "segment-delete-time")
VALIDATION = (
    "record-validation-segments",
    "record-validation-records",
    "record-validation-violations",
    "record-validation-refused",
    "record-validation-time",
)


class PartitionFetches:
    """A partition's fetch figures, kept by its segment readers: one record per fetch, at its close."""

    __slots__ = ("fetches", "downloads")

    def __init__(self, registry: MetricsRegistry, topic: str, partition: int) -> None:
        self.fetches = registry.series(FETCH, (topic, partition))
        self.downloads = registry.series(DOWNLOAD, (topic, partition))

    def fetched(self, requested: int, seconds: float) -> None:
        self.fetches.queue((1, requested, seconds * 1000))  # once per fetch: no lock (Series.queue)

    def downloaded(self, stored_bytes: int) -> None:
        self.downloads.record(1, stored_bytes)


class RsmMetrics:
    """What the RemoteStorageManager records, in its words (one call per event)."""

    enabled = True

    def __init__(self, registry: MetricsRegistry = REGISTRY) -> None:
        self.registry = registry
        self.clock = registry.clock
        self._cache_lock = threading.Lock()
        self._cache: Any = None
        self._cache_base = (0, 0)  # hits and misses of the caches this one replaced

    def copied(
        self, topic: str, partition: int, segment_bytes: int, stored_bytes: int, objects: int, seconds: float
    ) -> None:
        self.registry.series(COPY, (topic, partition)).record(
            1, segment_bytes, stored_bytes, objects, seconds * 1000
        )

    def failed(self, operation: str, topic: str, partition: int, exc: BaseException) -> None:
        self.registry.record(_OP_ERRORS[operation], (topic, partition))
        self.registry.record("errors", (topic, partition, operation, error_kind(exc)))

    def partition(self, topic: str, partition: int) -> PartitionFetches | None:
        """Where a partition's fetches are counted (a segment reader keeps it)."""
        return PartitionFetches(self.registry, topic, partition)

    def index_fetched(self, topic: str, partition: int) -> None:
        self.registry.record("index-fetch", (topic, partition))

    def deleted(self, topic: str, partition: int, segment_bytes: int, seconds: float) -> None:
        self.registry.series(DELETE, (topic, partition)).record(1, segment_bytes, seconds * 1000)

    def validated(
        self, topic: str, partition: int, records: int, violations: int, refused: bool, seconds: float
    ) -> None:
        self.registry.series(VALIDATION, (topic, partition)).record(
            1, records, violations, int(refused), seconds * 1000
        )

    def watch_chunk_cache(self, cache: Any) -> None:
        """Show the chunk cache's own hit and miss counts (it keeps them anyway: a hit costs nothing more);
        a cache replaced by a reconfiguration hands its counts on."""
        with self._cache_lock:
            old = self._cache
            if old is not None and old is not cache:
                self._cache_base = (self._cache_base[0] + old.hits, self._cache_base[1] + old.misses)
            self._cache = cache

        def hits() -> float:
            return self._cache_base[0] + self._cache.hits

        self.registry.pulled("chunk-cache-hits", (), hits)
        self.registry.gauge("chunk-cache-size-bytes", lambda: self._cache.bytes)


class NoMetrics(RsmMetrics):
    """``metrics.enabled=false``: nothing is recorded (what the overhead benchmark compares against)."""

    enabled = False

    def __init__(self) -> None:
        super().__init__(MetricsRegistry())

    def copied(self, *args: Any) -> None:
        pass

    def failed(self, *args: Any) -> None:
        pass

    def partition(self, topic: str, partition: int) -> PartitionFetches | None:
        return None

    def index_fetched(self, *args: Any) -> None:
        pass

    def deleted(self, *args: Any) -> None:
        pass

    def validated(self, *args: Any) -> None:
        pass

    def watch_chunk_cache(self, cache: Any) -> None:
        pass


def migrated(
    command: str, topic: str, partition: int, status: str, nbytes: int, registry: MetricsRegistry = REGISTRY
) -> None:
    """One segment `rsm migrate` finished (rsm.migrate.engines calls it as each item ends, on the driver:
    with the Spark engine too)."""
    registry.record("migrate-segments", (topic, partition, command, status))
    if nbytes:
        registry.record("migrate-bytes", (topic, partition, command), nbytes)


def for_config(enabled: bool) -> RsmMetrics:
    return RsmMetrics(REGISTRY) if enabled else NoMetrics()


F = TypeVar("F", bound=Callable[..., Any])


def counts_failures(operation: str, expected: tuple[type[Exception], ...] = ()) -> Callable[[F], F]:
    """A RemoteStorageManager method whose failures are counted (``errors`` by kind, and the operation's
    own ``-errors``) for the partition of its first argument, a RemoteLogSegmentMetadata; the method's
    instance holds its recorder in ``_metrics``. A failure of the arguments' types is not attributed, and
    ``expected`` exceptions are answers, not failures (an optional index that is not there)."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def counted(self: Any, metadata: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, metadata, *args, **kwargs)
            except Exception as exc:
                if isinstance(exc, expected):
                    raise
                tip = getattr(getattr(metadata, "remote_log_segment_id", None), "topic_id_partition", None)
                if tip is not None:
                    self._metrics.failed(operation, tip.topic, tip.partition, exc)
                raise

        return counted  # type: ignore[return-value]

    return wrap


# ------------------------------------------------------------------------------------------- S3 (botocore)

THROTTLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "TransactionInProgressException",
    }
)


class S3Hooks:
    """botocore event handlers counting S3 requests, retries, throttles, failures and time per operation.

    Registered on the session's event system (``before-call``, ``request-created``, ``needs-retry``,
    ``after-call``, ``after-call-error`` of service s3), so every request the store makes through s3fs's
    client is seen, attempts included, whoever issues it (copy, fetch, listings of the tools).
    """

    def __init__(self, registry: MetricsRegistry = REGISTRY) -> None:
        self.registry = registry

    def register(self, events: Any) -> None:
        events.register("before-call.s3", self.before_call, unique_id="rsm-metrics-before-call")
        events.register("request-created.s3", self.request_created, unique_id="rsm-metrics-request-created")
        events.register("needs-retry.s3", self.needs_retry, unique_id="rsm-metrics-needs-retry")
        events.register("after-call.s3", self.after_call, unique_id="rsm-metrics-after-call")
        events.register(
            "after-call-error.s3", self.after_call_error, unique_id="rsm-metrics-after-call-error"
        )

    @staticmethod
    def _operation(model: Any, event_name: str = "") -> str:
        name = getattr(model, "name", None)
        if name:
            return str(name)
        parts = event_name.split(".")
        return parts[2] if len(parts) > 2 else "unknown"

    def before_call(self, model: Any = None, context: Any = None, event_name: str = "", **_: Any) -> None:
        operation = self._operation(model, event_name)
        self.registry.record("s3-requests", (operation,))
        if isinstance(context, dict):
            context["rsm_metrics"] = {"operation": operation, "attempts": 0, "started": time.monotonic()}

    def request_created(self, request: Any = None, **_: Any) -> None:
        """One attempt (botocore makes and signs the request anew for each)."""
        context = getattr(request, "context", None)
        state = context.get("rsm_metrics") if isinstance(context, dict) else None
        if state is None:
            return
        state["attempts"] += 1
        if state["attempts"] > 1:
            self.registry.record("s3-retries", (state["operation"],))

    def needs_retry(
        self, response: Any = None, operation: Any = None, event_name: str = "", **_: Any
    ) -> None:
        """Counts an answer asking to slow down; returns None (the retry decision stays botocore's)."""
        if not response:
            return None
        http, parsed = response
        code = (parsed or {}).get("Error", {}).get("Code") if isinstance(parsed, dict) else None
        status = getattr(http, "status_code", None)
        # S3 answers "slow down" with 503 (its code only in a body: a HEAD has none) or 429
        if code in THROTTLE_CODES or status in (429, 503):
            self.registry.record("s3-throttles", (self._operation(operation, event_name),))
        return None

    def _finish(self, context: Any, failed: bool) -> None:
        state = context.get("rsm_metrics") if isinstance(context, dict) else None
        if state is None:
            return
        key = (state["operation"],)
        self.registry.record("s3-request-time", key, (time.monotonic() - state["started"]) * 1000)
        if failed:
            self.registry.record("s3-errors", key)

    def after_call(
        self, context: Any = None, parsed: Any = None, http_response: Any = None, **_: Any
    ) -> None:
        status = getattr(http_response, "status_code", 200) or 200
        # a 404 is the store's "missing" (an overlay never set, a probe), which it answers; not a failure
        self._finish(context, status >= 300 and status != 404)

    def after_call_error(self, context: Any = None, **_: Any) -> None:
        self._finish(context, True)


# ------------------------------------------------------------------------------------------- Prometheus


class PrometheusCollector:
    """The registry for ``prometheus_client``: each metric under ``rsm_<name with _>``, ``-total`` ones as
    counters, the rest as gauges, every level of a series (partition, topic, total) with its tags as
    labels (select a topic's figure with ``partition=""``, the total with ``topic=""``)."""

    def __init__(self, registry: MetricsRegistry = REGISTRY) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import Metric

        docs = metric_docs()
        metrics: dict[str, Any] = {}
        for tags, values in self.registry.collect():
            labels = dict(tags)
            for name, value in values.items():
                counter = name.endswith("-total")
                base = prometheus_name(name[: -len("-total")] if counter else name)
                metric = metrics.get(base)
                if metric is None:
                    metric = metrics[base] = Metric(
                        base, docs.get(name, name), "counter" if counter else "gauge"
                    )
                metric.add_sample(base + ("_total" if counter else ""), labels, value)
        yield from metrics.values()

    def describe(self) -> list[Any]:
        return []  # unchecked collector: names are known only when collected


_prometheus_lock = threading.Lock()
_prometheus_servers: dict[int, Any] = {}


def serve_prometheus(port: int, host: str = "0.0.0.0", registry: MetricsRegistry = REGISTRY) -> int:
    """Serve the registry as Prometheus text on ``http://host:port/metrics`` from a daemon thread; returns
    the port (0: a free one). Once per port and process; the process's CPU and memory figures
    (``process_*``) come along."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.process_collector import ProcessCollector

    with _prometheus_lock:
        if port and port in _prometheus_servers:
            return port
        prom = CollectorRegistry(auto_describe=False)
        prom.register(PrometheusCollector(registry))  # type: ignore[arg-type]
        ProcessCollector(registry=prom)
        server, _thread = start_http_server(port, addr=host, registry=prom)
        bound = int(server.server_address[1])
        _prometheus_servers[bound] = server
    log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)
    return bound


def stop_prometheus(port: int) -> None:
    with _prometheus_lock:
        server = _prometheus_servers.pop(port, None)
    if server is not None:
        with contextlib.suppress(Exception):
            server.shutdown()
            server.server_close()


def serve_prometheus_from_config(config: Any) -> int | None:
    """Start the endpoint when the configuration sets ``metrics.prometheus.port`` (``RsmConfig``, or a
    mapping of RSM keys); returns its port, or None when off. For the bridge and the tools (rsm migrate)."""
    get = config.get if not isinstance(config, Mapping) else (lambda k: config.get(k))
    raw = get("metrics.prometheus.port")
    if raw in (None, ""):
        return None
    host = get("metrics.prometheus.host") or "0.0.0.0"
    return serve_prometheus(int(raw), str(host))
