"""What the RemoteStorageManager and `rsm migrate` record, in their words (one call per event)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from rsm.metrics.registry import REGISTRY, MetricsRegistry


def error_kind(exc: BaseException) -> str:
    """A short, stable name for what went wrong (the ``kind`` tag of ``errors``)."""
    from rsm.api.errors import (
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
