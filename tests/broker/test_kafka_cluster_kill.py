"""Kafka as operators run it, with the leader of a tiering partition killed with SIGKILL.

Three KRaft nodes (broker+controller each), replication factor 3, min.insync.replicas=2, our plugin and
its own bridge on every broker, one shared moto bucket. An idempotent acks=all producer writes keyed
records to a 3-partition topic; once partition 0 has segments in the store, its leader is killed with
kill -9 while its bridge has a request in flight (a copy or a read). Producing goes on against the new
leader; the killed node comes back. When every partition is tiered past the records sent and trimmed
locally, a consumer from offset 0 reads every acknowledged record exactly once, at the offset it was
acknowledged with, and the Spark source reading the bucket gives the same rows for the tiered range.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import Counter

import pytest
from harness.kafka import tiered_storage_props
from harness.kafka_cluster import KafkaCluster
from harness.waiting import wait_until
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture

from rsm.bridge.client import BridgeClient

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "cluster-kill"
PARTITIONS = 3
RECORDS = 36_000  # ~4 MiB of values per partition: several segments each
VALUE_SIZE = 300
PREFIX = "tiers/"


def value_of(key: bytes) -> bytes:
    return hashlib.shake_256(key).digest(VALUE_SIZE)


def manifests(client, bucket: str) -> list[dict]:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{PREFIX}{TOPIC}-"):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".manifest"):
                doc = json.loads(client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                out.append(doc["segment"])
    return out


def tiered_end(client, bucket: str) -> dict[int, int]:
    """partition -> the highest end offset of a segment in the store (-1: none yet)."""
    ends = dict.fromkeys(range(PARTITIONS), -1)
    for seg in manifests(client, bucket):
        ends[seg["partition"]] = max(ends[seg["partition"]], seg["end_offset"])
    return ends


def local_start(node, partition: int) -> int | None:
    d = node.partition_dir(TOPIC, partition)
    bases = sorted(int(p.stem) for p in d.glob("*.log")) if d.exists() else []
    return bases[0] if bases else None


class Sends:
    """What the producer sent and what Kafka acknowledged (partition, offset), from the send callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: set[bytes] = set()
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}

    def send(self, producer, key: bytes, partition: int) -> None:
        with self.lock:
            self.sent.add(key)
        fut = producer.send(TOPIC, key=key, value=value_of(key), partition=partition)
        fut.add_callback(self._ok, key)
        fut.add_errback(self._failed, key)

    def _ok(self, key: bytes, md) -> None:  # noqa: ANN001
        with self.lock:
            self.acked[key] = (md.partition, md.offset)

    def _failed(self, key: bytes, exc: BaseException) -> None:
        with self.lock:
            self.failed[key] = repr(exc)


def test_leader_killed_while_tiering(bridge_plugin_jar, java_build, s3_server, spark, short_dir, tmp_path):  # noqa: F811
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    started = time.monotonic()
    bucket = s3_server.make_bucket()
    s3 = s3_server.boto3_client()
    store_configs = s3_server.rsm_configs(bucket=bucket, prefix=PREFIX)
    props = tiered_storage_props(
        "io.tieredrsm.bridge.BridgeRemoteStorageManager",
        {
            **store_configs,
            "chunk.size": str(256 * 1024),
            "bridge.command": bridge_command(),
            "bridge.restart.backoff.ms": "200",
        },
        task_interval_ms=1000,
        metadata_replication_factor=3,
    )
    props.update(
        {
            "remote.log.storage.manager.class.path": str(bridge_plugin_jar),
            "remote.log.manager.task.retry.backoff.ms": "500",
            "remote.log.manager.task.retry.backoff.max.ms": "2000",
            "log.segment.delete.delay.ms": "1000",
            "replica.lag.time.max.ms": "10000",
        }
    )

    def per_node(node) -> dict[str, str]:  # noqa: ANN001
        return {
            "rsm.config.bridge.socket.path": str(short_dir / f"b{node.node_id}.sock"),
            "rsm.config.bridge.log.file": str(short_dir / f"bridge-{node.node_id}.log"),
            "rsm.config.bridge.admin.bootstrap.servers": f"127.0.0.1:{node.port}",
        }

    cluster = KafkaCluster(
        tmp_path / "cluster", 3, props, node_props=per_node, java_build=java_build, extra_env=s3_server.env()
    )
    cluster.start()
    producer = None
    try:
        print(f"cluster up after {time.monotonic() - started:.0f}s", file=sys.stderr)
        topic_configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(1024 * 1024),  # Kafka 4 refuses less than 1 MiB (KIP-1030)
            "segment.ms": "15000",  # lets the tail records below roll the last full segment
            "local.retention.ms": "1000",
            "retention.ms": "-1",
            "min.insync.replicas": "2",
        }
        cluster.create_topic(TOPIC, PARTITIONS, topic_configs)

        producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,
            linger_ms=20,
            batch_size=64 * 1024,
            request_timeout_ms=10_000,
            delivery_timeout_ms=120_000,
            retry_backoff_ms=200,
        )
        sends = Sends()
        killed: dict[str, object] = {}

        def killer() -> None:
            # partition 0 has segments in the store and its leader's bridge has a request in flight
            try:
                wait_until(
                    "first tiered segments of partition 0",
                    lambda: tiered_end(s3, bucket)[0] >= 0,
                    180,
                    0.5,
                )
                leader = cluster.leader(TOPIC, 0)
                probe = BridgeClient(short_dir / f"b{leader}.sock", pool_size=1)
                deadline = time.monotonic() + 30
                health = probe.health()
                while health["in_flight"] < 2 and time.monotonic() < deadline:  # the probe is one
                    time.sleep(0.005)
                    health = probe.health()
                killed.update(
                    node=leader,
                    bridge_pid=health["pid"],
                    in_flight=health["in_flight"] - 1,
                    acked_before=len(sends.acked),
                    tiered_before=tiered_end(s3, bucket),
                )
                cluster.kill(leader)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                killed["error"] = repr(exc)

        k = threading.Thread(target=killer, daemon=True)
        k.start()
        for n in range(RECORDS):
            sends.send(producer, f"k-{n}".encode(), n % PARTITIONS)
            if n % 2000 == 1999:
                time.sleep(0.2)  # spread the writes so the kill lands mid-production
        producer.flush(timeout=180)
        k.join(120)
        assert "node" in killed and "error" not in killed, f"the leader was not killed: {killed}"
        victim = int(killed["node"])  # type: ignore[arg-type]
        new_leader = cluster.wait_for_leader(TOPIC, 0, not_on=victim)
        print(f"killed node {victim} ({killed}); partition 0 now led by {new_leader}", file=sys.stderr)
        main_acked = dict(sends.acked)
        last_main = {
            p: max((o for q, o in main_acked.values() if q == p), default=-1) for p in range(PARTITIONS)
        }

        cluster.restart(victim)
        cluster.wait_for_brokers(3)

        # tiering continues: every partition tiered past the records sent, old local segments deleted
        tail = iter(range(10**9))

        def done() -> bool:
            for p in range(PARTITIONS):  # a record per partition rolls a segment older than segment.ms
                sends.send(producer, f"tail-{next(tail)}".encode(), p)
            producer.flush(timeout=60)
            ends = tiered_end(s3, bucket)
            if any(ends[p] < last_main[p] for p in range(PARTITIONS)):
                return False
            leaders = cluster.describe(TOPIC)
            for p in range(PARTITIONS):
                start = local_start(cluster.node(int(leaders[p]["leader_id"])), p)
                if start is None or start == 0:
                    return False
            return True

        wait_until("every partition tiered past the records sent and trimmed", done, 150, 3)
        producer.close(timeout=30)
        producer = None
        ends = tiered_end(s3, bucket)
        assert not sends.failed or set(sends.failed) <= sends.sent
        acked = dict(sends.acked)
        assert len(main_acked) >= RECORDS - len(sends.failed)

        # a consumer from offset 0 (old segments come from the store through a bridge)
        consumer = KafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=1024 * 1024,
            request_timeout_ms=30_000,
        )
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end_offsets = consumer.end_offsets(tps)
        rows: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < end_offsets[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=2000, max_records=5000).values():
                rows.extend((r.partition, r.offset, r.key, r.value) for r in records)
        consumer.close()
        keys = Counter(r[2] for r in rows)
        assert not [k for k, c in keys.items() if c > 1], "a key was read twice"
        assert set(keys) <= sends.sent, "a record nobody sent"
        assert all(v == value_of(k) for _, _, k, v in rows), "a value differs"
        at = {r[2]: (r[0], r[1]) for r in rows}
        missing = [k for k in acked if k not in at]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        moved = [k for k, pos in acked.items() if at[k] != pos]
        assert not moved, f"{len(moved)} records not at their acknowledged offset, e.g. {moved[:5]}"

        # the Spark source reads the bucket: the same rows for the tiered range
        import spark_reader

        spark_reader.register(spark)
        reader = spark.read.format("kafka-tiered")
        for key, value in {**store_configs, "subscribe": TOPIC}.items():
            reader = reader.option(key, value)
        spark_rows = [
            (r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
            for r in reader.load().select("partition", "offset", "key", "value").collect()
        ]
        positions = Counter((p, o) for p, o, _, _ in spark_rows)
        assert not [pos for pos, c in positions.items() if c > 1], "the Spark source gave an offset twice"
        # tiering goes on while Spark reads: its range is what it read, at least what was tiered before
        spark_end = {p: max((o for q, o in positions if q == p), default=-1) for p in range(PARTITIONS)}
        assert all(spark_end[p] >= ends[p] for p in range(PARTITIONS)), (spark_end, ends)
        in_range = {r for r in rows if r[1] <= spark_end[r[0]]}
        assert set(spark_rows) == in_range, (
            f"Spark rows differ from the consumer's in the tiered range {spark_end}: "
            f"{len(set(spark_rows) - in_range)} extra, {len(in_range - set(spark_rows))} missing"
        )
        print(
            f"cluster kill: {len(acked)} acknowledged ({len(main_acked)} before the tail), "
            f"{len(sends.sent) - len(acked)} unacknowledged, {len(rows)} consumed, "
            f"{len(spark_rows)} Spark rows up to {spark_end}; {len(manifests(s3, bucket))} manifests; "
            f"{time.monotonic() - started:.0f}s",
            file=sys.stderr,
        )
    finally:
        if producer is not None:
            producer.close(timeout=5)
        cluster.stop()
        for node_id in cluster.node_ids:
            log = short_dir / f"bridge-{node_id}.log"
            if log.exists():
                tail_lines = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                print(f"--- bridge {node_id} log tail ---\n{tail_lines}", file=sys.stderr)
