"""End to end: a real Kafka 4.4 broker tiering to moto S3 through the JVM plugin and the Python bridge.

One broker (KRaft), our plugin as its RemoteStorageManager, the default topic-based metadata manager,
1 MiB segments and 1 s local retention. Records with five codecs, headers, a committed and an aborted
transaction go to a 3-partition topic; the bridge is killed with SIGKILL while segments are being
tiered. Then: every partition is tiered and trimmed locally, the store holds only encrypted, complete
segments, a read_committed consumer from offset 0 gets exactly the committed records (read back from
S3), ListOffsets by timestamp lands on the right offset through the remote time index, `format
("kafka-tiered")` reading the bucket with the broker's own server.properties gives exactly the rows a
consumer from offset 0 reads (read_committed and read_uncommitted alike), and deleting the topic
deletes its remote objects.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from harness.waiting import wait_until
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture

from rsm.bridge.client import BridgeClient

if TYPE_CHECKING:
    from kafka.consumer.fetcher import ConsumerRecord

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.timeout(900)]

TOPIC = "tiered-e2e"
PARTITIONS = 3
PER_CODEC = 20_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TXN_RECORDS = 500
VALUE_SIZE = 160
T0 = int(time.time() * 1000) - 3_600_000  # record timestamps: an hour ago, one ms apart
SPARK_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def value_of(key: bytes) -> bytes:
    """Incompressible, reproducible value: raw in lz4/snappy/uncompressed batches, so a leak would show."""
    return hashlib.shake_256(key).digest(VALUE_SIZE)


class Store:
    """The topic's objects in moto S3."""

    def __init__(self, s3_server, bucket: str, prefix: str) -> None:
        self.client = s3_server.boto3_client()
        self.bucket = bucket
        self.prefix = prefix

    def objects(self, under: str = "") -> dict[str, int]:
        out: dict[str, int] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + under
        ):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = obj["Size"]
        return out

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def manifests(self) -> list[str]:
        return [k for k in self.objects(f"{TOPIC}-") if k.endswith(".manifest")]

    def unfinished(self) -> list[str]:
        """Temporary objects and incomplete multipart uploads anywhere in the bucket."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        temporary = [o["Key"] for page in pages for o in page.get("Contents", []) if ".tmp-" in o["Key"]]
        uploads = self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        return temporary + [f"incomplete multipart upload of {u['Key']}" for u in uploads]


def local_segments(broker, partition: int) -> list[int]:
    d = broker.partition_dir(TOPIC, partition)
    return sorted(int(p.stem) for p in d.glob("*.log")) if d.exists() else []


def produce(bootstrap: str, expected: dict[bytes, tuple[int, int, int]], stop_early: threading.Event) -> None:
    """Five codecs one after the other, then a committed and an aborted transaction."""
    from kafka import KafkaProducer

    i = 0
    for codec in CODECS:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=None if codec == "none" else codec,
            linger_ms=20,
            batch_size=64 * 1024,
            acks="all",
            max_in_flight_requests_per_connection=5,
        )
        futures = []
        for n in range(PER_CODEC):
            key = f"{codec}-{n}".encode()
            ts = T0 + i
            part = n % PARTITIONS
            headers = [("codec", codec.encode()), ("n", str(n).encode())] if n % 3 else []
            futures.append((key, ts, producer.send(TOPIC, key=key, value=value_of(key), headers=headers,
                                                   partition=part, timestamp_ms=ts)))  # fmt: skip
            i += 1
        producer.flush()
        for key, ts, fut in futures:
            md = fut.get(timeout=60)
            expected[key] = (md.partition, md.offset, ts)
        producer.close()
    tx = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="e2e-tx", compression_type="zstd")
    tx.init_transactions()
    for outcome in ("commit", "abort"):
        tx.begin_transaction()
        futures = []
        for n in range(TXN_RECORDS):
            key = f"tx-{outcome}-{n}".encode()
            futures.append((key, T0 + i, tx.send(TOPIC, key=key, value=value_of(key), partition=n % PARTITIONS,
                                                 timestamp_ms=T0 + i, headers=[("tx", outcome.encode())])))  # fmt: skip
            i += 1
        tx.flush()
        for key, ts, fut in futures:
            md = fut.get(timeout=60)
            if outcome == "commit":
                expected[key] = (md.partition, md.offset, ts)
        if outcome == "commit":
            tx.commit_transaction()
        else:
            tx.abort_transaction()
    tx.close()
    # a tail of plain records so the transaction markers' segments roll and get tiered too
    tail = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=20)
    futures = []
    for n in range(3000):
        key = f"tail-{n}".encode()
        futures.append((key, T0 + i, tail.send(TOPIC, key=key, value=value_of(key), partition=n % PARTITIONS,
                                               timestamp_ms=T0 + i)))  # fmt: skip
        i += 1
    tail.flush()
    for key, ts, fut in futures:
        md = fut.get(timeout=60)
        expected[key] = (md.partition, md.offset, ts)
    tail.close()


def read_from_zero(bootstrap: str, isolation_level: str, timeout: float = 240) -> list[ConsumerRecord]:
    """Everything a consumer with ``isolation_level`` reads from offset 0 to the end it sees at the start
    (the last stable offset under read_committed), in every partition."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1024 * 1024,
    )
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"{isolation_level} consumer stuck at {len(records)} records"
            for batch in consumer.poll(timeout_ms=2000, max_records=5000).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def spark_table(spark, store_options: dict[str, str], isolation_level: str) -> pa.Table:  # noqa: ANN001
    """What format("kafka-tiered") reads of the topic from the bucket alone (no broker), every column,
    the timestamp as Kafka's milliseconds (exact, whatever the driver's time zone), by partition and offset."""
    df = (
        spark.read.format("kafka-tiered")
        .options(**store_options)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", isolation_level)
        .load()
    )
    assert df.columns == SPARK_COLUMNS
    table = df.selectExpr(
        *SPARK_COLUMNS[:5], "unix_millis(timestamp) AS timestamp", *SPARK_COLUMNS[6:]
    ).toArrow()
    return table.sort_by([("partition", "ascending"), ("offset", "ascending")])


def consumer_table(records: list[ConsumerRecord], schema: pa.Schema) -> pa.Table:
    """Consumer records as the rows Spark's Kafka source makes of them: headers null when there are none."""
    rows = [
        {"key": r.key, "value": r.value, "topic": r.topic, "partition": r.partition, "offset": r.offset,
         "timestamp": r.timestamp, "timestampType": r.timestamp_type,
         "headers": [{"key": k, "value": v} for k, v in r.headers] or None}
        for r in sorted(records, key=lambda r: (r.partition, r.offset))
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=schema)


def first_difference(got: pa.Table, want: pa.Table) -> str:
    """One line on where two long tables part (pytest's own diff of 100k rows takes minutes)."""
    if got.schema != want.schema:
        return f"schemas differ: {got.schema} vs {want.schema}"
    for n, (g, w) in enumerate(zip(got.to_pylist(), want.to_pylist(), strict=False)):
        if g != w:
            fields = [k for k in g if g[k] != w[k]]
            return (
                f"row {n} (partition {w['partition']} offset {w['offset']}) differs in {fields}: {g} vs {w}"
            )
    return f"the source has {got.num_rows} rows, the consumer {want.num_rows}"


def test_tiering_through_the_bridge(bridge_plugin_jar, kafka_broker_factory, s3_server, short_dir, spark):  # noqa: F811, ANN001
    from harness.ports import free_ports
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    bucket = s3_server.make_bucket()
    prefix = "tiers/"
    keyring = short_dir / "keyring.json"
    keyring.write_text(json.dumps({"e2e": base64.b64encode(os.urandom(32)).decode()}))
    keyring.chmod(0o600)
    sock = short_dir / "bridge.sock"
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.tieredrsm.bridge.BridgeRemoteStorageManager",
        "remote.log.storage.manager.class.path": str(bridge_plugin_jar),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "1000",
        "remote.log.manager.task.retry.backoff.ms": "500",
        "remote.log.manager.task.retry.backoff.max.ms": "2000",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "1000",
        "log.message.timestamp.before.max.ms": str(2**62),
        "rsm.config.storage.backend": "s3",
        "rsm.config.storage.s3.endpoint.url": s3_server.endpoint_url,
        "rsm.config.storage.s3.region": s3_server.region,
        "rsm.config.bucket": bucket,
        "rsm.config.prefix": prefix,
        "rsm.config.encryption.enabled": "true",
        "rsm.config.encryption.keyring.path": str(keyring),
        "rsm.config.encryption.key.id": "e2e",
        "rsm.config.chunk.size": str(256 * 1024),
        "rsm.config.bridge.socket.path": str(sock),
        "rsm.config.bridge.command": bridge_command(),
        "rsm.config.bridge.log.file": str(short_dir / "bridge.log"),
        "rsm.config.bridge.restart.backoff.ms": "200",
    }
    broker = kafka_broker_factory(extra_props=props, extra_env=s3_server.env(), start=False)
    broker.port, broker.controller_port = free_ports(2)
    broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
    broker.start()
    bootstrap = broker.bootstrap_servers
    store = Store(s3_server, bucket, prefix)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        # Kafka 4.4 still validates topic configs: the seed-004 `unchecked.*` keys are refused, so the
        # bucket, prefix and encryption come from the broker-level rsm.config.* defaults here.
        topic_configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(1024 * 1024),
            "local.retention.ms": "1000",
            "retention.ms": "-1",
        }
        unchecked_ok = True
        try:
            admin.create_topics(
                [NewTopic("probe-unchecked", 1, 1, topic_configs={"unchecked.rsm.bucket": "b"})],
                validate_only=True,
            )
        except KafkaError as exc:
            unchecked_ok = False
            print(f"broker refuses unchecked.* topic configs: {exc!r}", file=sys.stderr)
        print(f"broker accepts unchecked.* topic configs: {unchecked_ok}", file=sys.stderr)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, topic_configs=topic_configs)])

        expected: dict[bytes, tuple[int, int, int]] = {}
        killed: list[int] = []
        in_flight_at_kill: list[int] = []
        stop = threading.Event()

        def killer() -> None:
            # SIGKILL the bridge in the middle of a copy: some segments already tiered, producing still on,
            # and a request other than our own health probe in flight
            try:
                wait_until("first tiered segments", lambda: len(store.manifests()) >= 2, 240, 0.5)
                probe = BridgeClient(sock, pool_size=1)
                deadline = time.monotonic() + 60
                health = probe.health()
                while health["in_flight"] < 2 and time.monotonic() < deadline:
                    time.sleep(0.005)
                    health = probe.health()
                os.kill(health["pid"], signal.SIGKILL)
                killed.append(health["pid"])
                in_flight_at_kill.append(health["in_flight"] - 1)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                killed.append(-1)
                print(f"killer failed: {exc}", file=sys.stderr)

        k = threading.Thread(target=killer, daemon=True)
        k.start()
        produce(bootstrap, expected, stop)
        k.join(300)
        assert killed and killed[0] > 0, "the bridge was not killed mid-tiering"

        # tiering resumes with a fresh bridge: every partition ends with only its active segment locally
        # Kafka 4.4 also rolls an active segment past local.retention.ms so that it gets tiered: wait for
        # that too, so every record is read from S3 below (what stays local is one empty segment)
        def all_tiered() -> bool:
            segments = [local_segments(broker, p) for p in range(PARTITIONS)]
            return all(
                len(s) == 1 and (broker.partition_dir(TOPIC, p) / f"{s[0]:020d}.log").stat().st_size == 0
                for p, s in enumerate(segments)
            )

        wait_until("local segments tiered and deleted", all_tiered, 300, 2)
        health = BridgeClient(sock).health()
        assert health["pid"] != killed[0], "the plugin did not restart the bridge"
        assert health["log_configs_received"] > 0, "the plugin sent no topic configs (Admin describeConfigs)"
        manifests = store.manifests()
        assert len(manifests) >= 3 * PARTITIONS

        # no half-written segment is visible: every manifest has its objects
        objects = store.objects()
        for m in manifests:
            stem = m[: -len(".manifest")]
            assert stem + ".log" in objects and stem + ".indexes" in objects, (
                f"manifest {m} without its objects"
            )
            doc = json.loads(store.read(m))
            assert doc["encryption"] and doc["encryption"]["key_id"] == "e2e", m
        # encrypted: no sample of the raw values (stored raw by Kafka for none/lz4/snappy) is in the store
        total = sum(objects.values())
        assert total > 10 * 1024 * 1024, f"only {total} bytes tiered"
        samples = [
            value_of(f"{c}-{n}".encode())[:48] for c in ("none", "lz4", "snappy") for n in range(0, 900, 90)
        ]
        for key in [k for k in objects if k.endswith(".log")][:12]:
            blob = store.read(key)
            assert not any(s in blob for s in samples), f"plaintext found in {key}"

        # reading from offset 0 goes to S3: local logs start later
        local_start = {p: local_segments(broker, p)[0] for p in range(PARTITIONS)}
        assert all(v > 0 for v in local_start.values()), local_start
        committed = read_from_zero(bootstrap, "read_committed")
        got: Counter[bytes] = Counter()
        bad_values = 0
        headers_seen = 0
        for r in committed:
            got[r.key] += 1
            bad_values += r.value != value_of(r.key)
            want = expected.get(r.key)
            if want is not None:
                assert (r.partition, r.offset, r.timestamp) == want, r.key
            if r.headers:
                headers_seen += 1
                if r.key.startswith(b"tx-"):
                    assert r.headers == [("tx", b"commit")]
                elif not r.key.startswith(b"tail-"):
                    codec, n = r.key.decode().split("-")
                    assert r.headers == [("codec", codec.encode()), ("n", n.encode())]
        assert bad_values == 0
        assert not [k for k, c in got.items() if c > 1], "duplicates"
        assert not [k for k in got if k.startswith(b"tx-abort")], "aborted records delivered"
        missing = set(expected) - set(got)
        assert not missing, f"{len(missing)} committed records missing, e.g. {sorted(missing)[:5]}"
        assert set(got) == set(expected)
        assert headers_seen > 0
        uncommitted = read_from_zero(bootstrap, "read_uncommitted")
        assert len(uncommitted) == len(committed) + TXN_RECORDS
        extra = {r.key for r in uncommitted} - {r.key for r in committed}
        assert len(extra) == TXN_RECORDS and all(k.startswith(b"tx-abort") for k in extra)
        # Kafka's remote reads went through the plugin's shared-memory transport (the default), every byte
        streamed = BridgeClient(sock).health()
        assert streamed["shm_bytes_streamed"] > 0, streamed
        assert streamed["shm_bytes_streamed"] == streamed["bytes_streamed"], streamed
        assert streamed["arena_bytes_streamed"] > 0, streamed  # read in place from the chunk arena
        print(
            f"e2e: {len(expected)} committed records read back, {len(manifests)} segments tiered "
            f"({total} bytes), bridge pid {killed[0]} killed with {in_flight_at_kill} requests in flight, restarted as {health['pid']}, local starts {local_start}",
            file=sys.stderr,
        )

        # ListOffsets by timestamp, inside tiered segments: answered through the remote time index
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer = KafkaConsumer(bootstrap_servers=bootstrap)
        for p in range(PARTITIONS):
            mine = sorted((off, ts) for part, off, ts in expected.values() if part == p)
            target_off, target_ts = mine[len(mine) // 5]
            assert target_off < local_start[p]
            found = consumer.offsets_for_times({tps[p]: target_ts - 0})[tps[p]]
            want = min(off for off, ts in mine if ts >= target_ts)
            assert found is not None and found.offset == want, (p, found, want)
        consumer.close()

        # format("kafka-tiered") reads the bucket with the broker's own server.properties (its rsm.config.*
        # keys; the credentials the broker takes from its environment come as options) and gives exactly
        # the rows a consumer from offset 0 reads, every one of which the broker served from S3
        import spark_reader

        assert all(r.offset < local_start[r.partition] for r in uncommitted)
        spark_reader.register(spark)
        store_options = {
            "rsm.properties": str(broker.config_file),
            "storage.s3.access.key.id": s3_server.access_key,
            "storage.s3.secret.access.key": s3_server.secret_key,
        }
        for isolation, records in (("read_committed", committed), ("read_uncommitted", uncommitted)):
            started = time.monotonic()
            got_table = spark_table(spark, store_options, isolation)
            want_table = consumer_table(records, got_table.schema)
            if not got_table.equals(want_table):
                difference = first_difference(got_table, want_table)
                pytest.fail(f"{isolation}: format kafka-tiered differs from the consumer: {difference}")
            print(
                f"spark {isolation}: {got_table.num_rows} rows equal the consumer's "
                f"({time.monotonic() - started:.1f}s)",
                file=sys.stderr,
            )

        # deleting the topic deletes its remote objects
        admin.delete_topics([TOPIC])
        wait_until("remote objects deleted", lambda: not store.manifests(), 180, 2)
        leftovers = store.objects(f"{TOPIC}-")
        print(f"objects left after topic deletion: {sorted(leftovers)}", file=sys.stderr)
        assert not leftovers
        # nothing a write cut by the kill left behind outlives the topic either
        with contextlib.suppress(AssertionError):  # deletes run asynchronously, leftovers after objects
            wait_until("no temporary object left", lambda: not store.unfinished(), 60, 2)
        assert not store.unfinished(), f"left after the topic was deleted: {store.unfinished()}"
    finally:
        admin.close()
        server_log = broker.logs_dir / "server.log"
        if server_log.exists():
            errors = [
                line for line in server_log.read_text().splitlines() if "RemoteStorageException" in line
            ]
            print(
                f"broker log lines with RemoteStorageException: {len(errors)}",
                *errors[:5],
                sep="\n",
                file=sys.stderr,
            )
        log = short_dir / "bridge.log"
        if log.exists():
            print(
                "--- bridge.log tail ---\n" + "\n".join(log.read_text().splitlines()[-40:]), file=sys.stderr
            )
