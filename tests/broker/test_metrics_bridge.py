"""The bridge's metrics: its ``metrics`` operation and its Prometheus endpoint, scraped while segments are
copied and fetched through it, agree with each other and with what the store holds (`rsm store du`)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from harness.ports import free_port
from test_bridge_server import sock_dir  # noqa: F401 - fixture
from test_metrics import scrape
from tiering import PartitionLog

from rsm import TopicIdPartition
from rsm.api.errors import RemoteStorageException
from rsm.bridge.client import BridgeClient
from rsm.catalog import TopicCatalog
from rsm.catalog.usage import topic_usage
from rsm.cli.bridge import serve_command
from rsm.config.settings import RsmConfig

REPO = Path(__file__).resolve().parents[2]


def start_bridge(config: Path, sock: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        serve_command(config, sock), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read().decode())
        try:
            BridgeClient(sock).health()
            return proc
        except (OSError, RemoteStorageException):
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("bridge did not come up")


def test_snapshot_and_prometheus_during_copies_and_fetches(sock_dir, tmp_path):  # noqa: F811
    port = free_port()
    store = tmp_path / "store"
    rsm_keys = {"storage.backend": "file", "storage.file.root": str(store), "chunk.size": "16384"}
    config = tmp_path / "server.properties"
    config.write_text(
        "".join(f"rsm.config.{k}={v}\n" for k, v in rsm_keys.items())
        + f"rsm.config.metrics.prometheus.port={port}\nrsm.config.metrics.prometheus.host=127.0.0.1\n"
    )
    proc = start_bridge(config, sock_dir / "m.sock")
    client = BridgeClient(sock_dir / "m.sock", pool_size=4)
    scrapes: list[dict] = []
    stop = threading.Event()

    def scraper() -> None:  # Prometheus scraping the bridge while it works
        while not stop.is_set():
            scrapes.append(scrape(port))
            time.sleep(0.05)

    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    try:
        tid = uuid.uuid4()
        logs = [PartitionLog(client, TopicIdPartition(tid, "clicks", p), tmp_path / f"p{p}") for p in (0, 1)]
        fetched = 0
        for round_ in range(3):
            for log_ in logs:
                log_.append(200, value_size=150, incompressible=True)
                log_.roll()
            md = logs[round_ % 2].copied[-1]
            with client.fetch_log_segment(md, 500) as s:  # what Kafka does: its fetch size, then close
                fetched += len(s.read(10_000))
            with client.fetch_log_segment(md, 0) as s:
                fetched += len(s.read())
        stop.set()
        t.join(10)
        assert scrapes, "no scrape answered while the bridge worked"

        snapshot = client.metrics()
        final = scrape(port)
        assert snapshot["pid"] == proc.pid and snapshot["enabled"] is True
        assert "segment-copy-total" in snapshot["counters"]
        for series in snapshot["series"]:
            labels = tuple(sorted(series["tags"].items()))
            for name, value in series["values"].items():
                prom = f"rsm_{name.replace('-', '_')}"
                assert (prom, labels) in final, (prom, labels)
                if name.endswith("-total"):  # nothing ran between the two reads: the same counts
                    assert final[(prom, labels)] == value, (prom, labels)

        # the counters are what the store holds, per partition and for the topic
        usage = {u.partition: u for u in topic_usage(TopicCatalog(RsmConfig(rsm_keys)), "clicks")}
        for p in (0, 1):
            labels = (("partition", str(p)), ("topic", "clicks"))
            assert final[("rsm_segment_copy_total", labels)] == usage[p].segments == 3
            assert final[("rsm_object_upload_bytes_total", labels)] == usage[p].bytes
        assert final[("rsm_segment_copy_total", ())] == 6
        assert final[("rsm_segment_fetch_total", (("topic", "clicks"),))] == 6
        # what the bridge read from the RSM's streams is what it sent; a client that closes early (as Kafka
        # does) read less of it
        requested = final[("rsm_segment_fetch_requested_bytes_total", ())]
        assert requested == final[("rsm_bridge_server_streamed_bytes_total", ())] >= fetched
        assert final[("rsm_bridge_server_requests_total", ())] >= 6 + 6
        assert final[("rsm_bridge_server_connections", ())] >= 1
        # counters never go back between scrapes
        copies = [s.get(("rsm_segment_copy_total", ()), 0) for s in scrapes] + [6]
        assert copies == sorted(copies)
    finally:
        stop.set()
        client.close()
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("value", ["no", "0"])
def test_bridge_without_metrics(sock_dir, tmp_path, value):  # noqa: F811
    config = tmp_path / "server.properties"
    config.write_text(
        f"rsm.config.storage.backend=file\nrsm.config.storage.file.root={tmp_path / 'store'}\n"
        f"rsm.config.metrics.enabled={value}\n"
    )
    proc = start_bridge(config, sock_dir / "q.sock")
    client = BridgeClient(sock_dir / "q.sock")
    try:
        log_ = PartitionLog(client, TopicIdPartition(uuid.uuid4(), "quiet", 0), tmp_path / "w")
        log_.append(20)
        log_.roll()
        snapshot = client.metrics()
        assert snapshot["enabled"] is False and snapshot["series"] == []
    finally:
        client.close()
        proc.terminate()
        proc.wait(30)
