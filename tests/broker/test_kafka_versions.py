"""The plugin jar on every Kafka line it supports: one jar, the same end-to-end check, 3.9.2 to 4.4.0.

For the newest patch of each Kafka line (``compat_table.KAFKA_VERSIONS``), a real single-node KRaft broker
of that version (``harness.kafka_versions``: its jars resolved by Maven into ``.cache/kafka-libs-<v>``)
loads the one plugin jar, built once against Kafka 3.9's API, as its RemoteStorageManager (through
``remote.log.storage.manager.class.path``, as README deploys it) and its topic policy (from its classpath),
with the Python bridge on a file store. Small 1 MiB segments, then:

* copy: closed segments reach the store and leave the broker's disk;
* remote fetch: a kafka-python consumer from offset 0 reads every record back, those below the local log
  start served by the plugin (the bridge counts the segment fetches);
* fetch index: ListOffsets by timestamp inside the tiered range lands on the right offset (Kafka reads
  the remote time index through the plugin);
* delete: retention.ms lowered on the topic, the broker deletes its remote segments (the store is empty);
* topic policy (every supported line has CreateTopicPolicy and AlterConfigPolicy): an unencrypted tiered
  ``pci-*`` topic is refused with the policy's message, a plain tiered one accepted.

And, without a broker: every Kafka class the jar names (jdeps) is in that version's jars, but for KIP-877's
two interfaces before Kafka 4.1 (named only by BridgeRemoteStorageManager, which those brokers do not load).

The broker's one compatibility line (the plugin's ``KafkaApi``: what it adapted to this version's API) and
the plugin class are recorded with the checks in ``.cache/compat/kafka-<version>.json``, which
``python -m tests.compat_table`` renders into README. A version the Maven registry does not serve is
skipped saying so; any other failure (the broker not starting included) fails.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from compat_table import KAFKA_VERSIONS, RECORDS_DIR, Record
from harness.kafka import KafkaBroker, tiered_storage_props
from harness.kafka_versions import KafkaLine, KafkaVersionNotServed, broker_libs
from harness.ports import free_ports
from harness.waiting import wait_until
from kafka_segments import write_keyring
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture

from rsm.bridge.client import BridgeClient

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

TOPIC = "compat"
RECORDS = 3300  # of 1000 bytes: three full 1 MiB segments and an active one
VALUE_SIZE = 1000
T0 = int(time.time() * 1000) - 3_600_000  # record timestamps: an hour ago, one ms apart
POLICY_CLASS = "io.tieredrsm.bridge.BridgeTopicPolicy"
POLICY_VIOLATION = 44
COMPAT_LINE = "rsm bridge plugin compatibility: "  # KafkaApi.LOG_PREFIX
TIERED = {
    "remote.storage.enable": "true",
    "segment.bytes": str(1024 * 1024),  # the minimum from Kafka 4.0
    "local.retention.ms": "1000",
    "retention.ms": "-1",
}


def value_of(n: int) -> bytes:
    return hashlib.shake_256(n.to_bytes(4, "big")).digest(VALUE_SIZE)


@dataclass
class Proved:
    """What one version's case proved, written as its compat record when every check passed."""

    version: str
    checks: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def passed(self, check: str) -> None:
        self.checks.append(check)

    def write(self) -> Path:
        record = Record(
            "kafka", self.version, tuple(self.checks), tuple(self.degraded), tuple(self.notes),
            dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )  # fmt: skip
        return record.write(RECORDS_DIR, seconds=round(time.monotonic() - self.started, 1))


class Store:
    """The file store the bridge writes: the topic's segments by their manifests."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def manifests(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.manifest") if f"/{TOPIC}-" in str(p))


def _libs_or_skip(version: str) -> Path:
    try:
        return broker_libs(version)
    except KafkaVersionNotServed as exc:
        pytest.skip(f"Kafka {version} is not served by the Maven registry here, so it is untested: {exc}")


@pytest.fixture
def broker(
    request: pytest.FixtureRequest,
    bridge_plugin_jar: Path,  # noqa: F811 - the session fixture
    short_dir: Path,
    tmp_path: Path,
) -> Iterator[KafkaBroker]:
    """A broker of the case's version with the plugin as its RSM and topic policy (not started)."""
    line = KafkaLine(request.param)
    _libs_or_skip(line.version)
    keyring = write_keyring(short_dir / "keyring.json", ("k1",))
    keyring.chmod(0o600)
    rsm_config = {
        "storage.backend": "file",
        "storage.file.root": str(short_dir / "store"),
        "bucket": "main",
        "prefix": "t/",
        "encryption.keyring.path": str(keyring),
        "chunk.size": str(128 * 1024),
        "policy.encryption.required.topics": "pci-.*",
        "bridge.socket.path": str(short_dir / "bridge.sock"),
        "bridge.command": bridge_command(),
        "bridge.log.file": str(short_dir / "bridge.log"),
        "bridge.policy.timeout.ms": "10000",
    }
    props = tiered_storage_props(line.plugin_class, rsm_config)
    props["remote.log.storage.manager.class.path"] = str(bridge_plugin_jar)
    props["create.topic.policy.class.name"] = POLICY_CLASS
    props["alter.config.policy.class.name"] = POLICY_CLASS
    props["log.segment.delete.delay.ms"] = "1000"
    props["log.message.timestamp.before.max.ms"] = str(2**62)
    # the policies load from the broker's own classpath, not the RSM's class path
    b = KafkaBroker(tmp_path / "broker", props, [bridge_plugin_jar], kafka_version=line.version)
    b.port, b.controller_port = free_ports(2)
    b.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{b.port}"
    try:
        yield b
    finally:
        b.stop()


def _create(
    admin: Any, topic: str, configs: dict[str, str], *, validate_only: bool = False
) -> dict[str, Any]:
    result = admin.create_topics(
        {topic: {"num_partitions": 1, "replication_factor": 1, "configs": configs}},
        validate_only=validate_only,
        raise_errors=False,
    )
    (answer,) = result["topics"]
    return dict(answer)


def _produce(bootstrap: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=64 * 1024)
    futures = [
        producer.send(TOPIC, key=str(n).encode(), value=value_of(n), partition=0, timestamp_ms=T0 + n)
        for n in range(RECORDS)
    ]
    producer.flush()
    offsets = [f.get(timeout=60).offset for f in futures]
    producer.close()
    assert offsets == list(range(RECORDS)), "the records did not land at offsets 0.."


def _local_start(broker: KafkaBroker) -> int:
    logs = sorted(int(p.stem) for p in broker.partition_dir(TOPIC).glob("*.log"))
    return logs[0] if logs else 0


def _bridge_counter(sock: Path, name: str) -> float:
    """The bridge's counter ``name`` summed over its series for the topic (per partition ones left out)."""
    client = BridgeClient(sock, pool_size=1)
    try:
        snapshot = client.metrics()
    finally:
        client.close()
    return sum(
        float(s["values"].get(name, 0))
        for s in snapshot["series"]
        if s["tags"].get("topic") == TOPIC and "partition" not in s["tags"]
    )


def _check_policy(admin: Any, proved: Proved) -> None:
    refused = _create(admin, "pci-raw", TIERED)
    assert refused["error_code"] == POLICY_VIOLATION, refused
    assert "must be encrypted" in refused["error_message"], refused
    accepted = _create(admin, "plain-ok", TIERED, validate_only=True)
    assert accepted["error_code"] == 0, accepted
    proved.passed("topic policy: refuses, accepts")


def _check_copy(broker: KafkaBroker, store: Store, proved: Proved) -> int:
    _produce(broker.bootstrap_servers)
    wait_until("two segments tiered and the local log start past them",
               lambda: len(store.manifests()) >= 2 and _local_start(broker) > 0, 120, 0.5)  # fmt: skip
    proved.passed("copy")
    return _local_start(broker)


def _check_remote_fetch(broker: KafkaBroker, sock: Path, proved: Proved) -> None:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[Any] = []
        deadline = time.monotonic() + 120
        while consumer.position(tp) < RECORDS:
            assert time.monotonic() < deadline, f"consumer stuck at offset {consumer.position(tp)}"
            for batch in consumer.poll(timeout_ms=2000).values():
                got.extend(batch)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(RECORDS))
    assert all(r.value == value_of(r.offset) and r.timestamp == T0 + r.offset for r in got)
    assert _bridge_counter(sock, "segment-fetch-total") > 0, "no segment was fetched through the plugin"
    proved.passed("remote fetch from offset 0")


def _check_fetch_index(broker: KafkaBroker, sock: Path, local_start: int, proved: Proved) -> None:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    try:
        for target in (1, local_start // 2, local_start - 1):
            found = consumer.offsets_for_times({tp: T0 + target})[tp]
            assert found is not None and found.offset == target, (target, found)
    finally:
        consumer.close()
    assert _bridge_counter(sock, "index-fetch-total") > 0, "no index was fetched through the plugin"
    proved.passed("fetch index: ListOffsets by timestamp")


def _check_delete(broker: KafkaBroker, store: Store, proved: Proved) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = broker.admin_client()
    try:
        answer = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={"retention.ms": "1000"})]
        )
    finally:
        admin.close()
    assert answer["topic"][TOPIC] == "OK", answer
    wait_until("retention to delete the remote segments", lambda: not store.manifests(), 120, 0.5)
    proved.passed("delete by retention")


def _compat_line(broker: KafkaBroker) -> str:
    """The plugin's compatibility line in the broker's log, without the layout's logger name."""
    text = (broker.logs_dir / "server.log").read_text(errors="replace")
    lines = [line for line in text.splitlines() if COMPAT_LINE in line]
    assert len(lines) == 1, f"expected one compatibility line in the broker's log, found {lines}"
    return lines[0].split(COMPAT_LINE, 1)[1].removesuffix(" (io.tieredrsm.bridge.KafkaApi)")


KIP_877 = {"org.apache.kafka.common.metrics.Monitorable", "org.apache.kafka.common.metrics.PluginMetrics"}


@pytest.fixture(scope="module")
def kafka_classes_named(bridge_plugin_jar: Path) -> set[str]:  # noqa: F811 - the session fixture
    """Every org.apache.kafka class the plugin jar's classes refer to (jdeps, the JDK's own tool)."""
    jdeps = shutil.which("jdeps")
    if jdeps is None:
        pytest.skip("needs the JDK's jdeps")
    out = subprocess.run(
        [jdeps, "-verbose:class", str(bridge_plugin_jar)], capture_output=True, text=True, check=True
    ).stdout
    return set(re.findall(r"-> (org\.apache\.kafka\.\S+)", out))


@pytest.mark.parametrize("version", KAFKA_VERSIONS, ids=lambda v: f"kafka-{v}")
def test_the_jar_names_only_classes_the_kafka_line_has(version: str, kafka_classes_named: set[str]) -> None:
    libs = _libs_or_skip(version)
    present: set[str] = set()
    for jar in libs.glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            present |= {n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class")}
    missing = kafka_classes_named - present
    expected = set() if KafkaLine(version).has_plugin_metrics else KIP_877
    assert missing == expected, f"Kafka {version} lacks {sorted(missing - expected)}"
    assert len(kafka_classes_named) > 20, kafka_classes_named


@pytest.mark.parametrize("broker", KAFKA_VERSIONS, indirect=True, ids=lambda v: f"kafka-{v}")
def test_the_plugin_jar_on_a_kafka_line(broker: KafkaBroker, short_dir: Path) -> None:
    version = broker.kafka.version
    record = RECORDS_DIR / f"kafka-{version}.json"
    record.unlink(missing_ok=True)  # a failed run leaves no record of success
    proved = Proved(version)
    broker.start()
    line = _compat_line(broker)
    assert f"Kafka {version}, plugin class {broker.kafka.plugin_class}" in line, line
    proved.notes.append(f"RSM class {broker.kafka.plugin_class.rsplit('.', 1)[1]}")
    if "adapted: " in line:
        proved.degraded.extend(line.split("adapted: ", 1)[1].split("; "))
    proved.passed("starts with the plugin jar")
    store = Store(short_dir / "store")
    sock = short_dir / "bridge.sock"
    admin = broker.admin_client()
    try:
        _check_policy(admin, proved)
    finally:
        admin.close()
    broker.create_topic(TOPIC, 1, TIERED)
    local_start = _check_copy(broker, store, proved)
    _check_remote_fetch(broker, sock, proved)
    _check_fetch_index(broker, sock, local_start, proved)
    _check_delete(broker, store, proved)
    path = proved.write()
    print(json.dumps(json.loads(path.read_text())))
