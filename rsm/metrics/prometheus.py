"""The registry as a Prometheus text endpoint (`metrics.prometheus.port`), for the bridge and the tools."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from rsm.metrics.families import metric_docs, prometheus_name
from rsm.metrics.registry import REGISTRY, MetricsRegistry

log = logging.getLogger(__name__)


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
