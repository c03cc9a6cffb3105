"""On a real Kafka 4.4 broker: moving the default bucket never tiers an encrypted topic in plaintext.

A topic's overlay (at the catalog home in bucket A) encrypts it under its own key k2. The operator then
changes the broker's `rsm.config.bucket` from A to B, and nothing else, and restarts the broker: the RSM
must notice from what Kafka hands each copy (the leader-epoch checkpoint from the log's start) that the
topic's earlier offsets were tiered already, and refuse the copies with one line naming the procedure;
nothing reaches B. Following README's procedure (`catalog.bucket=A`) the next segments land in B, under k2,
and a consumer reads every record from offset 0 (the oldest from A, the newer from B).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from harness.kafka import tiered_storage_props
from harness.waiting import wait_until
from kafka_segments import write_keyring
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - fixtures
from test_kafka_topic_overlay import PLUGIN_CLASS, TOPIC_CONFIGS, VALUE_SIZE, value_of

from rsm.cli.main import main

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.timeout(420)]

RECORDS = 2500  # per round: two or three 1 MiB segments rolled
TOPIC = "secure"


def test_changing_only_the_bucket_refuses_copies_and_the_procedure_keeps_the_overlay(
    bridge_plugin_jar: Path,  # noqa: F811
    kafka_broker_factory,  # noqa: ANN001
    s3_server,  # noqa: ANN001
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.ports import free_ports
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    bucket_a, bucket_b = s3_server.make_bucket(), s3_server.make_bucket()
    keyring = write_keyring(short_dir / "keyring.json", ("k1", "k2"))
    keyring.chmod(0o600)
    bridge_log = short_dir / "bridge.log"
    props = tiered_storage_props(
        PLUGIN_CLASS,
        {
            "storage.backend": "s3",
            "storage.s3.endpoint.url": s3_server.endpoint_url,
            "storage.s3.region": s3_server.region,
            "bucket": bucket_a,
            "encryption.keyring.path": str(keyring),
            "chunk.size": str(128 * 1024),
            "topic.overlay.cache.ms": "1000",
            "bridge.socket.path": str(short_dir / "bridge.sock"),
            "bridge.command": bridge_command(),
            "bridge.log.file": str(bridge_log),
        },
    )
    props["remote.log.storage.manager.class.path"] = str(bridge_plugin_jar)
    broker = kafka_broker_factory(extra_props=props, extra_env=s3_server.env(), start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    broker.start()
    bootstrap = broker.bootstrap_servers
    broker.create_topic(TOPIC, 1, TOPIC_CONFIGS)
    wait_until("the topic's partition.metadata", lambda: (broker.partition_dir(TOPIC, 0) / "partition.metadata").exists(), 30, 0.5)  # fmt: skip
    capsys.readouterr()
    rc = main(["topic-config", "--config", str(broker.config_file), "set", "--topic", TOPIC,
               "--bootstrap-server", bootstrap, "unchecked.rsm.encryption.enabled=true",
               "unchecked.rsm.encryption.key.id=k2"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err

    s3 = s3_server.boto3_client()

    def objects(bucket: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        return out

    def produce(first: int) -> None:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=10,
                                 batch_size=64 * 1024)  # fmt: skip
        for n in range(first, first + RECORDS):
            producer.send(TOPIC, key=str(n).encode(), value=value_of(TOPIC, n), partition=0)
        producer.flush()
        producer.close()

    def tiered() -> bool:
        return len(list(broker.partition_dir(TOPIC, 0).glob("*.log"))) == 1

    def manifests(bucket: str) -> list[dict[str, object]]:
        return [json.loads(v) for k, v in objects(bucket).items() if k.endswith(".manifest")]

    produce(0)
    wait_until("the first round tiered into A", tiered, 90, 0.5)
    round_one = manifests(bucket_a)
    assert round_one and all(m["encryption"]["key_id"] == "k2" for m in round_one)  # type: ignore[index]

    # 1. only the bucket changed: every copy refused, naming the procedure; nothing reaches B
    broker.extra_props["rsm.config.bucket"] = bucket_b
    broker.restart()
    produce(RECORDS)
    wait_until(
        "the copy's refusal in the bridge log",
        lambda: "catalog.bucket" in bridge_log.read_text(errors="replace"),
        90,
        0.5,
    )
    refusal = next(
        line for line in bridge_log.read_text(errors="replace").splitlines() if "catalog.bucket" in line
    )
    assert "refused" in refusal and TOPIC in refusal and "Moving the default bucket" in refusal
    time.sleep(3)  # a few more of Kafka's retries (every 500 ms here)
    assert objects(bucket_b) == {}
    assert len(list(broker.partition_dir(TOPIC, 0).glob("*.log"))) > 1  # the segments wait on the broker

    # 2. README's procedure: the catalog stays in A; the waiting segments go to B under the topic's key
    broker.extra_props["rsm.config.catalog.bucket"] = bucket_a
    broker.restart()
    wait_until("the second round tiered into B", tiered, 120, 0.5)
    in_b = objects(bucket_b)
    round_two = [json.loads(v) for k, v in in_b.items() if k.endswith(".manifest")]
    assert round_two and all(m["encryption"]["key_id"] == "k2" for m in round_two)  # type: ignore[index]
    assert not any(k.startswith("_rsm/") for k in in_b)  # the documents stayed at the home
    samples = [value_of(TOPIC, n)[:64] for n in range(RECORDS, 2 * RECORDS, 97)]
    for key, blob in in_b.items():
        assert not any(s in blob for s in samples), key

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=1000)  # fmt: skip
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 90
    while len(got) < 2 * RECORDS and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000, max_records=2000).values():
            for r in records:
                got[r.offset] = r.value
    consumer.close()
    assert sorted(got) == list(range(2 * RECORDS)), f"{len(got)} of {2 * RECORDS} records"
    assert all(got[n] == value_of(TOPIC, n) for n in range(2 * RECORDS))
    assert len(got[0]) == VALUE_SIZE
