"""The live tail read through the brokers' fetch layer, against Spark's own Kafka source, on a real broker.

A topic that never tiers, so with `kafka.bootstrap.servers` and an empty store `format("kafka-tiered")`
reads all of it from the brokers (`spark_reader.tail`: raw record batches, segment_format's columnar
decoder). The session's Kafka 4.4 broker (no tiered storage) holds a two-partition topic written by
librdkafka: lz4 batches of about 2 KiB of keyed and null-keyed records, null values, headers (a null
header value among them), a committed transaction, and at the end of the read an aborted transaction
(marker written) and a transaction still open, with plain records after it.

Every column must be exactly what Spark's own `format("kafka")` gives (spark-sql-kafka-0-10, Kafka's
Java consumer), under read_uncommitted (the open transaction's records included, up to the high
watermark) and read_committed (the aborted records left out, the read stopping at the last stable
offset, where the open transaction begins), on both Spark paths (`tiered_spark`: the Python Data Source
and the columnar scan), with default fetches and with `kafka.max.partition.fetch.bytes` of 10000 bytes,
which cuts a batch at the end of nearly every response (the fetch layer's own counters say so). So must
`count()` (the columnar scan answers it from batch headers: on each split it equals the rows and
decompresses nothing where the split holds whole batches), a pruned `select(value)`, and a stream
(`Trigger.AvailableNow`, `maxOffsetsPerTrigger`).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import KafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(900)]

TOPIC = "broker-tail"
PARTITIONS = 2
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
CUT_BYTES = "10000"  # a few ~2 KiB batches per response, and a cut one after them
LEVELS = ("read_uncommitted", "read_committed")
TRANSACTIONS = {"committed": 200, "aborted": 150, "open": 120}  # records per partition


def _value(n: int) -> bytes | None:
    return None if n % 17 == 0 else f"{n}|".encode() + os.urandom(60 + n % 200)


def _send(producer: Any, partition: int, tag: str, start: int, count: int) -> None:  # noqa: ANN401
    for n in range(start, start + count):
        headers = [("n", str(n).encode()), ("null", None)] if n % 3 == 0 else None
        key = f"{tag}-{n % 50}".encode() if n % 5 else None
        producer.produce(TOPIC, key=key, value=_value(n), partition=partition, headers=headers)
        if n % 500 == 0:
            producer.poll(0)
    producer.flush(60)


@pytest.fixture(scope="module")
def topic(kafka_broker: KafkaBroker) -> Iterator[str]:
    """The topic (see the module docstring); its open transaction stays open until the module ends."""
    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    kafka_broker.create_topic(TOPIC, PARTITIONS)
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 2048, "compression.type": "lz4"}
    plain = Producer({**conf, "acks": "all"})
    txn = Producer({**conf, "transactional.id": "broker-tail-txn"})
    still_open = Producer({**conf, "transactional.id": "broker-tail-open", "transaction.timeout.ms": 900_000})
    txn.init_transactions(30)
    still_open.init_transactions(30)
    for p in range(PARTITIONS):
        _send(plain, p, "plain", 0, 1500)
    txn.begin_transaction()
    for p in range(PARTITIONS):
        _send(txn, p, "committed", 0, TRANSACTIONS["committed"])
        _send(plain, p, "plain", 1500, 100)  # inside the transaction's span: kept
    txn.commit_transaction(30)
    for p in range(PARTITIONS):
        _send(plain, p, "plain", 1600, 1000)
    txn.begin_transaction()
    for p in range(PARTITIONS):
        _send(txn, p, "aborted", 0, TRANSACTIONS["aborted"])
    txn.abort_transaction(30)
    still_open.begin_transaction()
    for p in range(PARTITIONS):
        _send(still_open, p, "open", 0, TRANSACTIONS["open"])
        _send(plain, p, "plain", 2600, 80)  # past the last stable offset: read_uncommitted only
    try:
        yield TOPIC
    finally:
        still_open.abort_transaction(30)


@pytest.fixture(scope="module")
def sparks_rows(tiered_spark, kafka_broker: KafkaBroker, topic: str) -> dict[str, list[tuple]]:  # noqa: ANN001
    """Spark's own Kafka source's rows, per isolation level (read once for the module)."""
    from harness.spark_kafka import add_kafka_source

    add_kafka_source(tiered_spark)
    return {
        level: _rows(
            tiered_spark.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
            .options(subscribe=topic, includeHeaders="true", **{"kafka.isolation.level": level})
            .load()
        )
        for level in LEVELS
    }


def _rows(df: Any) -> list[tuple]:  # noqa: ANN401
    out = []
    for r in df.selectExpr(*COLUMNS).collect():
        headers = None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"])
        out.append((r["partition"], r["offset"], r["key"], r["value"], r["topic"], r["timestamp"],
                    r["timestampType"], headers))  # fmt: skip
    return sorted(out, key=lambda t: (t[0], t[1]))


def _first_difference(got: list[tuple], want: list[tuple]) -> str:
    for g, w in zip(got, want, strict=False):
        if g != w:
            return f"first difference: {g[:2]} {g[2:4]!r:.120} vs {w[:2]} {w[2:4]!r:.120}"
    return f"{len(got)} vs {len(want)} rows"


def _options(store: dict[str, str], broker: KafkaBroker, topic: str, level: str, cut: bool) -> dict[str, str]:
    return {
        **store, "subscribe": topic, "includeHeaders": "true",
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.isolation.level": level,
        **({"kafka.max.partition.fetch.bytes": CUT_BYTES} if cut else {}),
    }  # fmt: skip


def test_the_oracle_holds_what_the_module_says(sparks_rows: dict[str, list[tuple]]) -> None:
    """Spark's rows themselves: the open transaction's records under read_uncommitted only, the aborted
    ones never under read_committed, whose read stops at the open transaction (its last stable offset)."""
    keys = {level: Counter((r[2] or b"").split(b"-")[0] for r in rows) for level, rows in sparks_rows.items()}
    keyed = {tag: PARTITIONS * sum(1 for n in range(count) if n % 5) for tag, count in TRANSACTIONS.items()}
    assert keys["read_uncommitted"][b"open"] == keyed["open"] > 0
    assert keys["read_uncommitted"][b"aborted"] == keyed["aborted"] > 0
    assert keys["read_committed"][b"open"] == 0 and keys["read_committed"][b"aborted"] == 0
    assert keys["read_committed"][b"committed"] == keyed["committed"] > 0
    committed_ends = {
        p: max(r[1] for r in sparks_rows["read_committed"] if r[0] == p) for p in range(PARTITIONS)
    }
    opens = {p: min(r[1] for r in sparks_rows["read_uncommitted"] if r[0] == p and r[2] and r[2].startswith(b"open"))
             for p in range(PARTITIONS)}  # fmt: skip
    assert all(committed_ends[p] < opens[p] for p in range(PARTITIONS)), (committed_ends, opens)


def test_small_fetches_cut_batches_at_the_end_of_responses(kafka_broker: KafkaBroker, topic: str) -> None:
    """The setting the Spark reads below use does cut batches (the fetch layer's own counters), and the
    rows read through it are the rows read with default fetches."""
    from spark_reader.brokerwire import BrokerWire, read_arrow

    params = {"bootstrap.servers": kafka_broker.bootstrap_servers}
    with BrokerWire.from_kafka_params(params) as client:
        end = client.list_offsets(topic, {0: -1})[0]
        whole = [o for b in read_arrow(client, topic, 0, 0, end) for o in b.column("offset").to_pylist()]
    with BrokerWire.from_kafka_params({**params, "max.partition.fetch.bytes": CUT_BYTES}) as client:
        cut = [o for b in read_arrow(client, topic, 0, 0, end) for o in b.column("offset").to_pylist()]
        assert client.stats.trimmed_bytes > 0 and client.stats.fetches > 20, client.stats
    assert cut == whole and len(whole) > 2500


@pytest.mark.parametrize("level", LEVELS)
def test_every_column_is_sparks_own_kafka_sources(
    tiered_spark,
    kafka_broker: KafkaBroker,
    topic: str,
    store: dict[str, str],
    sparks_rows,
    level: str,  # noqa: ANN001
) -> None:
    want = sparks_rows[level]
    for cut in (False, True):
        df = (
            tiered_spark.read.format("kafka-tiered")
            .options(**_options(store, kafka_broker, topic, level, cut))
            .load()
        )
        got = _rows(df)
        assert got == want, f"{level}, cut batches {cut}: {_first_difference(got, want)}"
        assert df.count() == len(want), f"{level}, cut batches {cut}: count()"
        values = Counter(r["value"] for r in df.select("value").collect())
        assert values == Counter(r[3] for r in want), f"{level}, cut batches {cut}: select(value)"


def test_a_stream_reads_the_same_rows_in_micro_batches(
    tiered_spark,
    kafka_broker: KafkaBroker,
    topic: str,
    store: dict[str, str],
    sparks_rows,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    level = "read_committed"
    name = f"broker_tail_{uuid.uuid4().hex[:8]}"
    stream = (
        tiered_spark.readStream.format("kafka-tiered")
        .options(**_options(store, kafka_broker, topic, level, True))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1500")
        .load()
    )
    query = (
        stream.selectExpr("partition", "offset", "key", "value")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    got = sorted(tuple(r) for r in tiered_spark.sql(f"select * from {name}").collect())
    want = [(r[0], r[1], r[2], r[3]) for r in sparks_rows[level]]
    assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("level", LEVELS)
def test_a_count_reads_batch_headers_and_equals_the_rows(
    kafka_broker: KafkaBroker, topic: str, store: dict[str, str], level: str
) -> None:
    """What the columnar scan's `count()` runs on each tail split (`counting.count_partition`) equals the
    rows the split gives (`reference_count`), and decompresses nothing where the splits hold whole batches;
    splits of `maxRecordsPerPartition` offsets cut batches, which are then decoded."""
    from segment_format.columnar import decompressed_sections
    from spark_reader.counting import count_partition, reference_count
    from spark_reader.filters import PushedFilters
    from spark_reader.hybrid import plan_batch
    from spark_reader.offsets import ending_spec, starting_spec
    from spark_reader.options import parse_options
    from spark_reader.planning import Planner
    from spark_reader.tail import BrokerTailPartition

    for cut in (False, True):
        for extra in ({}, {"maxRecordsPerPartition": "700"}):
            opts = parse_options({**_options(store, kafka_broker, topic, level, cut), **extra})
            parts = plan_batch(Planner(opts), PushedFilters(), starting_spec(opts, False), ending_spec(opts))
            assert parts and all(isinstance(p, BrokerTailPartition) for p in parts)
            for part in parts:
                before = decompressed_sections()
                counted = count_partition(part)
                decompressed = decompressed_sections() - before
                assert counted == reference_count(part), (level, cut, extra, part)
                if not extra:
                    assert decompressed == 0, (level, cut, part)
