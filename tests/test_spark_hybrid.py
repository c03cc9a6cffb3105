"""The hybrid read's pieces that need no broker (issue 22): options, client settings, partitions, errors.

The end-to-end behaviour against a real broker and Spark's own Kafka source is tests/test_kafka_hybrid.py.
"""

from __future__ import annotations

import pickle
import time

import pytest

from spark_reader.broker import BrokerError, BrokerView, client_config, make_client
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


def test_kafka_options_reach_the_client_translated_for_librdkafka() -> None:
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="app" password="{SECRET}";'
    opts = _opts(**{
        "bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas, "ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "", "max.poll.records": "500", "fetch.max.bytes": "1000000",
    })  # fmt: skip
    conf = client_config(opts)
    assert conf == {
        "bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "app", "sasl.password": SECRET, "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none", "fetch.max.bytes": "1000000",
    }  # fmt: skip
    assert SECRET not in repr(opts)


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        (
            {"auto.offset.reset": "earliest"},
            "kafka.auto.offset.reset is not supported: set the source option",
        ),
        ({"ssl.truststore.location": "/etc/ts.jks"}, "reads PEM or PKCS12 stores, not JKS"),
        ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "Krb5LoginModule"),
    ],
)
def test_settings_the_client_cannot_honour_are_refused_in_one_line(kafka: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message) as err:
        client_config(_opts(**{"bootstrap.servers": "b:9092", **kafka}))
    assert "\n" not in str(err.value)


def test_a_setting_librdkafka_does_not_know_is_named() -> None:
    conf = client_config(_opts(**{"bootstrap.servers": "b:9092", "no.such.setting": "1"}))
    with pytest.raises(OptionError, match=r"option kafka\.no\.such\.setting"):
        make_client("consumer", {**conf, "group.id": "g"})


def test_a_tail_partition_pickles_and_shows_no_secret() -> None:
    jaas = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{SECRET}";'
    )
    opts = _opts(
        **{"bootstrap.servers": "b:9092", "sasl.jaas.config": jaas, "isolation.level": "read_committed"}
    )
    part = BrokerTailPartition("t", 3, 100, 250, tail_settings(opts), PushedFilters())
    assert repr(part) == "BrokerTailPartition(t-3 offsets 100..249 from b:9092)"
    assert SECRET not in repr(part) and SECRET not in repr(part.settings)
    back = pickle.loads(pickle.dumps(part))
    assert (back.topic, back.partition, back.start, back.end) == ("t", 3, 100, 250)
    assert back.settings.read_committed and dict(back.settings.client)["sasl.password"] == SECRET


def test_unreachable_bootstrap_servers_are_named_in_one_line() -> None:
    from harness.ports import free_ports

    (port,) = free_ports(1)
    servers = f"127.0.0.1:{port}"
    view = BrokerView(_opts(**{"bootstrap.servers": servers, "default.api.timeout.ms": "1500"}))
    started = time.monotonic()
    with pytest.raises(BrokerError) as err:
        view.topics()
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


class _Message:
    """What the tail reads of a confluent-kafka `Message`, counting the payload reads."""

    reads = 0

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)

    def key(self) -> bytes | None:
        _Message.reads += 1
        return None if self._offset % 3 == 0 else f"k{self._offset}".encode()

    def value(self) -> bytes:
        _Message.reads += 1
        return b"v" * self._offset

    def headers(self) -> list[tuple[str, bytes]] | None:
        _Message.reads += 1
        return [("h", b"x")] if self._offset % 2 else None


@pytest.mark.parametrize("columns", [("offset",), ("value", "partition"), ("timestamp", "headers", "key")])
def test_the_tail_builds_only_the_columns_asked_for(columns: tuple[str, ...]) -> None:
    """The columnar scan's pruning reaches the tail: the same values as the whole row's, and a key, value
    or headers not asked for is never read from the client's records (a count reads no payload)."""
    from spark_reader.tail import _to_batch

    opts = parse_options(
        {**STORE, "subscribe": "t", "includeHeaders": "true", "kafka.bootstrap.servers": "b:1"}
    )
    part = BrokerTailPartition("t", 2, 10, 20, tail_settings(opts), PushedFilters())
    messages = [_Message(o) for o in range(10, 20)]
    whole = _to_batch(messages, part)
    _Message.reads = 0
    pruned = _to_batch(messages, part, columns)
    assert pruned.schema.names == list(columns)
    assert pruned.to_pydict() == whole.select(list(columns)).to_pydict()
    assert _Message.reads == len(messages) * len({"key", "value", "headers"} & set(columns))
