"""The broker's own retention task deleting a stream's next offsets mid-read, against Spark's Kafka source.

`test_kafka_broker_tail_faults` moves a log's start with DeleteRecords between planning and reading; here
Kafka's retention task does it, while a streaming query is running, so what the stream asks for next is
gone the way it goes in production. One broker for the module checks retention every second
(`log.retention.check.interval.ms`, first run at start-up) and its topics roll a segment every ~8 KiB
(`internal.segment.bytes`), so a topic of 600 records spans several segments. Each topic is written the
same way: 30 produce requests of 20 records (a batch each, lz4, incompressible values, keys and null keys,
null values, headers with a null value), the first 400 records stamped two days ago, the rest now.

A stream reads the topic from `earliest` with `maxOffsetsPerTrigger` 200 (`Trigger.AvailableNow`) into a
foreachBatch sink. After the first micro-batch (offsets 0..199) the sink sets the topic's `retention.ms` to
one day and waits until the brokers' log start (ListOffsets earliest) has moved past 200: the retention
task has deleted every segment holding only two-day-old records, so the log now starts at the first
segment holding a new record, between 200 and 400, and the next micro-batch (planned from 200) asks for
offsets the brokers no longer hold. The same runs with `format("kafka-tiered")` (an empty store and
`kafka.bootstrap.servers`: the live tail read with raw Fetch requests) and with Spark's own
`format("kafka")`, each on its own identically written topic (so the same segments, the same log start):

- failOnDataLoss=true: both queries fail after the first micro-batch; ours says so in one line naming the
  partition, the offsets lost and where the log starts;
- failOnDataLoss=false: ours gives offsets 0..199, then exactly the offsets that remained, each once and in
  order, every column equal to Spark's stream's rows of those offsets (the topic's name aside) and to
  Spark's batch read of what remained. Spark's stream gives the same rows plus a run of deleted offsets
  from 200 on that its executor had fetched before the retention task ran: Kafka's consumer fetches ahead
  (a pipelined Fetch when it hands out the last records it holds) and Spark keeps what its consumer
  fetched across micro-batches, so it serves those records without asking the brokers again; the
  kafka-tiered tail asks the brokers for each micro-batch's range and reports them lost. With
  failOnDataLoss=true the run it holds is shorter than what was deleted, so both fail on that micro-batch.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import KafkaBroker
from harness.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(600)]

COLUMNS = ("partition", "offset", "key", "value", "topic", "unix_millis(timestamp) AS ts", "timestampType",
           "headers")  # fmt: skip
RECORDS, PER_REQUEST, AGED = 600, 20, 400  # records 0..AGED-1 are older than the retention set mid-read
PER_TRIGGER = 200  # the first micro-batch: offsets 0..199
DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)  # one clock for every topic of the module: identical records

Row = tuple[Any, ...]
log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def broker(java_build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:  # noqa: ANN001
    """A broker whose retention task runs every second from start-up (Kafka's defaults: 5 min, after 30 s)."""
    b = KafkaBroker(
        tmp_path_factory.mktemp("retention-broker"),
        extra_props={"log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "0"},
        java_build=java_build,
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


# -- the topics ---------------------------------------------------------------------------------------------
def _new_topic(broker: KafkaBroker, tag: str) -> str:
    """A one-partition topic of ~8 KiB segments holding the module's records (see the docstring)."""
    from confluent_kafka import Producer

    topic = f"retention-{tag}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 1, {"internal.segment.bytes": "8192"})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 60_000,
                         "batch.size": 1_000_000, "compression.type": "lz4", "acks": "all",
                         "enable.idempotence": True})  # fmt: skip
    for n in range(RECORDS):
        headers = [("n", str(n).encode()), ("null", None)] if n % 3 == 0 else None
        value = None if n % 17 == 0 else f"{n}|".encode() + random.Random(n).randbytes(40 + n % 90)
        stamp = NOW_MS - 2 * DAY_MS + n if n < AGED else NOW_MS + n
        producer.produce(topic, key=f"k-{n % 40}".encode() if n % 5 else None, value=value,
                         headers=headers, timestamp=stamp)  # fmt: skip
        if n % PER_REQUEST == PER_REQUEST - 1:  # one request, one batch: the same segments on every topic
            assert producer.flush(60) == 0
    return topic


def _log_start(broker: KafkaBroker, topic: str) -> int:
    """The brokers' log start offset of partition 0 (ListOffsets earliest)."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    try:
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def _set_retention(broker: KafkaBroker, topic: str, retention_ms: int) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = broker.admin_client()
    try:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": str(retention_ms)})]
        )
    finally:
        admin.close()


# -- rows as comparable tuples --------------------------------------------------------------------------------
def _rows(df: Any) -> list[Row]:  # noqa: ANN401 - a DataFrame
    """Its rows in the order collected (one partition: its offsets' order)."""
    out = []
    for r in df.selectExpr(*COLUMNS).collect():
        headers = None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"])
        out.append((r[0], r[1], r[2], r[3], r[4], r[5], r[6], headers))
    return out


def _untitled(rows: list[Row]) -> list[Row]:
    """The rows without the topic's name (each reader has its own identical topic)."""
    return [(*r[:4], None, *r[5:]) for r in rows]


def _first_difference(got: list[Row], want: list[Row]) -> str:
    for g, w in zip(got, want, strict=False):
        if g != w:
            return f"first difference: {g[:2]} {g[2:4]!r:.120} vs {w[:2]} {w[2:4]!r:.120}"
    return f"{len(got)} vs {len(want)} rows"


def _one_line(message: str, *needles: str) -> str:
    """The line of `message` holding every needle (a Spark error carries a Python traceback around it)."""
    lines = [line for line in message.splitlines() if all(n in line for n in needles)]
    assert lines, f"no line with {needles} in:\n{message[-3000:]}"
    return lines[0]


# -- a stream through a retention event ------------------------------------------------------------------------
class RetentionRun:
    """What one stream read around the retention event: its micro-batches' rows, the log start the
    retention task left, and the query's error (None when it ended)."""

    def __init__(self, broker: KafkaBroker, topic: str) -> None:
        self.broker, self.topic = broker, topic
        self.batches: list[tuple[int, list[Row]]] = []
        self.log_start: int | None = None
        self.error: str | None = None

    def sink(self, df: Any, batch_id: int) -> None:  # noqa: ANN401 - foreachBatch's DataFrame
        self.batches.append((batch_id, _rows(df)))  # the micro-batch is read here: a read error fails it
        if self.log_start is None:  # after the first micro-batch: the retention task removes what is next
            read_up_to = max(r[1] for r in self.batches[0][1]) + 1
            _set_retention(self.broker, self.topic, DAY_MS)
            self.log_start = wait_until(
                f"the retention task to move {self.topic}-0's log start past {read_up_to}",
                lambda: (start := _log_start(self.broker, self.topic)) > read_up_to and start,
                timeout=60,
                interval=0.2,
            )

    @property
    def rows(self) -> list[Row]:
        """Every row the sink got, micro-batch after micro-batch, each in the order it was read."""
        return [row for _, rows in sorted(self.batches, key=lambda b: b[0]) for row in rows]

    def offsets(self) -> list[int]:
        return [r[1] for r in self.rows]


def _stream(
    session,  # noqa: ANN001
    broker: KafkaBroker,
    fmt: str,
    fail: str,
    extra: dict[str, str],
    tmp: Path,
) -> RetentionRun:
    """One stream (`fmt`) of a new topic through the retention event (see the module docstring)."""
    run = RetentionRun(broker, _new_topic(broker, fmt.replace("kafka-", "")))
    assert _log_start(broker, run.topic) == 0
    stream = (
        session.readStream.format(fmt)
        .options(**{"kafka.bootstrap.servers": broker.bootstrap_servers}, **extra)
        .options(
            subscribe=run.topic,
            includeHeaders="true",
            startingOffsets="earliest",
            maxOffsetsPerTrigger=str(PER_TRIGGER),
            failOnDataLoss=fail,
        )
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(run.sink)
        .option("checkpointLocation", str(tmp / f"checkpoint-{fmt}-{fail}"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    except Exception as exc:  # noqa: BLE001 - the query's failure is what is compared
        run.error = str(exc)
    finally:
        query.stop()
    summary = [(b, rows[0][1], rows[-1][1]) if rows else (b, None, None) for b, rows in run.batches]
    log.info("%s, failOnDataLoss=%s: batches %s, log start %s", fmt, fail, summary, run.log_start)
    return run


def _both(
    session,  # noqa: ANN001
    broker: KafkaBroker,
    store: dict[str, str],
    fail: str,
    tmp: Path,
) -> tuple[RetentionRun, RetentionRun, int]:
    """Spark's stream and ours through the same retention event, each on its own identical topic; both
    read offsets 0..199 first, identically, and the retention task left both logs starting at the same
    offset past them (the first segment holding a record newer than a day): (theirs, ours, that offset)."""
    theirs = _stream(session, broker, "kafka", fail, {}, tmp)
    ours = _stream(session, broker, "kafka-tiered", fail, store, tmp)
    for run in (theirs, ours):
        assert run.batches and run.log_start is not None, f"{run.topic}: no retention event: {run.error}"
    assert [r[1] for r in theirs.batches[0][1]] == list(range(PER_TRIGGER)), theirs.batches[0][1][:3]
    got, want = _untitled(ours.batches[0][1]), _untitled(theirs.batches[0][1])
    assert got == want, _first_difference(got, want)
    assert ours.log_start == theirs.log_start, (ours.log_start, theirs.log_start)
    assert PER_TRIGGER < ours.log_start <= AGED, ours.log_start
    return theirs, ours, ours.log_start


def test_failondataloss_true_fails_naming_the_offsets_retention_deleted(
    session,  # noqa: ANN001
    broker: KafkaBroker,
    store: dict[str, str],
    tmp_path: Path,
) -> None:
    """Both queries fail reading the micro-batch retention cut into, having delivered the first one only."""
    theirs, ours, log_start = _both(session, broker, store, "true", tmp_path)
    assert theirs.error is not None, f"Spark's Kafka source read past deleted offsets: {theirs.offsets()[-1]}"
    assert ours.error is not None, f"kafka-tiered read past deleted offsets: {ours.offsets()[-1]}"
    assert [b for b, _ in theirs.batches] == [b for b, _ in ours.batches] == [0]
    line = _one_line(ours.error, f"{ours.topic}-0", "failOnDataLoss")
    assert f"{ours.topic}-0: offsets {PER_TRIGGER}..{log_start - 1} " in line, line
    assert f"(their log starts at {log_start})" in line and broker.bootstrap_servers in line, line


def test_failondataloss_false_reads_every_offset_retention_left_once(
    session,  # noqa: ANN001
    broker: KafkaBroker,
    store: dict[str, str],
    tmp_path: Path,
) -> None:
    """Ours gives each offset that remained once, in order, and nothing retention deleted; Spark's gives
    the same rows plus the deleted offsets its executor had fetched before the retention task ran (a run
    from offset 200 on, shorter than what was deleted: see the module docstring)."""
    theirs, ours, log_start = _both(session, broker, store, "false", tmp_path)
    assert theirs.error is None, theirs.error
    assert ours.error is None, ours.error
    kept = [*range(PER_TRIGGER), *range(log_start, RECORDS)]
    assert ours.offsets() == kept, ours.offsets()
    prefetched = [o for o in theirs.offsets() if PER_TRIGGER <= o < log_start]
    assert prefetched == list(range(PER_TRIGGER, PER_TRIGGER + len(prefetched))), prefetched
    assert len(prefetched) < log_start - PER_TRIGGER, "Spark's source saw no data loss"
    assert [o for o in theirs.offsets() if o not in prefetched] == kept, theirs.offsets()
    got = _untitled(ours.rows)
    want = [row for row in _untitled(theirs.rows) if row[1] not in prefetched]
    assert got == want, _first_difference(got, want)
    remained = _rows(
        session.read.format("kafka")
        .options(**{"kafka.bootstrap.servers": broker.bootstrap_servers})
        .options(subscribe=ours.topic, includeHeaders="true")
        .load()
    )
    assert [r[1] for r in remained] == list(range(log_start, RECORDS))
    after = ours.rows[PER_TRIGGER:]
    assert after == remained, _first_difference(after, remained)
