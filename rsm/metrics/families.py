"""The metric families: every name the RSM, its store, the bridge and `rsm migrate` record, with docs.

Names are Kafka's (kebab-case, one family per recorded quantity, its statistics as suffixes); the one list
here is what the registry accepts, what the bridge reports as counters, what the Prometheus endpoint and
the dashboard (tests/tools/test_dashboard.py) name.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    # record validation during offload
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


def counter_names() -> list[str]:
    return sorted(f"{f.name}-total" for f in FAMILIES if "total" in f.stats)


def metric_docs() -> dict[str, str]:
    docs = {f"{f.name}-{s}": f"{f.doc} ({_STAT_DOCS[s]})" for f in FAMILIES for s in f.stats}
    docs.update(GAUGES)
    return docs
