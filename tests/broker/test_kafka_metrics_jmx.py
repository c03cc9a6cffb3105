"""On a real Kafka 4.4 broker (the plugin and the bridge tiering to moto S3), read with Kafka's own JmxTool:
the plugin's copy counters equal the segments and bytes the store holds (`rsm store du`) and Kafka's own
remote-copy counters, its fetch counters move when a consumer reads from the remote tier, and a bridge
killed with SIGKILL is counted as a restart without losing what was counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.waiting import wait_until
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture

from rsm.bridge.client import BridgeClient

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.timeout(900)]

TOPIC = "jmx-tiered"
PARTITIONS = 2
PLUGIN = (
    "kafka.server:type=plugins,config=remote.log.storage.manager.class.name,class=BridgeRemoteStorageManager"
)


class Jmx:
    """Kafka's own JmxTool (kafka-tools, resolved by Maven for kafka-dump-log) against the broker's JMX port."""

    @staticmethod
    def broker_flags(port: int) -> list[str]:
        """The broker JVM's flags for a JMX port on loopback, without authentication (tests only)."""
        return [
            f"-Dcom.sun.management.jmxremote.port={port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={port}",
            "-Dcom.sun.management.jmxremote.host=127.0.0.1",
            "-Djava.rmi.server.hostname=127.0.0.1",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
        ]

    def __init__(self, libs: Path, port: int) -> None:
        self.libs = libs
        self.url = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"

    def read(self, *object_names: str) -> dict[str, float]:
        cmd = [
            "java",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            str(self.libs / "*"),
            "org.apache.kafka.tools.JmxTool",
        ]
        cmd += ["--jmx-url", self.url, "--one-time", "true", "--report-format", "csv"]
        for name in object_names:
            cmd += ["--object-name", name]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise AssertionError(f"JmxTool failed: {out.stderr[-2000:]}")
        # csv: one `<object name>:<attribute>,"<value>"` line each (the name, unquoted, has commas of its own)
        values: dict[str, float] = {}
        for line in out.stdout.splitlines():
            key, sep, value = line.rpartition(',"')
            if sep and key != "time":
                with contextlib.suppress(ValueError):  # a string attribute
                    values[key] = float(value.rstrip('"'))
        return values


def mine(values: dict[str, float], name: str, **tags: object) -> float | None:
    suffix = "".join(f",{k}={v}" for k, v in tags.items())
    return values.get(f"{PLUGIN}{suffix}:{name}")


def produce(bootstrap: str, per_partition_bytes: int) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, batch_size=64 * 1024, acks="all")
    count = 0
    for p in range(PARTITIONS):
        for n in range(per_partition_bytes // 1000):
            producer.send(TOPIC, key=f"{p}-{n}".encode(), value=os.urandom(1000), partition=p)
            count += 1
    producer.flush()
    producer.close()
    return count


def test_broker_jmx_shows_the_plugins_metrics(
    bridge_plugin_jar,  # noqa: F811
    kafka_broker_factory,
    kafka_dump_log,
    s3_server,
    short_dir,
    tmp_path,
    capsys,
):
    from harness.ports import free_ports
    from kafka import KafkaConsumer, TopicPartition

    from rsm.cli.main import main

    bucket = s3_server.make_bucket()
    sock = short_dir / "bridge.sock"
    rsm_keys = {**s3_server.rsm_configs(bucket=bucket), "prefix": "jmx/", "chunk.size": str(256 * 1024)}
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.tieredrsm.bridge.BridgeRemoteStorageManager",
        "remote.log.storage.manager.class.path": str(bridge_plugin_jar),  # as the README deploys it
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "1000",
        "log.initial.task.delay.ms": "0",
        **{f"rsm.config.{k}": v for k, v in rsm_keys.items()},
        "rsm.config.bridge.socket.path": str(sock),
        "rsm.config.bridge.command": bridge_command(),
        "rsm.config.bridge.log.file": str(short_dir / "bridge.log"),
        "rsm.config.bridge.restart.backoff.ms": "200",
        "rsm.config.bridge.metrics.poll.ms": "1000",
    }
    broker = kafka_broker_factory(extra_props=props, extra_env=s3_server.env(), start=False)
    broker.port, broker.controller_port, jmx_port = free_ports(3)
    broker.jvm_opts += Jmx.broker_flags(jmx_port)
    broker.start()
    jmx = Jmx(kafka_dump_log, jmx_port)
    config = tmp_path / "server.properties"
    config.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in rsm_keys.items()))
    try:
        broker.create_topic(
            TOPIC,
            PARTITIONS,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(1024 * 1024),
                "local.retention.ms": "1000",
            },
        )
        records = produce(broker.bootstrap_servers, 4 * 1024 * 1024)

        def local_segments(p: int) -> int:
            return len(list(broker.partition_dir(TOPIC, p).glob("*.log")))

        wait_until(
            "every rolled segment tiered",
            lambda: all(local_segments(p) == 1 for p in range(PARTITIONS)),
            300,
            1,
        )

        assert main(["store", "--config", str(config), "du", "--topic", TOPIC, "--json"]) == 0
        du = {row["partition"]: row for row in json.loads(capsys.readouterr().out)}
        assert set(du) == set(range(PARTITIONS)) and all(du[p]["segments"] >= 3 for p in du), du

        def copies_match() -> bool:
            v = jmx.read(f"{PLUGIN},*")
            return all(
                mine(v, "segment-copy-total", topic=TOPIC, partition=p) == du[p]["segments"]
                and mine(v, "object-upload-bytes-total", topic=TOPIC, partition=p) == du[p]["bytes"]
                for p in range(PARTITIONS)
            )

        try:
            wait_until("the broker's JMX shows the copies the store holds", copies_match, 60, 1)
        except AssertionError:
            v = jmx.read(f"{PLUGIN},*")
            raise AssertionError(f"store: {du}\nJMX: {json.dumps(v, indent=1)[:6000]}") from None
        v = jmx.read(
            f"{PLUGIN},*",
            f"kafka.server:type=BrokerTopicMetrics,name=RemoteCopyRequestsPerSec,topic={TOPIC}",
            f"kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec,topic={TOPIC}",
            "kafka.log.remote:type=RemoteLogManager,*",
        )
        segments = sum(du[p]["segments"] for p in du)
        assert mine(v, "segment-copy-total", topic=TOPIC) == segments
        assert mine(v, "object-upload-bytes-total", topic=TOPIC) == sum(du[p]["bytes"] for p in du)
        # Kafka's own count of what it handed to the RSM agrees
        kafka = f"kafka.server:type=BrokerTopicMetrics,name=RemoteCopy%sPerSec,topic={TOPIC}:Count"
        assert v[kafka % "Requests"] == segments
        assert v[kafka % "Bytes"] == mine(v, "segment-copy-bytes-total", topic=TOPIC)
        assert any(k.startswith("kafka.log.remote:type=RemoteLogManager") for k in v)  # beside Kafka's own
        assert mine(v, "segment-copy-time-max", topic=TOPIC) > 0
        assert mine(v, "s3-requests-total", operation="PutObject") >= 3 * segments
        assert mine(v, "bridge-up") == 1 and mine(v, "bridge-restarts-total") == 0
        assert mine(v, "segment-fetch-total", topic=TOPIC) in (None, 0)

        # a consumer from offset 0 reads the remote tier
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=1000,
        )
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = 0
        deadline = time.monotonic() + 120
        while got < records // 4 and time.monotonic() < deadline:
            got += sum(len(r) for r in consumer.poll(timeout_ms=2000, max_records=2000).values())
        consumer.close()
        assert got >= records // 4

        def fetched() -> bool:
            v = jmx.read(f"{PLUGIN},*")
            return (mine(v, "segment-fetch-total", topic=TOPIC) or 0) > 0 and (
                mine(v, "segment-fetch-requested-bytes-total", topic=TOPIC) or 0
            ) > 0

        wait_until("fetch counters moving", fetched, 60, 1)

        # kill -9 the bridge: the plugin restarts it, the broker's JMX counts it and keeps the counts
        pid = BridgeClient(sock).health()["pid"]
        os.kill(pid, signal.SIGKILL)

        def restarted() -> bool:
            v = jmx.read(f"{PLUGIN},*")
            return mine(v, "bridge-restarts-total") == 1 and mine(v, "bridge-up") == 1

        wait_until("the restart counted", restarted, 120, 1)
        assert BridgeClient(sock).health()["pid"] != pid
        v = jmx.read(f"{PLUGIN},*")
        for p in range(PARTITIONS):
            assert mine(v, "segment-copy-total", topic=TOPIC, partition=p) == du[p]["segments"]
            assert mine(v, "object-upload-bytes-total", topic=TOPIC, partition=p) == du[p]["bytes"]
        shown = sorted(k for k in v if k.startswith(PLUGIN + ":") or f"{PLUGIN},topic={TOPIC}:" in k)
        print("\n".join(f"{k} = {v[k]}" for k in shown), file=sys.stderr)
    finally:
        log = short_dir / "bridge.log"
        if log.exists():
            print(
                "--- bridge.log tail ---\n" + "\n".join(log.read_text().splitlines()[-20:]), file=sys.stderr
            )
