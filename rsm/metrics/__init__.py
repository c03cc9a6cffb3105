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

Where each part lives: `families` (the names and docs), `series` (one key's running figures and windows),
`registry` (`MetricsRegistry`, `REGISTRY`), `recorders` (what the RSM and `rsm migrate` record), `s3`
(botocore's events), `prometheus` (the endpoint). This package re-exports their public names.
"""

from rsm.metrics.families import (
    COUNT,
    FAMILIES,
    FAMILIES_BY_NAME,
    GAUGES,
    PROMETHEUS_PREFIX,
    TIME,
    WINDOW_S,
    Family,
    counter_names,
    metric_docs,
    metric_names,
    prometheus_name,
)
from rsm.metrics.prometheus import (
    PrometheusCollector,
    serve_prometheus,
    serve_prometheus_from_config,
    stop_prometheus,
)
from rsm.metrics.recorders import (
    COPY,
    DELETE,
    DOWNLOAD,
    FETCH,
    VALIDATION,
    NoMetrics,
    PartitionFetches,
    RsmMetrics,
    counts_failures,
    error_kind,
    for_config,
    migrated,
)
from rsm.metrics.registry import REGISTRY, MetricsRegistry, Tags
from rsm.metrics.s3 import THROTTLE_CODES, S3Hooks
from rsm.metrics.series import FOLD_AFTER, Series

__all__ = [
    "COPY",
    "COUNT",
    "DELETE",
    "DOWNLOAD",
    "FAMILIES",
    "FAMILIES_BY_NAME",
    "FETCH",
    "FOLD_AFTER",
    "GAUGES",
    "PROMETHEUS_PREFIX",
    "REGISTRY",
    "THROTTLE_CODES",
    "TIME",
    "VALIDATION",
    "WINDOW_S",
    "Family",
    "MetricsRegistry",
    "NoMetrics",
    "PartitionFetches",
    "PrometheusCollector",
    "RsmMetrics",
    "S3Hooks",
    "Series",
    "Tags",
    "counter_names",
    "counts_failures",
    "error_kind",
    "for_config",
    "metric_docs",
    "metric_names",
    "migrated",
    "prometheus_name",
    "serve_prometheus",
    "serve_prometheus_from_config",
    "stop_prometheus",
]
