"""End to end on GCS and Azure: a real Kafka 4.4 broker tiering to fake-gcs-server and to Azurite through
the JVM plugin and the Python bridge, as tests/broker/test_kafka_tiering_e2e.py does to moto's S3.

One broker per cloud (KRaft, 1 MiB segments, 1 s local retention), encrypted segments, records of three
codecs and a committed transaction in a 3-partition topic. Then: every partition is tiered and trimmed
locally, the cloud holds complete segments only (each manifest with its objects, no partial object, no
staged blocks left), a read_committed consumer from offset 0 reads every record back from the cloud, and
`format("kafka-tiered")` reading the bucket with the broker's own server.properties gives exactly the rows
that consumer read. Smaller than the S3 test (which also kills the bridge): the store is what differs.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
from harness.waiting import wait_until
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture
from test_bridge_plugin import write_keyring as write_bridge_keyring
from test_kafka_tiering_e2e import (
    PARTITIONS,
    TOPIC,
    consumer_table,
    first_difference,
    local_segments,
    read_from_zero,
    spark_table,
    value_of,
)

from rsm.config.settings import RsmConfig
from rsm.store.objects import ObjectStore

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(900)]

FIXTURES = {"gcs": "gcs_server", "azure": "azurite_server"}
PER_CODEC = 6_000


def produce(bootstrap: str) -> dict[bytes, tuple[int, int]]:
    """Three codecs, then a committed transaction: key -> (partition, offset)."""
    from kafka import KafkaProducer

    expected: dict[bytes, tuple[int, int]] = {}
    for codec in ("none", "zstd", "lz4"):
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                 linger_ms=20, batch_size=64 * 1024, acks="all")  # fmt: skip
        futures = [
            (
                key,
                producer.send(
                    TOPIC,
                    key=key,
                    value=value_of(key),
                    partition=n % PARTITIONS,
                    headers=[("codec", codec.encode())] if n % 2 else [],
                ),
            )  # fmt: skip
            for n in range(PER_CODEC)
            for key in [f"{codec}-{n}".encode()]
        ]
        producer.flush()
        expected.update(
            {key: (md.partition, md.offset) for key, fut in futures for md in [fut.get(timeout=60)]}
        )
        producer.close()
    tx = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="clouds-tx", compression_type="zstd")
    tx.init_transactions()
    tx.begin_transaction()
    futures = [(f"tx-{n}".encode(), tx.send(TOPIC, key=f"tx-{n}".encode(), value=value_of(f"tx-{n}".encode()),
                                            partition=n % PARTITIONS)) for n in range(300)]  # fmt: skip
    tx.flush()
    tx.commit_transaction()
    expected.update(
        {key: (fut.get(timeout=60).partition, fut.get(timeout=60).offset) for key, fut in futures}
    )
    tx.close()
    tail = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    futures = [(f"tail-{n}".encode(), tail.send(TOPIC, key=f"tail-{n}".encode(), value=value_of(f"tail-{n}".encode()),
                                                partition=n % PARTITIONS)) for n in range(1500)]  # fmt: skip
    tail.flush()
    expected.update(
        {key: (fut.get(timeout=60).partition, fut.get(timeout=60).offset) for key, fut in futures}
    )
    tail.close()
    return expected


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_a_broker_tiers_to_the_cloud_and_spark_reads_it_back(
    name: str, request: pytest.FixtureRequest, bridge_plugin_jar, kafka_broker_factory, short_dir, spark,  # noqa: F811, ANN001
) -> None:  # fmt: skip
    from harness.ports import free_ports
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    cloud: Any = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    prefix = "tiers/"
    keyring = short_dir / "keyring.json"
    key_id = write_bridge_keyring(keyring)
    sock = short_dir / "bridge.sock"
    rsm_configs = cloud.rsm_configs(
        bucket=bucket,
        prefix=prefix,
        **{
            "encryption.enabled": "true",
            "encryption.keyring.path": str(keyring),
            "encryption.key.id": key_id,
            "chunk.size": str(256 * 1024),
        },
    )
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.tieredrsm.bridge.BridgeRemoteStorageManager",
        "remote.log.storage.manager.class.path": str(bridge_plugin_jar),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "1000",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "1000",
        **{f"rsm.config.{k}": v for k, v in rsm_configs.items()},
        "rsm.config.bridge.socket.path": str(sock),
        "rsm.config.bridge.command": bridge_command(),
        "rsm.config.bridge.log.file": str(short_dir / "bridge.log"),
    }
    broker = kafka_broker_factory(extra_props=props, start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    broker.start()
    bootstrap = broker.bootstrap_servers
    store = ObjectStore.from_config(RsmConfig(rsm_configs))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": str(1024 * 1024), "local.retention.ms": "1000",
            "retention.ms": "-1"})])  # fmt: skip
        expected = produce(bootstrap)

        def all_tiered() -> bool:
            segments = [local_segments(broker, p) for p in range(PARTITIONS)]
            return all(
                len(s) == 1 and (broker.partition_dir(TOPIC, p) / f"{s[0]:020d}.log").stat().st_size == 0
                for p, s in enumerate(segments)
            )

        wait_until("local segments tiered and deleted", all_tiered, 300, 2)
        keys = store.list(bucket, prefix, include_temporary=True)
        manifests = [k for k in keys if k.endswith(".manifest") and "/_rsm/" not in f"/{k}"]
        assert len(manifests) >= 2 * PARTITIONS, keys
        for m in manifests:
            stem = m[: -len(".manifest")]
            assert stem + ".log" in keys and stem + ".indexes" in keys, f"manifest {m} without its objects"
            assert json.loads(store.get(bucket, m))["encryption"]["key_id"] == key_id
        assert not [k for k in keys if ".tmp-" in k] and store.uploads_under(bucket, "") == []

        committed = read_from_zero(bootstrap, "read_committed")
        got = {r.key: (r.partition, r.offset) for r in committed}
        assert len(got) == len(committed) == len(expected) and got == expected
        assert all(r.value == value_of(r.key) for r in committed)

        import spark_reader

        spark_reader.register(spark)
        started = time.monotonic()
        table = spark_table(spark, {"rsm.properties": str(broker.config_file)}, "read_committed")
        want = consumer_table(committed, table.schema)
        if not table.equals(want):
            pytest.fail(f"format kafka-tiered differs from the consumer: {first_difference(table, want)}")
        print(
            f"{name}: {len(committed)} records tiered in {len(manifests)} segments, read back by a consumer and "
            f"by Spark ({time.monotonic() - started:.1f}s)",
            file=sys.stderr,
        )
    finally:
        admin.close()
        log = short_dir / "bridge.log"
        if log.exists():
            print(
                "--- bridge.log tail ---\n" + "\n".join(log.read_text().splitlines()[-30:]), file=sys.stderr
            )
