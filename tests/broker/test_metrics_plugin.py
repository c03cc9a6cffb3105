"""The JVM plugin's metrics, driven as the broker drives the plugin (no broker: the test driver).

Both ways a broker gets them: with the plugin loaded through ``remote.log.storage.manager.class.path`` the
broker gives no PluginMetrics and the plugin registers its metrics itself, reported to JMX under
``kafka.server:type=plugins``; on the broker's classpath the broker wraps it with
``Plugin.wrapInstance`` (KIP-877) and its PluginMetrics takes them, under the same names. Counters survive
a bridge killed with SIGKILL, and the restart is counted.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from harness.waiting import wait_until
from test_bridge_plugin import (  # noqa: F401 - fixtures
    Driver,
    bridge_command,
    bridge_plugin_jar,
    driver_classpath,
    segment_files,
)

from rsm.catalog import TopicCatalog
from rsm.catalog.usage import topic_usage
from rsm.config.settings import RsmConfig

PATTERN = "kafka.server:type=plugins,*"
PREFIX = (
    "kafka.server:type=plugins,config=remote.log.storage.manager.class.name,class=BridgeRemoteStorageManager"
)


def jmx(driver: Driver) -> dict[str, float | None]:
    return driver.ok(f"jmx {PATTERN}")["values"]


def attr(values: dict, name: str, **tags: object) -> float | None:
    suffix = "".join(f",{k}={v}" for k, v in tags.items())
    return values.get(f"{PREFIX}{suffix}:{name}")


@pytest.mark.parametrize("registry", ["own", "plugin_metrics"])
def test_plugin_metrics_in_jmx(bridge_plugin_jar, java_oracle, java_build, short_dir, tmp_path, registry):  # noqa: F811
    seg_dir = tmp_path / "seg"
    seg_dir.mkdir()
    java_oracle.write_segment(seg_dir, "zstd", records=2000, value_size=200)
    files = segment_files(seg_dir)
    last_offset = max(b["lastOffset"] for b in java_oracle.expected(seg_dir)["batches"])
    store = tmp_path / "store"
    rsm_keys = {
        "storage.backend": "file",
        "storage.file.root": str(store),
        "bucket": "tiered",
        "chunk.size": "65536",
    }
    props = short_dir / "plugin.properties"
    props.write_text(
        "".join(f"{k}={v}\n" for k, v in rsm_keys.items())
        + f"bridge.socket.path={short_dir / 'b.sock'}\nbridge.command={bridge_command()}\n"
        f"bridge.log.file={short_dir / 'bridge.log'}\nbridge.restart.backoff.ms=100\nbridge.metrics.poll.ms=200\n"
        "broker.id=3\n"
    )
    driver = Driver(driver_classpath(java_build), tmp_path)
    try:
        driver.ok(f"configure {props}")
        if registry == "plugin_metrics":
            driver.ok("plugin_metrics")  # what the broker does right after configure for a Monitorable plugin
        seg = {**files, "start": 0, "end": last_offset, "topic": "audit", "partition": 4}
        driver.ok("segment " + json.dumps(seg))
        driver.ok("copy")
        size = Path(files["log"]).stat().st_size
        driver.ok("fetch 0")
        driver.ok("fetch_partial 100 5000")
        usage = topic_usage(TopicCatalog(RsmConfig(rsm_keys)), "audit")[0]

        def polled() -> bool:
            v = jmx(driver)
            return attr(v, "segment-fetch-total", topic="audit", partition=4) == 2

        wait_until("the plugin's poll of the bridge's metrics", polled, 30, 0.2)
        v = jmx(driver)
        assert attr(v, "segment-copy-total", topic="audit", partition=4) == usage.segments == 1
        assert attr(v, "object-upload-bytes-total", topic="audit", partition=4) == usage.bytes
        assert attr(v, "segment-copy-bytes-total", topic="audit") == size
        assert attr(v, "segment-copy-total") == 1  # the total: no topic tag
        assert attr(v, "segment-copy-time-max", topic="audit", partition=4) > 0
        assert attr(v, "segment-fetch-requested-bytes-total", topic="audit", partition=4) >= size + 5000
        assert attr(v, "bridge-requests-total") == 3  # the copy and two fetches (the polls not counted)
        assert attr(v, "bridge-restarts-total") == 0 and attr(v, "bridge-up") == 1
        assert attr(v, "bridge-connections") >= 1 and attr(v, "bridge-in-flight-requests") <= 1  # a poll
        assert attr(v, "bridge-queue-time-max") is not None
        pid = driver.ok("health")["pid"]

        # kill -9: the plugin restarts the bridge and counts it; what the dead bridge counted stays counted
        os.kill(pid, signal.SIGKILL)
        wait_until("the bridge restarted", lambda: driver("health").get("pid", pid) != pid, 30, 0.1)
        driver.ok("fetch_partial 0 1000")

        def carried() -> bool:
            v = jmx(driver)
            return attr(v, "segment-fetch-total", topic="audit", partition=4) == 3

        wait_until("the new bridge's counts added to the dead one's", carried, 30, 0.2)
        v = jmx(driver)
        assert attr(v, "bridge-restarts-total") == 1
        assert attr(v, "segment-copy-total", topic="audit", partition=4) == 1
        assert attr(v, "object-upload-bytes-total", topic="audit", partition=4) == usage.bytes
        driver.ok("close")
    finally:
        driver.stop()
