"""`rsm migrate move` under a real Kafka 4.4 broker (the JVM plugin and the Python bridge, file store).

A three-partition topic is tiered by the broker (1 MiB segments, 1 s local retention), so reading from
offset 0 needs the store. Its segments are then moved by `rsm migrate` to another prefix while the broker
runs: the broker's metadata still names the old location, so every remote read follows the forwards. A
consumer from offset 0 must read exactly what was produced; deleting the topic must leave nothing of it in
the store, at either location.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from harness.kafka import tiered_storage_props
from harness.waiting import wait_until
from migrate_helpers import REPO, run_cli, topic_keys
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]

TOPIC = "moved-e2e"
PARTITIONS = 3
RECORDS = 24_000
VALUE_SIZE = 200


def _value(key: bytes) -> bytes:
    return hashlib.shake_256(key).digest(VALUE_SIZE)


def _store_keys(root: Path) -> list[str]:
    base = root / "tiered"
    return (
        topic_keys((str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()), TOPIC)
        if base.exists()
        else []
    )


def test_a_consumer_reads_the_same_after_a_move_and_a_topic_delete_leaves_nothing(
    bridge_plugin_jar,  # noqa: F811
    kafka_broker_factory,
    short_dir: Path,
) -> None:
    from harness.ports import free_ports
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    keyring = short_dir / "keyring.json"
    keyring.write_text(json.dumps({"k1": base64.b64encode(os.urandom(32)).decode()}))
    keyring.chmod(0o600)
    store = short_dir / "store"
    rsm = {
        "storage.backend": "file", "storage.file.root": str(store), "bucket": "tiered",
        "encryption.enabled": "true", "encryption.keyring.path": str(keyring), "encryption.key.id": "k1",
        "chunk.size": str(256 * 1024),
    }  # fmt: skip
    rsm |= {"bridge.socket.path": str(short_dir / "bridge.sock"), "bridge.command": bridge_command(),
            "bridge.log.file": str(short_dir / "bridge.log")}  # fmt: skip
    props = tiered_storage_props("io.tieredrsm.bridge.BridgeRemoteStorageManager", rsm, task_interval_ms=1000)
    props |= {
        "remote.log.storage.manager.class.path": str(bridge_plugin_jar),
        "log.segment.delete.delay.ms": "1000",
    }
    # the bridge runs this checkout's rsm (forwards followed by fetch and delete)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    broker = kafka_broker_factory(extra_props=props, extra_env=env, start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    broker.start()
    bootstrap = broker.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    server_properties = short_dir / "server.properties"
    server_properties.write_text(
        "".join(f"{k}={v}\n" for k, v in props.items() if k.startswith("rsm.config."))
    )
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": str(1 << 20), "local.retention.ms": "1000",
            "retention.ms": "-1",
        })])  # fmt: skip
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=20, acks="all"
        )
        expected: dict[bytes, tuple[int, int]] = {}
        futures = []
        for n in range(RECORDS):
            key = f"r-{n}".encode()
            futures.append((key, producer.send(TOPIC, key=key, value=_value(key), partition=n % PARTITIONS)))
        producer.flush()
        for key, fut in futures:
            md = fut.get(timeout=60)
            expected[key] = (md.partition, md.offset)
        producer.close()

        def local_segments(p: int) -> int:
            d = broker.partition_dir(TOPIC, p)
            return len(list(d.glob("*.log"))) if d.exists() else 0

        wait_until("segments tiered and deleted locally",
                   lambda: all(local_segments(p) == 1 for p in range(PARTITIONS)), 300, 2)  # fmt: skip
        before = [k for k in _store_keys(store) if k.endswith(".manifest")]
        assert len(before) >= PARTITIONS and not [k for k in before if k.startswith("moved/")]

        r = run_cli(["migrate", "--config", str(server_properties), "move", "--topic", TOPIC, "--to-prefix",
                     "moved/", "--json"])  # fmt: skip
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report["summary"]["done"] == len(before), report
        after = _store_keys(store)
        assert sorted(k for k in after if k.endswith(".manifest")) == sorted("moved/" + k for k in before)
        assert len([k for k in after if k.endswith(".forward")]) == len(before)

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=1000)  # fmt: skip
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[bytes, tuple[int, int]] = {}
        duplicates = bad = 0
        deadline = time.monotonic() + 240
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=2000, max_records=5000).values():
                for rec in records:
                    duplicates += rec.key in got
                    bad += rec.value != _value(rec.key)
                    got[rec.key] = (rec.partition, rec.offset)
        consumer.close()
        assert got == expected and duplicates == 0 and bad == 0, (len(got), len(expected), duplicates, bad)

        admin.delete_topics([TOPIC])
        wait_until("every object of the topic deleted", lambda: not _store_keys(store), 180, 2)
    finally:
        admin.close()
        log = short_dir / "bridge.log"
        if log.exists():
            print("--- bridge.log tail ---\n" + "\n".join(log.read_text().splitlines()[-30:]))
