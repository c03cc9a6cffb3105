"""The live tail of a partition, read from the brokers in a Spark task (hybrid reads, `spark_reader.hybrid`).

A `BrokerTailPartition` is the offsets [start, end) of one partition that the store does not hold yet. The
task reads them with a librdkafka consumer (confluent-kafka: C underneath; a pure-Python client would be
the slowest part of the query) assigned to that one partition, with the query's isolation level: under
read_committed the consumer drops aborted records itself, as Spark's Kafka source's consumer does. No
offsets are committed and no group is joined (assign, not subscribe).

Rows come out in exactly the store path's Arrow schema: the consumer's records are put in the columns the
columnar decoder yields (key, value, offset, timestamp, timestamp_type, headers) and converted by the same
`schema.to_spark_batch`, so `timestampType` (Kafka's CreateTime 0 / LogAppendTime 1, as Spark's source
gives), null keys and values, and headers (null for none) are one code path for both sides.

A start the brokers no longer hold (their log start moved past it) is data loss, per failOnDataLoss, as in
Spark's Kafka source: the consumer runs with `auto.offset.reset=error` and the task reports it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_reader.errors import DataLossError, ReaderError
from spark_reader.filters import NO_FILTERS, PushedFilters
from spark_reader.schema import to_spark_batch

log = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's Kafka source: spark.network.timeout
BATCH_MESSAGES = 10_000
_HEADER_ITEMS = pa.struct([("key", pa.string()), ("value", pa.binary())])


@dataclass(frozen=True)
class TailSettings:
    """What every tail task of a query shares: the client settings (may hold credentials: never shown)."""

    client: tuple[tuple[str, str], ...] = field(repr=False)
    read_committed: bool
    include_headers: bool
    flag_violations: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    @property
    def servers(self) -> str:
        return dict(self.client).get("bootstrap.servers", "?")


class BrokerTailPartition(InputPartition):
    """Offsets [start, end) of one partition, read from the brokers (the part the store does not hold)."""

    def __init__(
        self, topic: str, partition: int, start: int, end: int, settings: TailSettings,
        filters: PushedFilters = NO_FILTERS,
    ) -> None:  # fmt: skip
        super().__init__(None)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.settings = settings
        self.filters = filters

    def __repr__(self) -> str:
        return (
            f"BrokerTailPartition({self.topic}-{self.partition} offsets {self.start}..{self.end - 1} "
            f"from {self.settings.servers})"
        )


def _consumer(settings: TailSettings):  # noqa: ANN202
    from spark_reader.broker import make_client

    conf = dict(settings.client)
    conf.setdefault("group.id", f"spark-kafka-tiered-{uuid.uuid4()}")  # no group is joined: assign only
    # one partition per consumer: bigger fetches than librdkafka's 1 MiB default, fewer round trips
    conf.setdefault("max.partition.fetch.bytes", str(8 << 20))
    # librdkafka pauses fetching for this long whenever its queue fills (every 8 MiB fetch here): 1 s by
    # default, which held a 1 M record read to 5.9 s; at 10 ms it took 1.5 s (benchmarks/broker_wire.py)
    conf.setdefault("fetch.queue.backoff.ms", "10")
    conf.update(
        {
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "error",
            "enable.partition.eof": "true",
            "isolation.level": "read_committed" if settings.read_committed else "read_uncommitted",
        }
    )
    return make_client("consumer", conf)


def _to_batch(
    messages: list, part: BrokerTailPartition, columns: Sequence[str] | None = None
) -> pa.RecordBatch | None:
    """Consumer records -> the decoder's columns -> the source's schema (`to_spark_batch`), or only its
    `columns` (the columnar scan's pruning: a key, value or headers not asked for is never built).

    One list comprehension per field and numpy for the rest: this loop is the tail's cost in Python."""
    wanted = {"key", "value", "headers"} if columns is None else set(columns)
    stamps = np.array([m.timestamp() for m in messages], dtype=np.int64).reshape(-1, 2)  # (type, ms)
    kinds = stamps[:, 0]
    columns_in: dict[str, pa.Array] = {
        "offset": pa.array(np.array([m.offset() for m in messages], dtype=np.int64)),
        "timestamp": pa.array(stamps[:, 1]),
        # librdkafka's 1 create / 2 log append / 0 none -> Kafka's TimestampType ids 0 / 1 / -1
        "timestamp_type": pa.array(np.where(kinds == 1, 0, np.where(kinds == 2, 1, -1)).astype(np.int8)),
    }
    if "key" in wanted:
        columns_in["key"] = pa.array([m.key() for m in messages], pa.binary())
    if "value" in wanted:
        columns_in["value"] = pa.array([m.value() for m in messages], pa.binary())
    if part.settings.include_headers and "headers" in wanted:
        columns_in["headers"] = pa.array([m.headers() or [] for m in messages], pa.list_(_HEADER_ITEMS))
    batch = pa.RecordBatch.from_pydict(columns_in)
    keep = part.filters.row_mask(batch.column("offset"), batch.column("timestamp"))
    if keep is not None:
        batch = batch.filter(keep)
    if not batch.num_rows:
        return None
    flag = pa.nulls(batch.num_rows, pa.string()) if part.settings.flag_violations else None
    return to_spark_batch(batch, part.topic, part.partition, part.settings.include_headers, flag, columns)


def read_tail(part: BrokerTailPartition, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of offsets [start, end) from the brokers, in the store path's schema (or its `columns`)."""
    from confluent_kafka import KafkaError, TopicPartition

    settings, name = part.settings, f"{part.topic}-{part.partition}"
    if part.start >= part.end:
        return
    consumer = _consumer(settings)
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        position, waited_since = part.start, time.monotonic()
        while position < part.end:
            # no more than the range needs: a full batch returns at once, where a bigger one would wait
            messages = consumer.consume(
                num_messages=max(1, min(BATCH_MESSAGES, part.end - position)), timeout=0.5
            )
            rows = messages
            if any(m.error() is not None for m in messages):
                rows = []
                for m in messages:
                    err = m.error()
                    if err is None:
                        rows.append(m)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        position = max(position, m.offset())  # past control records and aborted ones
                    elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        position = _data_loss(consumer, part, position, err.str())
                    else:
                        raise ReaderError(f"{name}: the Kafka brokers {settings.servers} failed: {err.str()}")
            if rows:  # one partition's records, in offset order
                position = max(position, rows[-1].offset() + 1)
                if rows[-1].offset() >= part.end:
                    rows = [m for m in rows if m.offset() < part.end]
            if rows:
                batch = _to_batch(rows, part, columns)
                if batch is not None:
                    yield batch
            if messages:
                waited_since = time.monotonic()
            elif (time.monotonic() - waited_since) * 1000 > settings.poll_timeout_ms:
                raise ReaderError(
                    f"{name}: no record from the Kafka brokers {settings.servers} for "
                    f"{settings.poll_timeout_ms / 1000:g} s at offset {position} (reading up to {part.end}; "
                    "kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.close()


def _data_loss(consumer, part: BrokerTailPartition, position: int, reason: str) -> int:  # noqa: ANN001
    """The brokers no longer hold `position`: fail (failOnDataLoss) or go on from their log start."""
    from confluent_kafka import TopicPartition

    name = f"{part.topic}-{part.partition}"
    tp = TopicPartition(part.topic, part.partition)
    low, _ = consumer.get_watermark_offsets(tp, timeout=part.settings.poll_timeout_ms / 1000)
    message = (
        f"{name}: offsets {position}..{max(position, low) - 1} are neither in the store nor on the Kafka "
        f"brokers (their log starts at {low}: {reason})"
    )
    if part.settings.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to read what is left")
    log.warning("%s; reading what is left (failOnDataLoss=false)", message)
    start = max(position, low)
    if start < part.end:
        consumer.assign([TopicPartition(part.topic, part.partition, start)])
    return start
