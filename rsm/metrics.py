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
- ``<family>-rate``: the sum per second over the last 30 to 60 s (two 30 s samples, as Kafka's
  ``metrics.sample.window.ms`` and ``metrics.num.samples``);
- ``<family>-avg`` / ``<family>-max``: the average and the largest value over the same window.

Families of a partition are recorded once, at the partition (tags ``topic`` and ``partition``, plus the
family's own, e.g. ``operation`` and ``kind`` of an error); the topic's figure (tag ``topic`` only) and the
global one (no topic tag) are added up from them when read, so recording costs one update however many
levels are shown. Families of the process (S3 requests per operation, the bridge's connections) have their
own tags and a figure over all of them without any.

Why this and not prometheus_client's own metric classes: the broker's registry wants Kafka's windowed
``-rate``/``-avg``/``-max`` figures, which Prometheus leaves to its queries, and one recording must serve
both readers; the Prometheus endpoint is a collector over this registry, so it reports exactly what JMX
shows.

Cost: an update takes a lock and adds a few numbers (about 0.3 us); the fetch path makes a handful per
fetch (`benchmarks/metrics_overhead.py` measures the whole).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)

WINDOW_S = 30.0  # one sample, as Kafka's metrics.sample.window.ms
PROMETHEUS_PREFIX = "rsm_"

_STAT_DOCS = {
    "total": "since the process started",
    "rate": "per second over the last 30-60 s",
    "avg": "average over the last 30-60 s",
    "max": "largest over the last 30-60 s",
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
    Family("chunk-cache-hits", "chunks found decoded in the chunk cache", COUNT),
    Family("chunk-cache-misses", "chunks downloaded and decoded", COUNT),
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


class Stat:
    """One series of a family: a running total and two 30 s samples for rate, avg and max."""

    __slots__ = (
        "total",
        "count",
        "_lock",
        "_start",
        "_sum",
        "_n",
        "_max",
        "_pstart",
        "_psum",
        "_pn",
        "_pmax",
    )

    def __init__(self, now: float) -> None:
        self.total = 0.0
        self.count = 0
        self._lock = threading.Lock()
        self._start = now  # current sample
        self._sum = 0.0
        self._n = 0
        self._max = float("-inf")
        self._pstart = now  # previous sample (empty): the rate's time starts with the series
        self._psum = 0.0
        self._pn = 0
        self._pmax = float("-inf")

    def record(self, value: float, now: float) -> None:
        with self._lock:
            self.total += value
            self.count += 1
            if now - self._start >= WINDOW_S:
                self._roll(now)
            self._sum += value
            self._n += 1
            if value > self._max:
                self._max = value

    def _roll(self, now: float) -> None:
        if now - self._start < 2 * WINDOW_S:  # the current sample becomes the previous one
            self._pstart, self._psum, self._pn, self._pmax = self._start, self._sum, self._n, self._max
        else:  # both are too old
            self._pstart, self._psum, self._pn, self._pmax = now, 0.0, 0, float("-inf")
        self._start, self._sum, self._n, self._max = now, 0.0, 0, float("-inf")

    def window(self, now: float) -> tuple[float, float, float, int, float]:
        """(total, rate, windowed sum, windowed count, windowed max) as of ``now``.

        The rate is Kafka's: the samples' sum over the time they span, at least one window."""
        with self._lock:
            if now - self._start >= WINDOW_S:
                self._roll(now)
            wsum = self._sum + self._psum
            rate = wsum / max(now - self._pstart, WINDOW_S)
            return self.total, rate, wsum, self._n + self._pn, max(self._max, self._pmax)


@dataclass
class _Sums:
    """Series added up into a topic's or the global figure."""

    total: float = 0.0
    rate: float = 0.0
    wsum: float = 0.0
    wcount: int = 0
    wmax: float = float("-inf")

    def add(self, total: float, rate: float, wsum: float, wcount: int, wmax: float) -> None:
        self.total += total
        self.rate += rate
        self.wsum += wsum
        self.wcount += wcount
        if wmax > self.wmax:
            self.wmax = wmax

    def stat(self, name: str) -> float | None:
        if name == "total":
            return self.total
        if name == "rate":
            return self.rate
        if name == "avg":
            return self.wsum / self.wcount if self.wcount else None
        if name == "max":
            return self.wmax if self.wcount else None
        raise ValueError(name)


# a series' tags: (("topic", "t"), ("partition", "0"), ...) in family order
Tags = tuple[tuple[str, str], ...]


class MetricsRegistry:
    """Every family's series and the gauges; thread-safe, cheap to record into."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._series: dict[tuple[str, tuple[Any, ...]], Stat] = {}
        self._lock = threading.Lock()
        self._gauges: dict[str, Callable[[], float | None]] = {}

    # -- recording -----------------------------------------------------------------------------------------
    def stat(self, family: str, key: tuple[Any, ...]) -> Stat:
        """The series of ``family`` for ``key``: (topic, partition, *tag values) for a partition's family,
        else the tag values. Keep it to record into it without a lookup."""
        found = self._series.get((family, key))
        if found is None:
            with self._lock:
                found = self._series.setdefault((family, key), Stat(self.clock()))
        return found

    def record(self, family: str, key: tuple[Any, ...], value: float = 1.0) -> None:
        self.stat(family, key).record(value, self.clock())

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
        rows: dict[Tags, dict[str, float]] = {}
        sums: dict[tuple[str, Tags], _Sums] = {}

        def put(tags: Tags, family: Family, s: _Sums) -> None:
            values = rows.setdefault(tags, {})
            for stat in family.stats:
                v = s.stat(stat)
                if v is not None:
                    values[f"{family.name}-{stat}"] = v

        for (name, key), series in items:
            family = FAMILIES_BY_NAME[name]
            figures = series.window(now)
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
                sums.setdefault((name, tags), _Sums()).add(*figures)
        for (name, tags), s in sums.items():
            put(tags, FAMILIES_BY_NAME[name], s)
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
    from rsm.errors import RemoteStorageException

    return "storage" if isinstance(exc, RemoteStorageException) else "internal"


_OP_ERRORS = {
    "copy": "segment-copy-errors",
    "fetch": "segment-fetch-errors",
    "index-fetch": "index-fetch-errors",
    "delete": "segment-delete-errors",
}


class RsmMetrics:
    """What the RemoteStorageManager records, in its words (one call per event)."""

    enabled = True

    def __init__(self, registry: MetricsRegistry = REGISTRY) -> None:
        self.registry = registry
        self.clock = registry.clock

    def copied(
        self, topic: str, partition: int, segment_bytes: int, stored_bytes: int, objects: int, seconds: float
    ) -> None:
        key = (topic, partition)
        r = self.registry
        now = self.clock()
        r.stat("segment-copy", key).record(1, now)
        r.stat("segment-copy-bytes", key).record(segment_bytes, now)
        r.stat("object-upload-bytes", key).record(stored_bytes, now)
        r.stat("object-upload", key).record(objects, now)
        r.stat("segment-copy-time", key).record(seconds * 1000, now)

    def failed(self, operation: str, topic: str, partition: int, exc: BaseException) -> None:
        now = self.clock()
        self.registry.stat(_OP_ERRORS[operation], (topic, partition)).record(1, now)
        self.registry.stat("errors", (topic, partition, operation, error_kind(exc))).record(1, now)

    def fetched(self, topic: str, partition: int, requested: int, seconds: float) -> None:
        key = (topic, partition)
        now = self.clock()
        r = self.registry
        r.stat("segment-fetch", key).record(1, now)
        r.stat("segment-fetch-requested-bytes", key).record(requested, now)
        r.stat("segment-fetch-time", key).record(seconds * 1000, now)

    def chunk(self, topic: str, partition: int, downloaded: int | None) -> None:
        """A chunk served: from the cache (``downloaded`` None) or downloaded (its stored bytes)."""
        key = (topic, partition)
        now = self.clock()
        if downloaded is None:
            self.registry.stat("chunk-cache-hits", key).record(1, now)
        else:
            self.registry.stat("chunk-cache-misses", key).record(1, now)
            self.registry.stat("segment-fetch-downloaded-bytes", key).record(downloaded, now)

    def index_fetched(self, topic: str, partition: int) -> None:
        self.registry.record("index-fetch", (topic, partition))

    def deleted(self, topic: str, partition: int, segment_bytes: int, seconds: float) -> None:
        key = (topic, partition)
        now = self.clock()
        r = self.registry
        r.stat("segment-delete", key).record(1, now)
        r.stat("segment-delete-bytes", key).record(segment_bytes, now)
        r.stat("segment-delete-time", key).record(seconds * 1000, now)

    def validated(
        self, topic: str, partition: int, records: int, violations: int, refused: bool, seconds: float
    ) -> None:
        key = (topic, partition)
        now = self.clock()
        r = self.registry
        r.stat("record-validation-segments", key).record(1, now)
        r.stat("record-validation-records", key).record(records, now)
        r.stat("record-validation-violations", key).record(violations, now)
        r.stat("record-validation-refused", key).record(int(refused), now)
        r.stat("record-validation-time", key).record(seconds * 1000, now)


class NoMetrics(RsmMetrics):
    """``metrics.enabled=false``: nothing is recorded (what the overhead benchmark compares against)."""

    enabled = False

    def __init__(self) -> None:
        super().__init__(MetricsRegistry())

    def copied(self, *args: Any) -> None:
        pass

    def failed(self, *args: Any) -> None:
        pass

    def fetched(self, *args: Any) -> None:
        pass

    def chunk(self, *args: Any) -> None:
        pass

    def index_fetched(self, *args: Any) -> None:
        pass

    def deleted(self, *args: Any) -> None:
        pass

    def validated(self, *args: Any) -> None:
        pass


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
