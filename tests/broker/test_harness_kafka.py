"""The harness's Kafka 4.4.0 broker is real: topics, produce, consume, segments on disk, restarts."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from harness.kafka import KafkaBroker, KafkaStartError, tiered_storage_props
from harness.oracle import JavaOracle
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

pytestmark = pytest.mark.kafka

DIRECTORY_RSM = "io.github.kafkatieredrsm.oracle.DirectoryRemoteStorageManager"


def _produce(broker: KafkaBroker, topic: str, messages: list[tuple[bytes | None, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=5)
    try:
        for key, value in messages:
            producer.send(topic, key=key, value=value, headers=[("source", b"harness")])
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


def _consume_all(broker: KafkaBroker, topic: str, expected: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        records = []
        for record in consumer:
            records.append(record)
            if len(records) >= expected:
                break
        return records
    finally:
        consumer.close()


def _create_topic(broker: KafkaBroker, topic: str, configs: dict[str, str] | None = None) -> None:
    description = broker.create_topic(topic, configs=configs)
    assert description["name"] == topic and description["partitions"][0]["leader_id"] == broker.node_id
    admin = broker.admin_client()
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()


def test_create_produce_consume(kafka_broker: KafkaBroker, java_oracle: JavaOracle) -> None:
    topic = f"harness-{uuid.uuid4().hex[:8]}"
    _create_topic(kafka_broker, topic)
    messages = [(None if i % 5 == 0 else f"k{i}".encode(), f"value-{i}".encode() * 3) for i in range(50)]
    _produce(kafka_broker, topic, messages)

    records = _consume_all(kafka_broker, topic, len(messages))
    assert [(r.key, r.value) for r in records] == messages
    assert [r.offset for r in records] == list(range(50))
    assert all(list(r.headers) == [("source", b"harness")] for r in records)

    # The broker wrote a real segment in its log dir; Kafka's own reader sees the same records.
    segment = kafka_broker.partition_dir(topic) / "00000000000000000000.log"
    assert segment.is_file()
    batches = java_oracle.dump(segment)
    dumped = [rec for batch in batches for rec in batch["records"]]
    assert [rec["offset"] for rec in dumped] == list(range(50))
    assert all(batch["isValid"] and batch["magic"] == 2 for batch in batches)


def test_factory_applies_extra_props_and_survives_restart(kafka_broker_factory) -> None:  # noqa: ANN001
    broker = kafka_broker_factory(
        {"log.segment.bytes": str(2 * 1024 * 1024), "log.retention.check.interval.ms": "1000"}
    )
    assert broker.is_running()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=30_000)
    try:
        response = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )
        # {resource_type: {resource_name: {config_key: {config data}}}}
        (by_name,) = response.values()
        entry = by_name["1"]["log.segment.bytes"]
        assert (entry["value"], entry["config_source"]) == (str(2 * 1024 * 1024), "STATIC_BROKER_CONFIG")
    finally:
        admin.close()
    assert "log.retention.check.interval.ms=1000" in broker.config_file.read_text()

    topic = "survives-restart"
    _create_topic(broker, topic)
    _produce(broker, topic, [(b"k", b"before restart")])
    old_pid = broker.pid
    broker.restart()
    assert broker.pid != old_pid
    _produce(broker, topic, [(b"k", b"after restart")])
    assert [r.value for r in _consume_all(broker, topic, 2)] == [b"before restart", b"after restart"]
    broker.stop()
    assert not broker.is_running()


def test_bad_config_fails_with_the_log_tail(kafka_broker_factory) -> None:  # noqa: ANN001
    with pytest.raises(KafkaStartError) as info:
        kafka_broker_factory({"num.io.threads": "not-a-number"})
    assert "Invalid value not-a-number for configuration num.io.threads" in str(info.value)


def test_broker_dying_at_start_reports_the_root_cause(kafka_broker_factory) -> None:  # noqa: ANN001
    tiered = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "does.not.Exist",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
    }
    with pytest.raises(KafkaStartError) as info:
        kafka_broker_factory(tiered)
    message = str(info.value)
    assert "exited with code" in message
    assert "ClassNotFoundException: does.not.Exist" in message


def _wait_for(condition, timeout: float, what: str, broker: KafkaBroker):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{broker.log_tail(40)}")


def test_tiered_storage_props_move_segments_to_a_real_rsm(
    kafka_broker_factory, java_build, java_oracle: JavaOracle, tmp_path: Path
) -> None:  # noqa: ANN001
    """The harness's tiered-storage settings work with a real broker and a (reference, Java) RSM."""
    remote = tmp_path / "remote"
    broker = kafka_broker_factory(
        tiered_storage_props(DIRECTORY_RSM, {"dir": str(remote)}), extra_classpath=[java_build.oracle_jar]
    )
    topic = "tiered"
    _create_topic(
        broker,
        topic,
        {
            "remote.storage.enable": "true",
            "segment.bytes": str(1024 * 1024),
            "local.retention.ms": "1000",
            "retention.ms": "-1",
        },
    )
    messages = [(f"k{i}".encode(), bytes([i % 251]) * 1000) for i in range(3000)]  # ~3 MB: 3+ segments
    _produce(broker, topic, messages)

    def copied_segments() -> list[Path]:
        return sorted(p for p in remote.rglob("*.log") if p.name != "operations.log")

    remote_logs = _wait_for(
        lambda: copied_segments() if len(copied_segments()) >= 2 else None,
        120,
        "two segments copied to remote storage",
        broker,
    )
    local_dir = broker.partition_dir(topic)
    _wait_for(
        lambda: not (local_dir / "00000000000000000000.log").exists(),
        120,
        "the first local segment deleted after its copy",
        broker,
    )

    # Records of the deleted local segments now come from the RSM through the broker.
    records = _consume_all(broker, topic, len(messages))
    assert [(r.offset, r.key, r.value) for r in records] == [(i, k, v) for i, (k, v) in enumerate(messages)]
    operations = (remote / "operations.log").read_text().splitlines()
    assert any(op.startswith("copy 0 ") for op in operations)
    assert any(op.startswith("fetch 0 ") for op in operations), operations

    # What the broker handed the RSM is a genuine closed segment.
    first = remote_logs[0]
    assert java_oracle.check(first)["firstOffset"] == 0
