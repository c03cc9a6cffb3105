"""On a real Kafka 4.4 broker: the topic management policy through the plugin's CreateTopicPolicy and
AlterConfigPolicy, answered by the Python policy in the bridge.

The broker requires encryption for `pci-*` tiered topics (`rsm.config.policy.encryption.required.topics`)
and, like every Kafka 4.4 broker, refuses `unchecked.rsm.*` topic configs. So: a tiered `pci-*` topic is
refused with POLICY_VIOLATION and our message; a validateOnly create of a good topic succeeds, answers its
configs and creates nothing; the operator prepares `pci-cards` with a pending overlay (`rsm topic-config
--pending`), after which it is created and its segments are tiered encrypted with the key it named; an
alter switching remote storage on for an unencrypted `pci-*` topic is refused; with the bridge killed,
creating a tiered topic is refused with a message saying so, and works again once the bridge is back.
The bridge is run by the test (`rsm.config.bridge.command` empty) so that it stays down until restarted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.kafka import tiered_storage_props
from harness.waiting import wait_until
from kafka_segments import write_keyring
from test_bridge_plugin import REPO, bridge_plugin_jar  # noqa: F401 - fixtures

from rsm.bridge.client import BridgeClient
from rsm.cli.main import main
from rsm.stored.pending_overlay import PENDING_DIR

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

POLICY_CLASS = "io.tieredrsm.bridge.BridgeTopicPolicy"
PLUGIN_CLASS = "io.tieredrsm.bridge.BridgeRemoteStorageManager"
POLICY_VIOLATION = 44
TIERED = {
    "remote.storage.enable": "true",
    "segment.bytes": str(1024 * 1024),  # Kafka's minimum
    "local.retention.ms": "1000",
    "retention.ms": "-1",
}


def start_bridge(props: Path, sock: Path, log: Path) -> subprocess.Popen[bytes]:
    """The operator's bridge (`rsm bridge serve`), answering once its socket does."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsm.cli.main",
            "-v",
            "bridge",
            "serve",
            "--config",
            str(props),
            "--socket",
            str(sock),
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )

    def answers() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        client = BridgeClient(sock, pool_size=1)
        try:
            return client.health()["status"] == "ok"
        except OSError:
            return False
        finally:
            client.close()

    wait_until("the bridge answers", answers, 90, 0.3)
    return proc


def create(admin, topic: str, configs: dict[str, str], *, validate_only: bool = False) -> dict:  # noqa: ANN001
    result = admin.create_topics(
        {topic: {"num_partitions": 1, "replication_factor": 1, "configs": configs}},
        validate_only=validate_only,
        raise_errors=False,
    )
    (answer,) = result["topics"]
    return answer


def test_topic_policy_on_a_real_broker(
    bridge_plugin_jar: Path,  # noqa: F811
    kafka_broker_factory,  # noqa: ANN001
    short_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.ports import free_ports
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType

    keyring = write_keyring(short_dir / "keyring.json", ("k1", "k2"))
    keyring.chmod(0o600)
    store = short_dir / "store"
    sock = short_dir / "bridge.sock"
    rsm_config = {
        "storage.backend": "file",
        "storage.file.root": str(store),
        "bucket": "main",
        "prefix": "t/",
        "encryption.keyring.path": str(keyring),
        "chunk.size": str(128 * 1024),
        "topic.overlay.cache.ms": "1000",
        "policy.encryption.required.topics": "pci-.*",
        "bridge.socket.path": str(sock),
        "bridge.command": "",  # the operator's bridge: this test's
        "bridge.policy.timeout.ms": "5000",
    }
    bridge_props = short_dir / "bridge.properties"
    bridge_props.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in rsm_config.items()))
    bridge_log = short_dir / "bridge.log"
    bridge = start_bridge(bridge_props, sock, bridge_log)

    props = tiered_storage_props(PLUGIN_CLASS, rsm_config)
    props["remote.log.storage.manager.class.path"] = str(bridge_plugin_jar)
    props["create.topic.policy.class.name"] = POLICY_CLASS
    props["alter.config.policy.class.name"] = POLICY_CLASS
    # policies load from the broker's own classpath, not the RSM's class path
    broker = kafka_broker_factory(extra_props=props, extra_classpath=[bridge_plugin_jar], start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    try:
        broker.start()
        admin = broker.admin_client()
        try:
            # 1. a tiered pci- topic without encryption: POLICY_VIOLATION with our message, nothing created
            refused = create(admin, "pci-raw", TIERED)
            assert refused["error_code"] == POLICY_VIOLATION, refused
            assert "topic pci-raw: creation refused by the topic policy" in refused["error_message"]
            assert "must be encrypted" in refused["error_message"]
            assert (
                "rsm topic-config --config server.properties set --topic pci-raw" in refused["error_message"]
            )
            # 2. validateOnly of a good one: accepted, its configs answered (KIP-525), nothing created
            checked = create(admin, "plain", TIERED, validate_only=True)
            assert checked["error_code"] == 0, checked
            assert checked["configs"]["remote.storage.enable"]["value"] == "true"
            assert checked["configs"]["segment.bytes"]["value"] == str(1024 * 1024)
            assert "cleanup.policy" in checked["configs"]
            assert not {"plain", "pci-raw"} & set(admin.list_topics())

            # 3. the operator prepares pci-cards (a pending overlay: the topic has no id yet), then creates it
            capsys.readouterr()
            rc = main(
                [
                    "topic-config",
                    "--config",
                    str(broker.config_file),
                    "set",
                    "--topic",
                    "pci-cards",
                    "--pending",
                    "--bootstrap-server",
                    broker.bootstrap_servers,
                    "unchecked.rsm.encryption.enabled=true",
                    "unchecked.rsm.encryption.key.id=k2",
                ]
            )
            assert rc == 0, capsys.readouterr().err
            assert create(admin, "pci-cards", TIERED, validate_only=True)["error_code"] == 0
            broker.create_topic("pci-cards", 1, TIERED)

            # 4. an alter that breaks the policy: remote storage on for an unencrypted pci- topic
            assert create(admin, "pci-local", {"remote.storage.enable": "false"})["error_code"] == 0
            answer = admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.TOPIC, "pci-local", configs={"remote.storage.enable": "true"}
                    )
                ],
                # kafka-python checks the keys against the topic's described configs first: a topic just
                # made may not be described yet ("Unrecognized configs"); the broker's answer is the point
                raise_on_unknown=False,
            )
            result = answer["topic"]["pci-local"]
            assert "PolicyViolation" in result and "must be encrypted" in result, answer
            ok = admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "pci-cards", configs={"retention.ms": "86400000"})],
                raise_on_unknown=False,
            )
            assert ok["topic"]["pci-cards"] == "OK", ok
        finally:
            admin.close()

        # pci-cards' segments are tiered encrypted with k2: its pending overlay was adopted under its id
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=5)
        for _ in range(2500):
            producer.send("pci-cards", value=os.urandom(1000), partition=0)
        producer.flush()
        producer.close()
        manifests = lambda: sorted(store.rglob("*.manifest"))  # noqa: E731
        wait_until("pci-cards segments tiered", lambda: len(manifests()) >= 2, 120, 0.5)
        for manifest in manifests():
            assert "/pci-cards-" in str(manifest)
            assert json.loads(manifest.read_text())["encryption"]["key_id"] == "k2", manifest
        assert not (store / "main" / "t" / PENDING_DIR / "pci-cards.json").exists()
        overlays = list((store / "main" / "t" / "_rsm" / "topic-configs").glob("pci-cards-*.json"))
        assert len(overlays) == 1
        meta = (broker.partition_dir("pci-cards", 0) / "partition.metadata").read_text()
        topic_id = next(line.split(":", 1)[1].strip() for line in meta.splitlines() if "topic_id" in line)
        assert overlays[0].name == f"pci-cards-{topic_id}.json"

        # 5. the bridge killed: creating a tiered topic is refused, saying so; back, it works again
        bridge.send_signal(signal.SIGKILL)
        bridge.wait(30)
        admin = broker.admin_client()
        try:
            started = time.monotonic()
            down = create(admin, "plain", TIERED)
            assert down["error_code"] == POLICY_VIOLATION, down
            assert "the RSM bridge that checks the topic policy does not answer" in down["error_message"]
            assert "start it (rsm bridge serve)" in down["error_message"]
            assert time.monotonic() - started < 15
            assert "plain" not in admin.list_topics()
            # topics that do not concern tiered storage are not held back by it
            assert create(admin, "scratch", {"cleanup.policy": "compact"})["error_code"] == 0
            bridge = start_bridge(bridge_props, sock, bridge_log)
            assert create(admin, "plain", TIERED)["error_code"] == 0
            assert "must be encrypted" in create(admin, "pci-raw", TIERED)["error_message"]
        finally:
            admin.close()
    finally:
        if bridge.poll() is None:
            bridge.terminate()
            bridge.wait(30)
        print(bridge_log.read_text()[-5000:] if bridge_log.exists() else "", file=sys.stderr)
