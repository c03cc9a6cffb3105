"""On a real Kafka 4.4 broker: per-topic bucket, prefix and encryption through `rsm topic-config`.

The broker refuses `unchecked.rsm.*` topic configs, so one of two tiered topics gets its own bucket, prefix
and encryption key from the overlay in the store (written with the CLI from the broker's own
server.properties) before anything is produced. Both topics roll small segments that the plugin tiers
through the Python bridge into moto S3: each topic's objects must land in its own bucket and prefix
(encrypted only for the overlay topic), and a consumer from offset 0 reads every record back from S3.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from harness.kafka import tiered_storage_props
from harness.waiting import wait_until
from kafka_segments import write_keyring
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - fixtures

from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.cli.main import main
from rsm.cli.topic_config import lookup_topic_id

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.timeout(300)]

PLUGIN_CLASS = "io.tieredrsm.bridge.BridgeRemoteStorageManager"
RECORDS = 3000
VALUE_SIZE = 1000  # 3 MB per topic: two or three 1 MiB segments tiered
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": str(1024 * 1024),  # Kafka's minimum
    "local.retention.ms": "1000",
    "retention.ms": "-1",
}


def value_of(topic: str, n: int) -> bytes:
    """Incompressible and reproducible: a plaintext leak into an encrypted object would show."""
    return hashlib.shake_256(f"{topic}-{n}".encode()).digest(VALUE_SIZE)


def test_topic_overlay_routes_each_topic_to_its_own_bucket(
    bridge_plugin_jar: Path,  # noqa: F811
    kafka_broker_factory,  # noqa: ANN001
    s3_server,  # noqa: ANN001
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.ports import free_ports
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)  # the CLI in this process reaches moto like the bridge does
    default_bucket, other_bucket = s3_server.make_bucket(), s3_server.make_bucket()
    keyring = write_keyring(short_dir / "keyring.json", ("k1", "k2"))
    props = tiered_storage_props(
        PLUGIN_CLASS,
        {
            "storage.backend": "s3",
            "storage.s3.endpoint.url": s3_server.endpoint_url,
            "storage.s3.region": s3_server.region,
            "bucket": default_bucket,
            "prefix": "main/",
            "encryption.keyring.path": str(keyring),
            "chunk.size": str(128 * 1024),
            "topic.overlay.cache.ms": "1000",
            "bridge.socket.path": str(short_dir / "bridge.sock"),
            "bridge.command": bridge_command(),
            "bridge.log.file": str(short_dir / "bridge.log"),
        },
    )
    props["remote.log.storage.manager.class.path"] = str(bridge_plugin_jar)
    broker = kafka_broker_factory(extra_props=props, extra_env=s3_server.env(), start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    broker.start()
    bootstrap = broker.bootstrap_servers

    # today's broker refuses the seed-004 keys as topic configs: this is why the overlay exists
    admin = broker.admin_client()
    try:
        with pytest.raises(KafkaError, match="(?i)invalid.?config"):
            admin.create_topics(
                [NewTopic("probe", 1, 1, topic_configs={"unchecked.rsm.bucket": other_bucket})],
                validate_only=True,
            )
    finally:
        admin.close()

    for topic in ("plain", "secure"):
        broker.create_topic(topic, 1, TOPIC_CONFIGS)
    ids = {}
    for topic in ("plain", "secure"):
        # the broker's own record of the id (written shortly after the partition is created)
        meta_file = broker.partition_dir(topic, 0) / "partition.metadata"
        meta = wait_until(
            f"{meta_file}",
            lambda f=meta_file: f.exists() and "topic_id" in f.read_text() and f.read_text(),
            30,
            0.5,
        )
        ids[topic] = to_uuid(
            next(line.split(":", 1)[1].strip() for line in meta.splitlines() if "topic_id" in line)
        )
    assert lookup_topic_id(bootstrap, "secure") == ids["secure"]

    # the overlay, from the broker's own server.properties; the topic id is looked up from the broker
    capsys.readouterr()
    rc = main(
        [
            "topic-config",
            "--config",
            str(broker.config_file),
            "set",
            "--topic",
            "secure",
            "--bootstrap-server",
            bootstrap,
            f"unchecked.rsm.bucket={other_bucket}",
            "unchecked.rsm.prefix=secure-tier/",
            "unchecked.rsm.encryption.enabled=true",
            "unchecked.rsm.encryption.key.id=k2",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    effective = {e["name"]: (e["value"], e["source"]) for e in json.loads(out)["configs"]}
    assert effective["bucket"] == (other_bucket, "TOPIC_OVERLAY")
    assert effective["encryption.key.id"] == ("k2", "TOPIC_OVERLAY")

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10, batch_size=64 * 1024)
    for topic in ("plain", "secure"):
        for n in range(RECORDS):
            producer.send(topic, key=str(n).encode(), value=value_of(topic, n), partition=0)
    producer.flush()
    producer.close()

    s3 = s3_server.boto3_client()

    def objects(bucket: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = obj["Size"]
        return out

    def tiered() -> bool:
        locals_ = {t: list(broker.partition_dir(t, 0).glob("*.log")) for t in ("plain", "secure")}
        return all(len(v) == 1 for v in locals_.values())  # every rolled segment tiered and deleted locally

    wait_until("both topics' rolled segments tiered and deleted locally", tiered, 90, 0.5)

    stems = {t: f"{t}-{uuid_to_base64(ids[t])}/0/" for t in ids}
    in_default, in_other = objects(default_bucket), objects(other_bucket)
    plain_manifests = [k for k in in_default if k.endswith(".manifest")]
    secure_manifests = [k for k in in_other if k.endswith(".manifest")]
    assert len(plain_manifests) >= 2 and len(secure_manifests) >= 2
    assert all(k.startswith("main/" + stems["plain"]) for k in plain_manifests)
    assert all(k.startswith("secure-tier/" + stems["secure"]) for k in secure_manifests)
    # nothing of the secure topic in the default bucket but its overlay and its location record (which
    # names the other bucket); nothing of plain in the other one
    # its encryption memory (the topic's key k2, chosen by its overlay: rsm.copy.downgrade) beside them
    memory = f"main/_rsm/topic-encryption/{stems['secure'][:-3]}.json"
    assert memory in in_default
    remembered = json.loads(s3.get_object(Bucket=default_bucket, Key=memory)["Body"].read())
    assert (remembered["key_id"], remembered["setting"]) == ("k2", "unchecked.rsm.encryption.key.id")
    secure_in_default = [k for k in in_default if "secure" in k and k != memory]
    assert secure_in_default[0] == f"main/_rsm/topic-configs/{stems['secure'][:-3]}.json"
    assert [k.rsplit("/", 2)[1] for k in secure_in_default[1:]] == [stems["secure"][:-3]]
    assert all(k.startswith("main/_rsm/topic-locations/") for k in secure_in_default[1:])
    assert all(k.startswith("secure-tier/") for k in in_other)
    for key in secure_manifests:
        doc = json.loads(s3.get_object(Bucket=other_bucket, Key=key)["Body"].read())
        assert doc["encryption"]["key_id"] == "k2", key
    for key in plain_manifests:
        doc = json.loads(s3.get_object(Bucket=default_bucket, Key=key)["Body"].read())
        assert doc["encryption"] is None, key
    sample = value_of("secure", 5)[:64]
    for key in [k for k in in_other if k.endswith(".log")]:
        assert sample not in s3.get_object(Bucket=other_bucket, Key=key)["Body"].read(), key

    # offset 0 is only in S3 now; a consumer reads every record of both topics back
    for topic in ("plain", "secure"):
        first_local = min(int(p.stem) for p in broker.partition_dir(topic, 0).glob("*.log"))
        assert first_local > 0, topic
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1000
        )
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=2000).values():
                for r in records:
                    got[r.offset] = r.value
        consumer.close()
        assert sorted(got) == list(range(RECORDS)), f"{topic}: {len(got)} of {RECORDS} records"
        assert all(got[n] == value_of(topic, n) for n in range(RECORDS)), topic
