"""rsm.metrics: the registry's figures, what the RSM and its S3 store record, the bridge's snapshot and its
Prometheus endpoint, and the log lines an operator searches."""

from __future__ import annotations

import dataclasses
import http.server
import io
import logging
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest
from tiering import PartitionLog

from rsm import IndexType, RemoteStorageManager, TopicIdPartition, metrics
from rsm.api.errors import RemoteResourceNotFoundException, RemoteStorageException, SegmentIntegrityError
from rsm.catalog import TopicCatalog
from rsm.catalog.usage import topic_usage
from rsm.config.settings import RsmConfig
from rsm.metrics import WINDOW_S, MetricsRegistry, RsmMetrics
from rsm.metrics.series import FOLD_AFTER, Series
from rsm.store.objects import ObjectStore


@pytest.fixture(autouse=True)
def fresh_registry():
    metrics.REGISTRY.clear()
    yield metrics.REGISTRY
    metrics.REGISTRY.clear()


def read_all(stream) -> bytes:
    with stream:
        return stream.read()


# ------------------------------------------------------------------------------------------- the registry


def test_total_rate_avg_max_over_kafkas_two_windows():
    now = [1000.0]
    reg = MetricsRegistry(clock=lambda: now[0])
    m = RsmMetrics(reg)
    m.copied("t", 0, 1000, 400, 3, 0.5)
    now[0] += 10
    m.copied("t", 0, 3000, 800, 3, 1.5)
    v = reg.values(topic="t", partition=0)
    assert v["segment-copy-total"] == 2 and v["segment-copy-bytes-total"] == 4000
    assert v["object-upload-bytes-total"] == 1200 and v["object-upload-total"] == 6
    assert v["segment-copy-time-avg"] == 1000 and v["segment-copy-time-max"] == 1500
    assert v["segment-copy-rate"] == pytest.approx(2 / WINDOW_S)  # at least one window, as Kafka's Rate
    # reading marks a window (at most one per 30 s): later reads show what happened since the older mark
    now[0] += 40
    m.copied("t", 0, 10, 10, 3, 0.1)
    v = reg.values(topic="t", partition=0)
    assert v["segment-copy-rate"] == pytest.approx(1 / 40)  # one copy in the 40 s since the mark
    assert v["segment-copy-time-max"] == v["segment-copy-time-avg"] == pytest.approx(100)
    now[0] += 10  # read again within the window: the same mark, the same figures
    assert reg.values(topic="t", partition=0)["segment-copy-rate"] == pytest.approx(1 / 50)
    now[0] += 2 * WINDOW_S + 1  # every sample expired: rates 0, no avg or max; totals stay
    v = reg.values(topic="t", partition=0)
    assert v["segment-copy-total"] == 3 and v["segment-copy-rate"] == 0
    assert "segment-copy-time-avg" not in v and "segment-copy-time-max" not in v


def test_partitions_add_up_to_their_topic_and_the_total():
    reg = MetricsRegistry()
    m = RsmMetrics(reg)
    m.copied("a", 0, 100, 10, 3, 0.1)
    m.copied("a", 1, 200, 20, 3, 0.3)
    m.copied("b", 0, 400, 40, 3, 0.2)
    m.failed("copy", "a", 1, TimeoutError("slow"))
    m.failed("fetch", "b", 0, RemoteResourceNotFoundException("gone"))
    assert reg.values(topic="a")["segment-copy-bytes-total"] == 300
    assert reg.values(topic="a")["segment-copy-time-max"] == pytest.approx(300)
    total = reg.values()
    assert total["segment-copy-total"] == 3 and total["object-upload-bytes-total"] == 70
    assert total["segment-copy-time-avg"] == pytest.approx(200)
    assert total["segment-copy-errors-total"] == 1 and total["segment-fetch-errors-total"] == 1
    assert reg.values(operation="copy", kind="timeout")["errors-total"] == 1
    assert reg.values(topic="b", operation="fetch", kind="not-found")["errors-total"] == 1
    assert set(total) <= set(metrics.metric_names())
    snap = reg.snapshot()
    assert "segment-copy-total" in snap["counters"] and "segment-copy-rate" not in snap["counters"]
    assert {tuple(sorted(s["tags"].items())) for s in snap["series"]} >= {
        (("partition", "0"), ("topic", "a")),
        (("topic", "a"),),
        (),
    }
    assert all(name in snap["docs"] for s in snap["series"] for name in s["values"])


def test_error_kinds():
    from rsm.api.errors import ConfigException, InvalidArgumentException, RecordValidationError

    kinds = [
        metrics.error_kind(e)
        for e in (
            RemoteResourceNotFoundException("x"),
            SegmentIntegrityError("f", 0, "bad"),
            RecordValidationError("v"),
            ConfigException("c"),
            InvalidArgumentException("i"),
            RemoteStorageException("s"),
            ValueError("boom"),
        )
    ]
    assert kinds == [
        "not-found",
        "integrity",
        "validation",
        "config",
        "invalid-argument",
        "storage",
        "internal",
    ]
    try:
        try:
            raise TimeoutError("no answer")
        except TimeoutError as exc:
            raise RemoteStorageException("fetch of ...: TimeoutError") from exc
    except RemoteStorageException as wrapped:
        assert metrics.error_kind(wrapped) == "timeout"


# ------------------------------------------------------------------------------------------- the RSM


def _rsm(tmp_path: Path, **extra: str) -> RemoteStorageManager:
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "chunk.size": "16384",
            **extra,
        }
    )
    return rsm


def test_rsm_counts_equal_what_the_store_holds_and_fetches_and_deletes(tmp_path, fresh_registry, caplog):
    caplog.set_level(logging.DEBUG, logger="rsm")
    rsm = _rsm(tmp_path)
    tip0 = TopicIdPartition(uuid.uuid4(), "orders", 0)
    tip1 = dataclasses.replace(tip0, partition=1)
    logs = [PartitionLog(rsm, tip0, tmp_path / "p0"), PartitionLog(rsm, tip1, tmp_path / "p1")]
    for log_ in logs:
        for _ in range(2):
            log_.append(300, value_size=200, incompressible=True)
            log_.roll()
    usage = topic_usage(TopicCatalog(rsm.config), "orders")
    caplog.clear()
    by_partition = {u.partition: u for u in usage}
    for p in (0, 1):
        v = fresh_registry.values(topic="orders", partition=p)
        assert v["segment-copy-total"] == by_partition[p].segments == 2
        assert v["object-upload-bytes-total"] == by_partition[p].bytes
        assert v["segment-copy-bytes-total"] == sum(md.segment_size_in_bytes for md in logs[p].copied)
    topic = fresh_registry.values(topic="orders")
    assert topic["segment-copy-total"] == 4 and topic["object-upload-bytes-total"] == sum(
        u.bytes for u in usage
    )

    # fetch: Kafka reads 1 MiB (here 20000 bytes) from a position and closes
    md = logs[0].copied[1]
    size = md.segment_size_in_bytes
    with rsm.fetch_log_segment(md, 1000) as s:
        first = s.read(20000)
    assert len(first) == 20000
    with rsm.fetch_log_segment(md, 1000) as s:  # the same chunks: served from the cache
        assert s.read(20000) == first
    read_all(rsm.fetch_log_segment(md, 0))
    v = fresh_registry.values(topic="orders", partition=0)
    assert v["segment-fetch-total"] == 3
    assert v["segment-fetch-requested-bytes-total"] == 40000 + size
    assert v["chunk-cache-misses-total"] == -(-size // 16384)  # every chunk downloaded once
    assert fresh_registry.values()["chunk-cache-hits-total"] >= 2  # the cache's own count, of the process
    # every chunk downloaded once: the .log object's stored bytes (plain and nearly incompressible here)
    stored_log = sum(
        p.stat().st_size for p in (tmp_path / "store").rglob(f"*{md.remote_log_segment_id.id_base64}.log")
    )
    assert v["segment-fetch-downloaded-bytes-total"] == stored_log
    assert v["segment-fetch-download-ratio"] == pytest.approx(
        v["segment-fetch-downloaded-bytes-total"] / v["segment-fetch-requested-bytes-total"]
    )
    assert v["segment-fetch-time-max"] >= v["segment-fetch-time-avg"] > 0
    read_all(rsm.fetch_index(md, IndexType.OFFSET))
    with pytest.raises(RemoteResourceNotFoundException):  # an optional index it never had: an answer
        rsm.fetch_index(md, IndexType.TRANSACTION)
    v = fresh_registry.values(topic="orders", partition=0)
    assert v["index-fetch-total"] == 1 and "index-fetch-errors-total" not in v
    assert fresh_registry.values()["chunk-cache-size-bytes"] > 0
    # no line per fetch at INFO
    assert not [r for r in caplog.records if r.levelno >= logging.INFO], [
        r.getMessage() for r in caplog.records
    ]

    # errors by kind: a segment that is not there, a segment that is corrupt
    ghost = dataclasses.replace(
        md,
        remote_log_segment_id=dataclasses.replace(md.remote_log_segment_id, id=uuid.uuid4()),
        custom_metadata=None,
    )
    with pytest.raises(RemoteResourceNotFoundException):
        rsm.fetch_log_segment(ghost, 0)
    logs[1].append(10)
    bad_md, bad_data = logs[1].roll(copy=False)
    raw = bytearray(bad_data.log_segment.read_bytes())
    raw[70] ^= 0xFF
    bad_data.log_segment.write_bytes(bytes(raw))
    with pytest.raises(SegmentIntegrityError):
        rsm.copy_log_segment_data(bad_md, bad_data)
    assert (
        fresh_registry.values(topic="orders", partition=0, operation="fetch", kind="not-found")[
            "errors-total"
        ]
        == 1
    )
    assert fresh_registry.values(operation="copy", kind="integrity")["errors-total"] == 1
    assert fresh_registry.values(topic="orders", partition=1)["segment-copy-errors-total"] == 1

    # delete: counted, with one line naming what went
    caplog.clear()
    rsm.delete_log_segment_data(md)
    v = fresh_registry.values(topic="orders", partition=0)
    assert v["segment-delete-total"] == 1 and v["segment-delete-bytes-total"] == size
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 1 and lines[0].startswith("deleted segment topic=orders partition=0 ")
    for field in (
        f"segment={md.remote_log_segment_id.id_base64}",
        f"bytes={size}",
        "time_ms=",
        "location=file:",
    ):
        assert field in lines[0]
    rsm.close()


def test_one_info_line_per_copy_with_what_an_operator_searches_for(tmp_path, caplog):
    rsm = _rsm(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "payments", 3)
    log_ = PartitionLog(rsm, tip, tmp_path / "w")
    log_.append(50)
    log_.roll()  # the topic's first copy also records its location, once (rsm.store.locations)
    log_.append(50)
    caplog.set_level(logging.INFO, logger="rsm")
    caplog.clear()
    log_.roll()
    md = log_.copied[1]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("copied segment topic=payments partition=3 ")
    for field in (
        f"segment={md.remote_log_segment_id.id_base64}",
        "offsets=50..99",
        f"bytes={md.segment_size_in_bytes}",
        "stored_bytes=",
        "time_ms=",
        "location=file:kafka-tiered-storage/payments-",
    ):
        assert field in line, (field, line)
    rsm.close()


def test_validation_counters_fold_into_the_registry(tmp_path, fresh_registry):
    rsm = _rsm(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "events", 0)
    log_ = PartitionLog(rsm, tip, tmp_path / "w")
    log_.log_config = {"record.validation.policy": "header:h"}
    log_.append(30, headers=True)  # every third record has the header: 20 violations
    log_.log_config["unchecked.rsm.record.validation.on.violation"] = "tier"
    log_.roll()
    v = fresh_registry.values(topic="events", partition=0)
    stats = rsm.validation_stats()["events"]
    assert v["record-validation-segments-total"] == stats["segments"] == 1
    assert v["record-validation-records-total"] == stats["records"] == 30
    assert v["record-validation-violations-total"] == stats["violations"] == 20
    assert v["record-validation-refused-total"] == 0
    rsm.close()


def test_metrics_enabled_false_records_nothing(tmp_path, fresh_registry):
    rsm = _rsm(tmp_path, **{"metrics.enabled": "false"})
    log_ = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "quiet", 0), tmp_path / "w")
    log_.append(20)
    log_.roll()
    read_all(rsm.fetch_log_segment(log_.copied[0], 0))
    assert fresh_registry.collect() == []
    rsm.close()


# ------------------------------------------------------------------------------------------- S3


def test_s3_requests_counted_per_operation(s3_server, tmp_path, fresh_registry):
    bucket = s3_server.make_bucket()
    rsm = RemoteStorageManager()
    rsm.configure(s3_server.rsm_configs(bucket=bucket, **{"chunk.size": "65536"}))
    log_ = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "s3t", 0), tmp_path / "w")
    log_.append(200, value_size=100)
    log_.roll()
    read_all(rsm.fetch_log_segment(log_.copied[0], 0))
    puts = fresh_registry.values(operation="PutObject")
    gets = fresh_registry.values(operation="GetObject")
    assert puts["s3-requests-total"] >= 3  # .log, .indexes, manifest (and the location record)
    assert gets["s3-requests-total"] >= 2  # manifest, chunk
    assert puts.get("s3-retries-total", 0) == 0 and puts.get("s3-throttles-total", 0) == 0
    assert gets["s3-request-time-max"] > 0
    total = fresh_registry.values()
    assert total["s3-requests-total"] == sum(
        values["s3-requests-total"]
        for tags, values in fresh_registry.collect()
        if dict(tags).keys() == {"operation"}
    )
    rsm.close()


class _SlowDown(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that asks every request to slow down."""

    def _answer(self) -> None:
        body = b'<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>'
        self.send_response(503)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


def test_s3_retries_and_throttles_are_counted(fresh_registry):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowDown)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = RsmConfig(
            {
                "storage.backend": "s3",
                "storage.s3.endpoint.url": f"http://127.0.0.1:{server.server_address[1]}",
                "storage.s3.region": "us-east-1",
                "storage.s3.access.key.id": "testing",
                "storage.s3.secret.access.key": "testing",
                "storage.s3.retry.max.attempts": "3",
                "bucket": "throttled",
            }
        )
        store = ObjectStore.from_config(config)
        with pytest.raises(Exception):  # noqa: B017 - botocore's error for a request refused 3 times
            store.get("throttled", "some/key")
        v = fresh_registry.values()  # one request (s3fs asks with HeadObject or GetObject)
        assert v["s3-requests-total"] == 1
        assert v["s3-retries-total"] == 2
        assert v["s3-throttles-total"] == 3
        assert v["s3-errors-total"] == 1
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------------------- Prometheus


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_prometheus_endpoint_reports_the_registry(tmp_path, fresh_registry):
    from harness.ports import free_port

    rsm = _rsm(
        tmp_path, **{"metrics.prometheus.port": str(free_port()), "metrics.prometheus.host": "127.0.0.1"}
    )
    port = metrics.serve_prometheus_from_config(rsm.config)
    try:
        log_ = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "prom", 2), tmp_path / "w")
        log_.append(40)
        log_.roll()
        read_all(rsm.fetch_log_segment(log_.copied[0], 0))
        got = scrape(port)
        assert got[("rsm_segment_copy_total", ())] == 1
        assert got[("rsm_segment_copy_total", (("partition", "2"), ("topic", "prom")))] == 1
        assert got[("rsm_segment_copy_total", (("topic", "prom"),))] == 1
        for (name, labels), value in got.items():  # every figure is the registry's, at every level
            if not name.startswith("rsm_"):
                continue
            base = name[len("rsm_") :].replace("_", "-")
            assert fresh_registry.values(**dict(labels))[base] == pytest.approx(value, rel=0.05, abs=1e-6), (
                name
            )
        assert any(name.startswith("process_") for name, _ in got)  # the process's own figures come along
        assert metrics.serve_prometheus(port, "127.0.0.1") == port  # once per port
    finally:
        metrics.stop_prometheus(port)
        rsm.close()


def test_prometheus_is_off_unless_a_port_is_set():
    assert metrics.serve_prometheus_from_config(RsmConfig({"storage.file.root": "/tmp/x"})) is None
    assert metrics.serve_prometheus_from_config({}) is None


def test_stream_close_counts_once(tmp_path, fresh_registry):
    rsm = _rsm(tmp_path)
    log_ = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "once", 0), tmp_path / "w")
    log_.append(20)
    log_.roll()
    s = rsm.fetch_log_segment(log_.copied[0], 0)
    buf = io.BytesIO(s.read(10))
    s.close()
    s.close()
    assert buf.getvalue() and fresh_registry.values(topic="once", partition=0)["segment-fetch-total"] == 1
    rsm.close()


def test_a_fetch_failing_mid_stream_is_counted_by_the_kind_kafka_sees(tmp_path, fresh_registry):
    rsm = _rsm(tmp_path)
    log_ = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "lost", 0), tmp_path / "w")
    log_.append(20)
    log_.roll()
    md = log_.copied[0]
    with rsm.fetch_log_segment(md, 0) as s:  # the manifest is cached now
        s.read(1)
    rsm._state.chunks.clear()
    for obj in (tmp_path / "store").rglob(f"*{md.remote_log_segment_id.id_base64}.log"):
        obj.unlink()  # the segment's data went away behind the RSM's back
    s = rsm.fetch_log_segment(md, 0)
    with pytest.raises(RemoteResourceNotFoundException):
        s.read(10)
    s.close()
    v = fresh_registry.values(topic="lost", partition=0, operation="fetch", kind="not-found")
    assert v["errors-total"] == 1
    assert fresh_registry.values(topic="lost", partition=0)["segment-fetch-errors-total"] == 1
    rsm.close()


def test_fetches_recorded_from_threads_without_a_lock_add_up_exactly():
    """A fetch's close appends to a queue without the lock; a read adds the queue in: nothing lost or
    counted twice while reads and fetches race, and the queue stays bounded when nothing reads."""
    registry = MetricsRegistry()
    fetches = RsmMetrics(registry).partition("t", 0)
    assert fetches is not None
    per_thread, threads = 20_000, 4

    def record(seed: int) -> None:
        for i in range(per_thread):
            fetches.fetched(seed + i % 7, 0.001 * (i % 5))

    workers = [threading.Thread(target=record, args=(s,)) for s in range(threads)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        registry.values(topic="t")  # reads fold the queue while the threads append to it
        assert len(fetches.fetches.pending) <= metrics.FOLD_AFTER + threads
    for w in workers:
        w.join()
    got = registry.values(topic="t", partition=0)
    n = per_thread * threads
    expected_bytes = sum(s + i % 7 for s in range(threads) for i in range(per_thread))
    assert got["segment-fetch-total"] == n
    assert got["segment-fetch-requested-bytes-total"] == expected_bytes
    assert got["segment-fetch-time-avg"] == pytest.approx(sum(i % 5 for i in range(per_thread)) / per_thread)
    assert got["segment-fetch-time-max"] == pytest.approx(4.0)
    assert len(fetches.fetches.pending) == 0


def test_a_series_window_is_kafkas_two_sample_window_and_loses_no_queued_event() -> None:
    """Rates and maxima over the last window, with marks taken where readers look: the first read covers
    everything since the series began, a read a window later only what came after the first mark (the old
    maximum is gone), and a read sooner takes no new mark. Events queued without the lock are all counted,
    and the queue folds itself in once `FOLD_AFTER` wait."""
    series = Series(2, now=0.0)
    series.record(10.0, 1.0)
    for _ in range(FOLD_AFTER + 5):
        series.queue((1.0, 2.0))
    assert len(series.pending) < FOLD_AFTER
    events = FOLD_AFTER + 6
    total = 10.0 + FOLD_AFTER + 5
    assert series.window(now=WINDOW_S) == [
        (total, total / WINDOW_S, total, events, 10.0),
        (
            1.0 + 2.0 * (FOLD_AFTER + 5),
            (1.0 + 2.0 * (FOLD_AFTER + 5)) / WINDOW_S,
            1.0 + 2.0 * (FOLD_AFTER + 5),
            events,
            2.0,
        ),
    ]
    series.record(3.0, 0.5)
    assert series.window(now=2 * WINDOW_S) == [
        (total + 3.0, 3.0 / WINDOW_S, 3.0, 1, 3.0),
        (1.5 + 2.0 * (FOLD_AFTER + 5), 0.5 / WINDOW_S, 0.5, 1, 0.5),
    ]
    series.queue((1.0, 0.0))
    first, _ = series.window(now=2.5 * WINDOW_S)  # within the window: measured from the same mark
    assert first == (total + 4.0, 4.0 / (1.5 * WINDOW_S), 4.0, 2, 3.0)
