"""The hybrid read's pieces that need no broker: options, client settings, partitions, errors.

The end-to-end behaviour against a real broker and Spark's own Kafka source is tests/spark/test_kafka_hybrid.py
(store and brokers) and tests/spark/test_kafka_broker_tail.py (the brokers alone); the tail's decoding and
counting without a broker, tests/spark/test_tail.py.
"""

from __future__ import annotations

import dataclasses
import pickle
import time

import pytest

from spark_reader.broker import BrokerError, BrokerView
from spark_reader.brokerwire import WireSettings
from spark_reader.filters import PushedFilters
from spark_reader.hybrid import tail_settings
from spark_reader.options import OptionError, parse_options
from spark_reader.tail import BrokerTailPartition

STORE = {"storage.backend": "file", "storage.file.root": "/nonexistent"}
SECRET = "s3cr3t-pw"


def _opts(**kafka: str):  # noqa: ANN202
    return parse_options({**STORE, "subscribe": "t", **{f"kafka.{k}": v for k, v in kafka.items()}})


def test_without_bootstrap_servers_kafka_options_are_ignored_as_before() -> None:
    opts = _opts(**{"auto.offset.reset": "earliest", "sasl.jaas.config": "x"})
    assert opts.bootstrap_servers is None and opts.kafka_params == {}


def test_kafka_options_reach_the_driver_and_the_tasks_as_one_translation() -> None:
    """The Java client's names, as Spark's Kafka source takes them, translated once (`WireSettings`): the
    tasks' client is the driver's but for how long it waits (kafkaConsumer.pollTimeoutMs, not
    default.api.timeout.ms). A Java consumer's tuning without meaning here is ignored by name."""
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="app" password="{SECRET}";'
    opts = _opts(**{
        "bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas, "ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "", "max.poll.records": "500", "fetch.max.bytes": "1000000",
        "no.such.setting": "1", "default.api.timeout.ms": "7000",
    })  # fmt: skip
    wire = tail_settings(opts).wire
    assert (wire.bootstrap_servers, wire.security_protocol.value, wire.sasl_mechanism.value) == (
        "b1:9092,b2:9092", "SASL_SSL", "PLAIN",
    )  # fmt: skip
    assert (wire.sasl_username, wire.sasl_password, wire.fetch_max_bytes) == ("app", SECRET, 1_000_000)
    assert wire.tls is not None and wire.tls.cafile == "/etc/ca.pem" and not wire.tls.check_hostname
    assert wire.default_api_timeout_ms == 120_000  # kafkaConsumer.pollTimeoutMs' default, as Spark's
    driver = WireSettings.from_kafka_params(opts.kafka_params)  # what BrokerView uses
    assert driver == dataclasses.replace(wire, default_api_timeout_ms=7000)
    assert SECRET not in repr(opts) and SECRET not in repr(wire)


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        (
            {"auto.offset.reset": "earliest"},
            "kafka.auto.offset.reset is not supported: set the source option",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/etc/ts.jks"},
            "reads PEM stores, not JKS",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;",
            },
            "Krb5LoginModule",
        ),
        # librdkafka's names, which the tail's client took before: the options are the Java client's
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "app", "sasl.password": SECRET},
            "kafka.sasl.password is not supported",
        ),
    ],
)
def test_settings_the_client_cannot_honour_are_refused_in_one_line_before_any_task(
    kafka: dict, message: str
) -> None:
    from spark_reader.hybrid import plan_batch
    from spark_reader.offsets import ending_spec, starting_spec
    from spark_reader.planning import Planner

    opts = _opts(**{"bootstrap.servers": "b:9092", **kafka})
    with pytest.raises(OptionError, match=message) as err:
        tail_settings(opts)
    assert "\n" not in str(err.value) and SECRET not in str(err.value)
    with pytest.raises(OptionError, match=message):  # the driver's planning, before any connection
        plan_batch(Planner(opts), PushedFilters(), starting_spec(opts, False), ending_spec(opts))


def test_a_tail_partition_pickles_and_shows_no_secret() -> None:
    jaas = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{SECRET}";'
    )
    opts = _opts(**{
        "bootstrap.servers": "b:9092", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": jaas, "isolation.level": "read_committed",
    })  # fmt: skip
    part = BrokerTailPartition("t", 3, 100, 250, tail_settings(opts), PushedFilters())
    assert repr(part) == "BrokerTailPartition(t-3 offsets 100..249 from b:9092)"
    assert SECRET not in repr(part) and SECRET not in repr(part.settings)
    back = pickle.loads(pickle.dumps(part))
    assert (back.topic, back.partition, back.start, back.end) == ("t", 3, 100, 250)
    assert back.settings.read_committed and back.settings.wire.sasl_password == SECRET


def test_unreachable_bootstrap_servers_are_named_in_one_line() -> None:
    from harness.ports import free_ports

    (port,) = free_ports(1)
    servers = f"127.0.0.1:{port}"
    view = BrokerView(_opts(**{"bootstrap.servers": servers, "default.api.timeout.ms": "1500"}))
    started = time.monotonic()
    with pytest.raises(BrokerError) as err:
        view.topics()
    view.close()
    message = str(err.value)
    assert message.startswith(
        f"cannot reach the Kafka brokers {servers} (kafka.bootstrap.servers) within 1.5 s"
    )
    assert "\n" not in message and time.monotonic() - started < 30


def test_a_partition_the_store_lacks_is_one_tail_or_several_of_max_records_per_partition() -> None:
    from spark_reader.hybrid import Split, split_range
    from spark_reader.offsets import Kind, Position
    from spark_reader.planning import Planner

    for extra, want in (
        ({}, [(100, 350)]),
        ({"maxRecordsPerPartition": "100"}, [(100, 200), (200, 300), (300, 350)]),
    ):
        opts = parse_options({**STORE, "subscribe": "t", "kafka.bootstrap.servers": "b:9092", **extra})
        pr, tails = split_range(
            Planner(opts), Split(("t", 0), None, True), Position(Kind.OFFSET, 100), 100, 350, None,
            tail_settings(opts), PushedFilters(),
        )  # fmt: skip
        assert pr is None and [(t.start, t.end) for t in tails] == want
