"""The live tail read from the brokers when something goes wrong, against Spark's own Kafka source.

Each case reads a broker-only topic (nothing tiered: an empty store) with `format("kafka-tiered")` or with
the code a tail task runs (`spark_reader.tail`), and expects every column Spark's `format("kafka")`
(Kafka's Java consumer) gives for the same topic and options:

- a leader killed with kill -9 mid-read, in a 3-node cluster (replication 3, min.insync.replicas 2): the
  read is driven with responses of a few KiB, so it takes many Fetches, and the leader is killed once the
  first of them has been decoded; the read goes on against the new leader (a dropped connection, then
  NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH or a refused connection until the controller moves the
  leadership: Metadata again and retry) and gives exactly the topic's rows, no more, no fewer;
- the log's start deleted (DeleteRecords, what retention does to the log start) between planning and
  reading: failOnDataLoss=true fails in one line naming the partition and the offsets lost, false gives
  the rows that remain, as Spark's source gives them from the same starting offsets;
- SASL_PLAINTEXT with SCRAM-SHA-512 and SCRAM-SHA-256: the `kafka.security.protocol`,
  `kafka.sasl.mechanism` and `kafka.sasl.jaas.config` options exactly as Spark's source takes them give
  its rows; a wrong password fails in one line naming the mechanism and the listener, without the password;
- what the fetch layer cannot do (OAUTHBEARER, GSSAPI, JKS and PKCS12 stores) is refused when the query
  is planned, one line naming the option.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import KafkaBroker
from harness.kafka_cluster import KafkaCluster
from harness.ports import free_ports

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(900)]

COLUMNS = ("partition", "offset", "key", "value", "topic", "unix_millis(timestamp) AS ts", "timestampType",
           "headers")  # fmt: skip
SCRAM_USER, SCRAM_PASSWORD = "tail-reader", "scram-Tail-5e1d"
WRONG_PASSWORD = "not-the-Password-0c3"
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";'
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")

Row = tuple[Any, ...]


# -- rows as comparable tuples -------------------------------------------------------------------------------
def _spark_rows(df: Any) -> list[Row]:  # noqa: ANN401 - a DataFrame
    out = []
    for r in df.selectExpr(*COLUMNS).collect():
        headers = None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"])
        out.append((r[0], r[1], r[2], r[3], r[4], r[5], r[6], headers))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _arrow_rows(batches: list[Any]) -> list[Row]:
    """`spark_reader.tail`'s Arrow batches (the source's schema) as `_spark_rows` gives Spark's rows."""
    out = []
    for batch in batches:
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        stamps = batch.column("timestamp").cast("int64").to_pylist()
        for i in range(batch.num_rows):
            hs = cols["headers"][i]
            headers = None if hs is None else tuple((h["key"], h["value"]) for h in hs)
            out.append((cols["partition"][i], cols["offset"][i], cols["key"][i], cols["value"][i],
                        cols["topic"][i], stamps[i] // 1000, cols["timestampType"][i], headers))  # fmt: skip
    return sorted(out, key=lambda t: (t[0], t[1]))


def _first_difference(got: list[Row], want: list[Row]) -> str:
    for g, w in zip(got, want, strict=False):
        if g != w:
            return f"first difference: {g[:2]} {g[2:4]!r:.120} vs {w[:2]} {w[2:4]!r:.120}"
    return f"{len(got)} vs {len(want)} rows"


def _produce(bootstrap: str, topic: str, count: int, **extra: Any) -> None:  # noqa: ANN401
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 2048,
                         "compression.type": "lz4", "acks": "all", "enable.idempotence": True, **extra})  # fmt: skip
    for n in range(count):
        headers = [("n", str(n).encode()), ("null", None)] if n % 3 == 0 else None
        value = None if n % 17 == 0 else f"{n}|".encode() + bytes(n % 251 for _ in range(40 + n % 90))
        producer.produce(topic, key=f"k-{n % 40}".encode() if n % 5 else None, value=value, headers=headers)
        if n % 500 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def _one_line(message: str, *needles: str) -> str:
    """The line of `message` holding every needle (a Spark error carries a Python traceback around it)."""
    lines = [line for line in message.splitlines() if all(n in line for n in needles)]
    assert lines, f"no line with {needles} in:\n{message[-3000:]}"
    return lines[0]


def _tail_part(options: dict[str, str], topic: str, end: int) -> Any:  # noqa: ANN401
    """The tail task's partition for offsets [0, end) of partition 0, with these source options."""
    from spark_reader.options import parse_options
    from spark_reader.tail import BrokerTailPartition, TailSettings

    opts = parse_options({**options, "subscribe": topic, "includeHeaders": "true"})
    return BrokerTailPartition(topic, 0, 0, end, TailSettings.of(opts))


# -- a leader killed mid-read --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(java_build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:  # noqa: ANN001
    c = KafkaCluster(
        tmp_path_factory.mktemp("tail-cluster"),
        java_build=java_build,
        extra_props={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_a_leader_killed_mid_read_gives_every_row_once(cluster: KafkaCluster, session, store) -> None:  # noqa: ANN001
    from spark_reader.brokerwire import BrokerWire
    from spark_reader.tail import chunk_rows, tail_chunks

    topic, records = "tail-kill", 4000
    cluster.create_topic(topic, 1, {"min.insync.replicas": "2"}, replication_factor=3)
    _produce(cluster.bootstrap_servers, topic, records)
    options = {**store, "kafka.bootstrap.servers": cluster.bootstrap_servers,
               "kafka.max.partition.fetch.bytes": "4096", "kafka.retry.backoff.ms": "200"}  # fmt: skip
    part = _tail_part(options, topic, records)
    leader = cluster.leader(topic, 0)
    batches, killed_after = [], None
    with BrokerWire(part.settings.wire) as client:
        for n, chunk in enumerate(tail_chunks(client, part)):
            batches.extend(chunk_rows(chunk, part))
            if killed_after is None:  # the first response decoded: the leader goes, the read goes on
                cluster.kill(leader)
                killed_after = n, chunk.next_offset
        stats = client.stats
    assert killed_after is not None and killed_after[1] < records // 4, killed_after
    assert stats.fetches > 20 and stats.retries > 0 and stats.metadata_refreshes > 1, stats
    new_leader = cluster.wait_for_leader(topic, 0, not_on=leader)
    got = _arrow_rows(batches)
    want = _spark_rows(
        session.read.format("kafka")
        .options(
            **{
                "kafka.bootstrap.servers": cluster.bootstrap_servers,
                "subscribe": topic,
                "includeHeaders": "true",
            }
        )  # fmt: skip
        .load()
    )
    assert len(want) == records and new_leader != leader
    assert got == want, _first_difference(got, want)


# -- the log's start deleted -----------------------------------------------------------------------------
def _delete_records(broker: KafkaBroker, topic: str, before: int) -> None:
    from kafka import TopicPartition

    admin = broker.admin_client()
    try:
        admin.delete_records({TopicPartition(topic, 0): before})
    finally:
        admin.close()


def test_the_log_start_deleted_between_planning_and_reading(
    kafka_broker: KafkaBroker,
    session,
    store: dict[str, str],  # noqa: ANN001
) -> None:
    from spark_reader.errors import DataLossError
    from spark_reader.tail import read_tail

    topic, records, deleted = f"tail-retention-{uuid.uuid4().hex[:6]}", 1200, 500
    kafka_broker.create_topic(topic, 1)
    _produce(kafka_broker.bootstrap_servers, topic, records)
    base = {**store, "kafka.bootstrap.servers": kafka_broker.bootstrap_servers}
    planned = {
        fail: _tail_part({**base, "failOnDataLoss": fail}, topic, records) for fail in ("true", "false")
    }
    _delete_records(kafka_broker, topic, deleted)  # planned from 0, the brokers now start at 500

    with pytest.raises(DataLossError) as lost:
        list(read_tail(planned["true"]))
    message = str(lost.value)
    assert "\n" not in message
    assert f"{topic}-0: offsets 0..{deleted - 1}" in message and f"log starts at {deleted}" in message
    got_after_planning = _arrow_rows(list(read_tail(planned["false"])))

    starting = {"startingOffsets": f'{{"{topic}": {{"0": 0}}}}', "subscribe": topic, "includeHeaders": "true"}
    theirs: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    for fail in ("true", "false"):
        opts = {"kafka.bootstrap.servers": kafka_broker.bootstrap_servers, **starting, "failOnDataLoss": fail}
        for fmt, extra, into in (("kafka", {}, theirs), ("kafka-tiered", store, ours)):
            try:
                into[fail] = _spark_rows(session.read.format(fmt).options(**opts, **extra).load())
            except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
                into[fail] = exc
    want = theirs["false"]
    assert [r[1] for r in want] == list(range(deleted, records))
    assert got_after_planning == want, _first_difference(got_after_planning, want)
    assert ours["false"] == want, _first_difference(ours["false"], want)
    assert isinstance(theirs["true"], Exception), "Spark's source read lost offsets with failOnDataLoss=true"
    assert isinstance(ours["true"], Exception), "kafka-tiered read lost offsets with failOnDataLoss=true"
    line = _one_line(str(ours["true"]), f"{topic}-0", "failOnDataLoss")
    assert f"0..{deleted - 1}" in line, line


# -- SASL SCRAM --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scram_broker(java_build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:  # noqa: ANN001
    """A broker with a SASL_PLAINTEXT listener (SCRAM-SHA-512 and -256) beside its PLAINTEXT one; the
    user's credentials added through AlterUserScramCredentials once it is up."""
    from kafka.admin._users import UserScramCredentialUpsertion

    b = KafkaBroker(tmp_path_factory.mktemp("scram-broker"), java_build=java_build)
    b.port, b.controller_port, sasl_port = free_ports(3)
    b.sasl_bootstrap = f"127.0.0.1:{sasl_port}"  # type: ignore[attr-defined]
    module = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    b.extra_props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"CONTROLLER://127.0.0.1:{b.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        **{f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config": module for m in MECHANISMS},
    }
    b.start()
    try:
        admin = b.admin_client()
        try:
            for mechanism in MECHANISMS:  # one per request: Kafka refuses a user twice in one
                upsert = UserScramCredentialUpsertion(SCRAM_USER, mechanism, SCRAM_PASSWORD)
                assert admin.alter_user_scram_credentials([upsert]) == {SCRAM_USER: None}
        finally:
            admin.close()
        yield b
    finally:
        b.stop()


def _sasl(b: KafkaBroker, mechanism: str, password: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": b.sasl_bootstrap,  # type: ignore[attr-defined]
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": JAAS % (SCRAM_USER, password),
    }


def test_scram_reads_sparks_rows_and_a_wrong_password_is_one_line(
    scram_broker: KafkaBroker,
    session,
    store: dict[str, str],  # noqa: ANN001
) -> None:
    topic = "tail-scram"
    scram_broker.create_topic(topic, 2)
    _produce(scram_broker.bootstrap_servers, topic, 1500)
    read = {"subscribe": topic, "includeHeaders": "true"}
    for mechanism in MECHANISMS:
        sasl = _sasl(scram_broker, mechanism, SCRAM_PASSWORD)
        want = _spark_rows(session.read.format("kafka").options(**sasl, **read).load())
        got = _spark_rows(session.read.format("kafka-tiered").options(**sasl, **read, **store).load())
        assert len(want) == 1500
        assert got == want, f"{mechanism}: {_first_difference(got, want)}"
    wrong = _sasl(scram_broker, "SCRAM-SHA-512", WRONG_PASSWORD)
    with pytest.raises(Exception) as refused:  # noqa: PT011 - Spark wraps the source's error
        session.read.format("kafka-tiered").options(**wrong, **read, **store).load().collect()
    text = str(refused.value)
    line = _one_line(text, "SCRAM-SHA-512", "SASL_PLAINTEXT", "authentication")
    assert scram_broker.sasl_bootstrap in line, line  # type: ignore[attr-defined]
    assert WRONG_PASSWORD not in text and SCRAM_PASSWORD not in text


# -- what the fetch layer cannot do -------------------------------------------------------------------------
REFUSED = {
    "kafka.sasl.mechanism": {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
                             "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                             "OAuthBearerLoginModule required;"},
    "kafka.sasl.mechanism ": {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI",
                              "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
    "kafka.ssl.truststore.location": {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/x.jks"},
    "kafka.ssl.keystore.location": {"kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "PKCS12",
                                    "kafka.ssl.keystore.location": "/x.p12", "kafka.ssl.keystore.password": "pw-9"},
}  # fmt: skip


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_what_the_fetch_layer_cannot_do_is_refused_at_planning(
    session,
    store: dict[str, str],
    option: str,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    options = {**store, "subscribe": "t", "kafka.bootstrap.servers": "127.0.0.1:9", **REFUSED[option]}
    with pytest.raises(Exception) as refused:  # noqa: PT011 - Spark wraps the source's error
        session.read.format("kafka-tiered").options(**options).load().collect()
    line = _one_line(str(refused.value), f"option {option.strip()}")
    assert "pw-9" not in str(refused.value), line
