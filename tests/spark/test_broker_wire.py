"""The brokers' fetch layer (`spark_reader.brokerwire`) against a real Kafka 4.4 broker.

One broker for the module: a PLAINTEXT listener, a SASL_PLAINTEXT one (PLAIN, and SCRAM-SHA-512 with a
user added through AlterUserScramCredentials once the broker is up), an SSL one requiring a client
certificate (a CA, server and client certificates made here as PEM files), and quota windows of 2 x 1 s
so a client quota throttles within a second. Every expectation comes from a client that does not share this
layer's code: kafka-python's consumer (its own record parser) or confluent-kafka's (librdkafka, C).

- codecs: topics written by kafka-python in every codec (and one with LogAppendTime) read raw and decoded
  by segment_format's columnar decoder give exactly the consumer's records, every column, for the whole
  log and for an unaligned range read with responses so small they cut batches; ListOffsets earliest,
  latest and by timestamp agree with the consumer's;
- transactions: committed, aborted (other producers' records inside one; two by one producer) and
  still-open ones: read_committed gives what librdkafka's read_committed consumer gives, also from inside
  an aborted transaction and with responses so small the transaction spans several, and stops at the last
  stable offset; read_uncommitted gives everything but the markers;
- data loss: after DeleteRecords, a read from before the new log start raises OffsetOutOfRangeError
  carrying the log's bounds (and so does a read past the end);
- SASL: SCRAM-SHA-512 and PLAIN read the same records; a wrong password fails at once as an
  authentication error (not a timeout), and no password reaches a log line at DEBUG or a message;
- TLS: PEM truststore and keystore (a client certificate) read the same records; a CA that did not sign
  the broker's certificate fails at once;
- leaders: a cached leader epoch the broker does not know yet (UNKNOWN_LEADER_EPOCH) makes the client ask
  Metadata again and carry on;
- quotas: a throttled client waits out the broker's throttle time and reads everything, no retry;
- options: the Java client settings translate, and what cannot be honoured is refused in one line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from harness.kafka import KafkaBroker
from harness.ports import free_ports

from spark_reader.broker import BrokerError
from spark_reader.brokerwire import (
    BrokerWire,
    OffsetOutOfRangeError,
    WireSettings,
    decode_chunks,
    read_arrow,
    read_range,
)
from spark_reader.offsets import EARLIEST, LATEST
from spark_reader.options import IsolationLevel, OptionError

RECORDS = 2000
BASE_TS = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SCRAM_USER, SCRAM_PASSWORD = "wire-reader", "scram-Secret-9f2c"
PLAIN_USER, PLAIN_PASSWORD = "app", "plain-Secret-77ab"
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="%s";'
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";'
COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED

kafka = pytest.mark.kafka


def _certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, each key and chain in one PEM
    file (Java's PEM keystore layout); and a second CA that signed neither."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def issue(cn: str, key: Any, issuer: tuple[x509.Name, Any] | None, ca: bool) -> x509.Certificate:  # noqa: ANN401
        issuer_name, issuer_key = issuer or (name(cn), key)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            import ipaddress

            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def pem_key(key: Any) -> bytes:  # noqa: ANN401
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    out: dict[str, Path] = {}
    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = issue("wire-test-ca", ca_key, None, True)
    for label, cert in (("ca", ca), ("other-ca", issue("other-ca", other_key, None, True))):
        out[label] = directory / f"{label}.pem"
        out[label].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for label in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = issue(f"wire-{label}", key, (ca.subject, ca_key), False)
        out[label] = directory / f"{label}.pem"
        out[label].write_bytes(pem_key(key) + cert.public_bytes(serialization.Encoding.PEM))
    return out


@pytest.fixture(scope="module")
def broker(java_build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:  # noqa: ANN001
    b = KafkaBroker(tmp_path_factory.mktemp("wire-broker"), java_build=java_build)
    b.port, b.controller_port, sasl_port, ssl_port = free_ports(4)
    b.sasl_bootstrap = f"127.0.0.1:{sasl_port}"  # type: ignore[attr-defined]
    b.ssl_bootstrap = f"127.0.0.1:{ssl_port}"  # type: ignore[attr-defined]
    b.certificates = certs = _certificates(tmp_path_factory.mktemp("wire-certs"))  # type: ignore[attr-defined]
    b.extra_props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"SSL://127.0.0.1:{ssl_port},CONTROLLER://127.0.0.1:{b.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"SSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(certs["server"]),
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(certs["ca"]),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS.rstrip(";") % ("admin", "admin-pw")
        + f' user_admin="admin-pw" user_{PLAIN_USER}="{PLAIN_PASSWORD}";',
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
    }
    b.start()
    try:
        from kafka.admin._users import UserScramCredentialUpsertion

        admin = b.admin_client()
        try:
            result = admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(SCRAM_USER, "SCRAM-SHA-512", SCRAM_PASSWORD)]
            )
            assert result == {SCRAM_USER: None}
        finally:
            admin.close()
        yield b
    finally:
        b.stop()


def _client(b: KafkaBroker, **params: str) -> BrokerWire:
    return BrokerWire.from_kafka_params({"bootstrap.servers": b.bootstrap_servers, **params})


# -- the records as an independent consumer sees them ------------------------------------------------------
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _wire_rows(batches: Iterator[pa.RecordBatch]) -> list[Row]:
    out: list[Row] = []
    for batch in batches:
        cols = [
            batch.column(n).to_pylist() for n in ("offset", "timestamp", "timestamp_type", "key", "value")
        ]
        headers = batch.column("headers").to_pylist()
        for (offset, ts, kind, key, value), hs in zip(zip(*cols, strict=True), headers, strict=True):
            out.append((offset, ts, kind, key, value, tuple((h["key"], h["value"]) for h in hs)))
    return out


def _kafka_python_rows(b: KafkaBroker, topic: str, start: int, end: int) -> list[Row]:
    """kafka-python's consumer (its own record parser): offsets [start, end) of partition 0."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        out: list[Row] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python consumer stuck at {consumer.position(tp)}"
            for r in consumer.poll(timeout_ms=500).get(tp, []):
                if r.offset < end:
                    headers = tuple((k, v) for k, v in (r.headers or ()))
                    out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value, headers))
        return out
    finally:
        consumer.close()


def _confluent_rows(b: KafkaBroker, topic: str, isolation: IsolationLevel) -> list[Row]:
    """librdkafka's consumer at `isolation`: partition 0 from its start to its end (EOF: the LSO under
    read_committed)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap_servers,
            "group.id": "wire-oracle",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation.value,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[Row] = []
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "librdkafka consumer saw no end of partition"
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                return out
            kind, ts = m.timestamp()
            headers = tuple(m.headers() or ())
            out.append((m.offset(), ts, {1: 0, 2: 1}[kind], m.key(), m.value(), headers))
    finally:
        consumer.close()


# -- topics in every codec ----------------------------------------------------------------------------------
def _produce(b: KafkaBroker, topic: str, codec: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=b.bootstrap_servers,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        batch_size=4096,  # many small batches: a response holds several, the last one cut
    )
    try:
        for n in range(RECORDS):
            key = None if n % 7 == 0 and n % 11 else f"key-{n}".encode()  # never both null
            value = None if n % 11 == 0 else (f"{codec}:{n}:" * (n % 40 + 1)).encode() + os.urandom(n % 50)
            headers = [] if n % 3 else [("n", str(n).encode()), ("empty", b"")]
            producer.send(
                topic, key=key, value=value, headers=headers, partition=0, timestamp_ms=BASE_TS + 10 * n
            )
            if n % 500 == 499:
                producer.flush()
        producer.flush()
    finally:
        producer.close()


@pytest.fixture(scope="module")
def codec_topics(broker: KafkaBroker) -> dict[str, str]:
    topics = {codec: f"wire-{codec}" for codec in CODECS}
    topics["logappend"] = "wire-logappend"
    for codec, topic in topics.items():
        configs = {"message.timestamp.type": "LogAppendTime"} if codec == "logappend" else {}
        broker.create_topic(topic, configs=configs)
        _produce(broker, topic, "lz4" if codec == "logappend" else codec)
    return topics


@kafka
@pytest.mark.parametrize("codec", [*CODECS, "logappend"])
def test_raw_read_decodes_to_the_consumers_records(broker: KafkaBroker, codec_topics, codec: str) -> None:  # noqa: ANN001
    topic = codec_topics[codec]
    whole = _kafka_python_rows(broker, topic, 0, RECORDS)
    assert len(whole) == RECORDS
    with _client(broker) as client:
        assert client.versions()["Fetch"] == 12
        assert _wire_rows(read_arrow(client, topic, 0, 0, RECORDS)) == whole
        assert client.list_offsets(topic, {0: EARLIEST}) == {0: 0}
        assert client.list_offsets(topic, {0: LATEST}) == {0: RECORDS}
        stamp = whole[1234][1]  # CreateTime as produced, or the broker's LogAppendTime
        first_at = next(r[0] for r in whole if r[1] >= stamp)
        assert client.list_offsets(topic, {0: stamp}) == {0: first_at}
        assert client.list_offsets(topic, {0: whole[-1][1] + 1}) == {0: None}
    # responses of at most 5000 bytes: nearly every one ends in a cut batch, fetched again whole next time
    start, end = 333, 1555
    with _client(broker, **{"max.partition.fetch.bytes": "5000"}) as client:
        assert _wire_rows(read_arrow(client, topic, 0, start, end)) == _kafka_python_rows(
            broker, topic, start, end
        )
        assert client.stats.trimmed_bytes > 0
        assert client.stats.fetches > 3
        assert client.stats.retries == 0


# -- transactions -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def txn_topic(broker: KafkaBroker) -> Iterator[str]:
    """Committed, aborted and still-open transactions, with a plain producer writing in between."""
    from confluent_kafka import Producer

    topic = "wire-txn"
    broker.create_topic(topic)
    conf = {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 2}
    plain = Producer(conf)
    txn = Producer({**conf, "transactional.id": "wire-txn"})
    still_open = Producer({**conf, "transactional.id": "wire-open"})
    txn.init_transactions(30)
    still_open.init_transactions(30)

    def send(p: Any, tag: str, count: int) -> None:  # noqa: ANN401
        for i in range(count):
            p.produce(topic, key=f"{tag}-{i}".encode(), value=(tag * 20).encode(), partition=0,
                      headers=[("tag", tag.encode()), ("null", None)])  # fmt: skip
        p.flush(30)

    send(plain, "plain-a", 50)
    txn.begin_transaction()
    send(txn, "committed-1", 300)
    send(plain, "plain-b", 50)
    txn.commit_transaction(30)
    txn.begin_transaction()
    send(txn, "aborted-1", 300)
    send(plain, "plain-c", 50)  # other records inside the aborted transaction's span: kept
    send(txn, "aborted-2", 300)
    txn.abort_transaction(30)
    txn.begin_transaction()
    send(txn, "committed-2", 200)
    txn.commit_transaction(30)
    txn.begin_transaction()  # the same producer's second aborted transaction
    send(txn, "aborted-3", 100)
    txn.abort_transaction(30)
    send(plain, "plain-d", 50)
    still_open.begin_transaction()
    send(still_open, "open", 100)
    send(plain, "plain-e", 50)  # past the last stable offset: not readable under read_committed yet
    try:
        yield topic
    finally:
        still_open.abort_transaction(30)


@kafka
def test_read_committed_is_what_a_read_committed_consumer_reads(broker: KafkaBroker, txn_topic: str) -> None:
    committed = _confluent_rows(broker, txn_topic, COMMITTED)
    everything = _confluent_rows(broker, txn_topic, UNCOMMITTED)
    tags = {r[3].split(b"-")[0] for r in committed}
    assert tags == {b"plain", b"committed"}  # the oracle itself: no aborted or open transaction's record
    assert len(everything) == len(committed) + 700 + 100 + 50
    with _client(broker) as client:
        hw = client.list_offsets(txn_topic, {0: LATEST})[0]
        lso = client.list_offsets(txn_topic, {0: LATEST}, COMMITTED)[0]
        assert lso is not None and hw is not None and lso < hw
        assert _wire_rows(read_arrow(client, txn_topic, 0, 0, hw, COMMITTED)) == committed
        assert _wire_rows(read_arrow(client, txn_topic, 0, 0, hw, UNCOMMITTED)) == everything
        chunks = list(read_range(client, txn_topic, 0, 0, hw, COMMITTED))
        assert chunks[-1].next_offset == lso  # the read stopped at the last stable offset
        assert all(c.last_stable_offset == lso for c in chunks)
        assert any(c.aborted for c in chunks)
    # responses of 4 KiB: the aborted transaction spans many, each with its own aborted list
    with _client(broker, **{"max.partition.fetch.bytes": "4096"}) as client:
        chunks = list(read_range(client, txn_topic, 0, 0, hw, COMMITTED))
        assert _wire_rows(decode_chunks(chunks, COMMITTED)) == committed
        assert sum(1 for c in chunks if c.aborted) >= 2 and client.stats.trimmed_bytes > 0
        # a range starting inside the aborted transaction: its list still names it
        inside = next(r[0] for r in everything if r[3] == b"aborted-2-10")
        expected = [r for r in committed if r[0] >= inside]
        assert _wire_rows(read_arrow(client, txn_topic, 0, inside, hw, COMMITTED)) == expected


# -- data loss ----------------------------------------------------------------------------------------------
@kafka
def test_offset_out_of_range_after_delete_records(broker: KafkaBroker) -> None:
    from kafka import KafkaProducer, TopicPartition

    topic = "wire-retention"
    broker.create_topic(topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    for n in range(100):
        producer.send(topic, value=f"v{n}".encode(), partition=0)
    producer.close()
    admin = broker.admin_client()
    try:
        admin.delete_records({TopicPartition(topic, 0): 60})
    finally:
        admin.close()
    with _client(broker) as client:
        with pytest.raises(OffsetOutOfRangeError) as lost:
            list(read_range(client, topic, 0, 10, 100))
        assert (lost.value.offset, lost.value.log_start_offset, lost.value.log_end_offset) == (10, 60, 100)
        assert f"{topic}-0: offset 10 is out of range" in str(lost.value)
        with pytest.raises(OffsetOutOfRangeError) as ahead:
            list(read_range(client, topic, 0, 150, 200))
        assert (ahead.value.log_start_offset, ahead.value.log_end_offset) == (60, 100)
        assert _wire_rows(read_arrow(client, topic, 0, 60, 100)) == _kafka_python_rows(broker, topic, 60, 100)


# -- SASL ---------------------------------------------------------------------------------------------------
@kafka
def test_sasl_reads_and_a_wrong_password_fails_at_once(
    broker: KafkaBroker,
    codec_topics,
    caplog: pytest.LogCaptureFixture,  # noqa: ANN001
) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka")
    caplog.set_level(logging.DEBUG, logger="spark_reader")
    topic = codec_topics["zstd"]
    expected = _kafka_python_rows(broker, topic, 0, RECORDS)
    sasl = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT"}  # type: ignore[attr-defined]
    logins = {
        "SCRAM-SHA-512": SCRAM_JAAS % (SCRAM_USER, SCRAM_PASSWORD),
        "PLAIN": PLAIN_JAAS % (PLAIN_USER, PLAIN_PASSWORD),
    }
    for mechanism, jaas in logins.items():
        params = {**sasl, "sasl.mechanism": mechanism, "sasl.jaas.config": jaas}
        with BrokerWire.from_kafka_params(params) as client:
            assert _wire_rows(read_arrow(client, topic, 0, 0, RECORDS)) == expected
        wrong = {
            **params,
            "sasl.jaas.config": jaas.replace('password="', 'password="not-'),
            "default.api.timeout.ms": "30000",
        }
        with BrokerWire.from_kafka_params(wrong) as client, pytest.raises(BrokerError) as refused:
            list(read_range(client, topic, 0, 0, RECORDS))
        # an authentication error straight away, not a WireTimeoutError after 30 s of retries
        assert type(refused.value) is BrokerError
        assert f"authentication to the Kafka brokers {sasl['bootstrap.servers']} failed" in str(refused.value)
        assert "not-" not in str(refused.value)
    assert any(r.name == "kafka.net.connection" and r.levelno == logging.DEBUG for r in caplog.records)
    for secret in (SCRAM_PASSWORD, PLAIN_PASSWORD):
        assert secret not in caplog.text


# -- TLS ---------------------------------------------------------------------------------------------------
@kafka
def test_tls_with_pem_stores_reads_and_an_untrusted_broker_fails_at_once(
    broker: KafkaBroker, codec_topics
) -> None:  # noqa: ANN001
    topic, certs = codec_topics["snappy"], broker.certificates  # type: ignore[attr-defined]
    tls = {
        "bootstrap.servers": broker.ssl_bootstrap,  # type: ignore[attr-defined]
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs["ca"]),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["client"]),
    }
    with BrokerWire.from_kafka_params(tls) as client:
        assert _wire_rows(read_arrow(client, topic, 0, 0, RECORDS)) == _kafka_python_rows(
            broker, topic, 0, RECORDS
        )
    untrusted = {**tls, "ssl.truststore.location": str(certs["other-ca"]), "default.api.timeout.ms": "30000"}
    with BrokerWire.from_kafka_params(untrusted) as client, pytest.raises(BrokerError) as refused:
        list(read_range(client, topic, 0, 0, RECORDS))
    assert type(refused.value) is BrokerError  # at once, not a WireTimeoutError after 30 s of retries
    assert "TLS with the Kafka brokers" in str(refused.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)


# -- leaders ------------------------------------------------------------------------------------------------
@kafka
def test_an_unknown_leader_epoch_refreshes_metadata(broker: KafkaBroker, codec_topics) -> None:  # noqa: ANN001
    import dataclasses

    topic = codec_topics["gzip"]
    with _client(broker) as client:
        leader = client.leaders(topic)[0]
        # a leader epoch from the future, as after a leader change this broker has not heard of yet: the
        # broker answers UNKNOWN_LEADER_EPOCH and the client must ask Metadata again (fault injection into
        # the client's cache; the broker's answers are real)
        client._leaders[topic] = {0: dataclasses.replace(leader, leader_epoch=leader.leader_epoch + 5)}
        assert len(_wire_rows(read_arrow(client, topic, 0, 0, RECORDS))) == RECORDS
        assert client.stats.retries == 1
        assert client.stats.metadata_refreshes == 2


# -- the connection pool ----------------------------------------------------------------------------------
@kafka
def test_a_clean_client_leaves_its_connection_to_the_next_and_a_failed_one_closes_it(
    broker: KafkaBroker,
    codec_topics,  # noqa: ANN001
) -> None:
    """As Spark's Kafka source pools its consumers: the next client for the same brokers and settings takes
    the connection (no new TCP connection, ApiVersions or bootstrap), other settings get their own, and a
    client that ended in an error leaves nothing in doubt to the next (spark_reader/brokerwire/pool.py)."""
    from spark_reader.brokerwire.pool import POOL

    topic = codec_topics["lz4"]
    POOL.close()  # start from an empty pool
    with _client(broker) as first:
        assert first.list_offsets(topic, {0: LATEST}) == {0: RECORDS}
    with _client(broker) as second:
        assert second._conn is first._conn
        assert _wire_rows(read_arrow(second, topic, 0, 0, 100)) == _kafka_python_rows(broker, topic, 0, 100)
    with _client(broker, **{"client.id": "another-reader"}) as other:
        assert other._conn is not second._conn
        assert other.list_offsets(topic, {0: EARLIEST}) == {0: 0}
    failing = _client(broker)
    assert failing._conn is second._conn
    with pytest.raises(RuntimeError), failing:
        raise RuntimeError("a task failed while reading")
    with _client(broker) as after:
        assert after._conn is not failing._conn
        assert after.list_offsets(topic, {0: LATEST}) == {0: RECORDS}


# -- quotas -------------------------------------------------------------------------------------------------
@kafka
def test_a_throttled_client_waits_and_reads_everything(broker: KafkaBroker) -> None:
    from kafka import KafkaProducer
    from kafka.net.compat import KafkaNetClient
    from kafka.protocol.admin import AlterClientQuotasRequest as Quotas

    topic, client_id, count = "wire-throttled", "wire-throttled-reader", 1500
    broker.create_topic(topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=5)
    for _ in range(count):
        producer.send(topic, value=os.urandom(1000), partition=0)
    producer.close()
    quota = Quotas.EntryData(
        entity=[Quotas.EntryData.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[Quotas.EntryData.OpData(key="consumer_byte_rate", value=float(1 << 20), remove=False)],
    )
    net = KafkaNetClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        net.check_version()
        answer = net.send_and_receive(net.least_loaded_node(), Quotas(entries=[quota], validate_only=False))
        assert answer.entries[0].error_code == 0
    finally:
        net.close()
    throttled = 0
    for _ in range(3):  # the quota reaches the broker's quota manager a moment after it is accepted
        with _client(
            broker, **{"client.id": client_id, "max.partition.fetch.bytes": str(256 << 10)}
        ) as client:
            offsets = [
                o for b in read_arrow(client, topic, 0, 0, count) for o in b.column("offset").to_pylist()
            ]
            assert offsets == list(range(count))
            assert client.stats.retries == 0
            throttled = client.stats.throttle_ms
        if throttled:
            break
    assert throttled > 0


# -- options ------------------------------------------------------------------------------------------------
def test_kafka_options_translate_and_what_cannot_be_honoured_is_refused() -> None:
    secret = "opt-Secret-51e0"
    jaas = SCRAM_JAAS % ("u", secret)
    base = {"bootstrap.servers": "b1:9092,b2:9092"}
    s = WireSettings.from_kafka_params(
        {
            **base,
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": jaas,
            "ssl.truststore.location": "/etc/ca.pem",
            "ssl.truststore.type": "PEM",
            "ssl.endpoint.identification.algorithm": "",
            "max.partition.fetch.bytes": "1048576",
            "fetch.max.bytes": "2097152",
            "request.timeout.ms": "5000",
            "client.id": "reader-7",
            "max.poll.records": "500",  # a Java consumer's tuning: ignored
        }
    )
    assert (s.sasl_mechanism.value, s.sasl_username, s.sasl_password) == ("SCRAM-SHA-256", "u", secret)
    assert s.tls is not None and s.tls.cafile == "/etc/ca.pem" and not s.tls.check_hostname
    assert (s.max_partition_fetch_bytes, s.fetch_max_bytes, s.request_timeout_ms, s.client_id) == (
        1 << 20, 2 << 20, 5000, "reader-7",
    )  # fmt: skip
    assert secret not in repr(s)
    refused = {
        "GSSAPI": {**base, "security.protocol": "SASL_SSL", "sasl.jaas.config": jaas},
        "OAUTHBEARER": {**base, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
        "login module": {
            **base,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": f'com.sun.security.auth.module.Krb5LoginModule required password="{secret}";',
        },
        "is set but kafka.security.protocol is PLAINTEXT": {**base, "sasl.jaas.config": jaas},
        "connect in plaintext": {**base, "ssl.truststore.location": "/etc/ca.pem"},
        "not JKS": {**base, "security.protocol": "SSL", "ssl.truststore.location": "/etc/ts.jks"},
        "not PKCS12": {
            **base,
            "security.protocol": "SSL",
            "ssl.keystore.location": "/etc/ks.p12",
            "ssl.keystore.type": "PKCS12",
        },
        "kafka.ssl.keystore.key is not supported": {
            **base,
            "security.protocol": "SSL",
            "ssl.keystore.key": secret,
        },
        "kafka.sasl.login.callback.handler.class": {**base, "sasl.login.callback.handler.class": "x.Y"},
        "must be one of": {**base, "security.protocol": "SASL"},
        "kafka.auto.offset.reset": {**base, "auto.offset.reset": "earliest"},
        "positive integer": {**base, "max.partition.fetch.bytes": "0"},
        "TLSv1.2 and TLSv1.3": {**base, "security.protocol": "SSL", "ssl.enabled.protocols": "TLSv1.1"},
        "kafka.bootstrap.servers is required": {"security.protocol": "PLAINTEXT"},
    }
    for match, params in refused.items():
        with pytest.raises(OptionError, match=match) as error:
            WireSettings.from_kafka_params(params)
        assert "\n" not in str(error.value) and secret not in str(error.value), match
    # stores are read when the client is made: one that is not PEM is named, its key's password is not
    tls = {**base, "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.keystore.type": "PEM"}
    missing = WireSettings.from_kafka_params({**tls, "ssl.truststore.location": "/nonexistent/ca.pem"})
    with pytest.raises(OptionError, match="kafka.ssl.truststore.location /nonexistent/ca.pem"):
        missing.client_configs()
    not_pem = {**tls, "ssl.keystore.location": __file__, "ssl.key.password": secret}
    with pytest.raises(OptionError, match="kafka.ssl.keystore.location") as error:
        WireSettings.from_kafka_params(not_pem).client_configs()
    assert secret not in str(error.value)
