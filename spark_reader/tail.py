"""The live tail of a partition, read from the brokers in a Spark task (hybrid reads, `spark_reader.hybrid`).

A `BrokerTailPartition` is the offsets [start, end) of one partition that the store does not hold yet (the
brokers' variant of `offset_range.OffsetRangePartition`, a store split's being `TieredPartition`). The
task reads them with the brokers' fetch layer (`spark_reader.brokerwire`): each Fetch response's record
batches stay the brokers' bytes and go through segment_format's columnar decoder, the one a store chunk
goes through, so no Python code runs per record on either side of a hybrid read. read_committed is the
Java consumer's rule over each response's aborted-transaction list and the read stops at the last stable
offset (`brokerwire.arrow`, `brokerwire.aborts`), as Spark's Kafka source's consumer does. No group is
joined and no offset committed.

Rows come out exactly as the store path's: the decoder's columns, projected to what the query uses
(`schema.decoder_projection`: a `select(value)` copies no key or headers), the pushed filters'
`row_mask`, then `schema.to_spark_batch` with the violation column of `violations=flag` (null: the
brokers' records were never validated). `count()` reads the batch headers only (`count_tail`,
`brokerwire.count`): no record is decompressed where a header says how many there are.

The client is made from the `kafka.*` options as the driver's is (`WireSettings`, translated once), with
its `default.api.timeout.ms` set to `kafkaConsumer.pollTimeoutMs` (Spark's default: 120 s): how long a
task waits for the brokers, retries and leader moves included.

Offsets the brokers no longer hold (their log start moved past them: retention, DeleteRecords) are data
loss, per failOnDataLoss as in Spark's Kafka source: fail naming them, or warn and go on from the log
start (a start past the log's end: warn and stop). A range whose end the brokers' log has not reached (a
new leader's high watermark still catching up) is waited for, up to the poll timeout, then the task fails
naming the offset, as Spark's source does when a poll brings nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from spark_reader.brokerwire.arrow import decode_chunk
from spark_reader.brokerwire.client import BrokerWire
from spark_reader.brokerwire.connection import Deadline
from spark_reader.brokerwire.count import count_chunk
from spark_reader.brokerwire.errors import OffsetOutOfRangeError
from spark_reader.brokerwire.reader import WireChunk, read_range
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.errors import DataLossError, ReaderError
from spark_reader.filters import NO_FILTERS, UNBOUNDED, PushedFilters
from spark_reader.offset_range import OffsetRangePartition
from spark_reader.options import IsolationLevel, SourceOptions, Violations
from spark_reader.schema import VIOLATION_COLUMN, decoder_projection, to_spark_batch

log = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's Kafka source: spark.network.timeout


@dataclass(frozen=True)
class TailSettings:
    """What every tail task of a query shares: the client's settings (credentials: never shown) and the
    options that shape the rows."""

    wire: WireSettings = field(repr=False)
    read_committed: bool
    include_headers: bool
    flag_violations: bool
    fail_on_data_loss: bool

    @classmethod
    def of(cls, opts: SourceOptions, wire: WireSettings | None = None) -> TailSettings:
        """The tail's settings for these options (`wire`: their translation, when made already)."""
        wire = wire or WireSettings.from_kafka_params(opts.kafka_params)
        poll_ms = opts.poll_timeout_ms or DEFAULT_POLL_TIMEOUT_MS
        return cls(
            wire=dataclasses.replace(wire, default_api_timeout_ms=poll_ms),
            read_committed=opts.isolation_level is IsolationLevel.READ_COMMITTED,
            include_headers=opts.include_headers,
            flag_violations=opts.violations is Violations.FLAG,
            fail_on_data_loss=opts.fail_on_data_loss,
        )

    @property
    def servers(self) -> str:
        return self.wire.bootstrap_servers

    @property
    def isolation(self) -> IsolationLevel:
        return IsolationLevel.READ_COMMITTED if self.read_committed else IsolationLevel.READ_UNCOMMITTED

    @property
    def poll_timeout_ms(self) -> int:
        return self.wire.default_api_timeout_ms


class BrokerTailPartition(OffsetRangePartition):
    """Offsets [start, end) of one partition, read from the brokers (the part the store does not hold):
    the brokers' variant of `OffsetRangePartition`."""

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
            f"from {self.source})"
        )

    def rows(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        return read_tail(self, columns)

    def count(self) -> int:
        return count_tail(self)

    @property
    def include_headers(self) -> bool:
        return self.settings.include_headers

    @property
    def flags_violations(self) -> bool:
        return self.settings.flag_violations

    @property
    def source(self) -> str:
        """The brokers' bootstrap servers (the client's settings, credentials included, stay unshown)."""
        return self.settings.servers


def tail_chunks(client: BrokerWire, part: BrokerTailPartition) -> Iterator[WireChunk]:
    """The Fetch responses' whole batches for [start, end), with failOnDataLoss applied and an end the
    brokers have not reached yet waited for (see the module docstring)."""
    settings, name = part.settings, f"{part.topic}-{part.partition}"
    position, waiting, refused_at = part.start, None, None
    while position < part.end:
        try:
            for chunk in read_range(
                client, part.topic, part.partition, position, part.end, settings.isolation
            ):
                yield chunk
                position, waiting = chunk.next_offset, None
        except OffsetOutOfRangeError as lost:
            if lost.log_start_offset <= position < lost.log_end_offset:  # the log moved meanwhile: again
                if refused_at == position:  # refused twice at one offset its bounds say it holds
                    raise ReaderError(f"{name}: {lost}") from None
                refused_at = position
                continue
            position = _data_loss(part, position, lost)
            continue
        if position >= part.end:
            return
        waiting = waiting or Deadline(settings.poll_timeout_ms)
        if waiting.expired:
            raise ReaderError(
                f"{name}: no record from the Kafka brokers {settings.servers} for "
                f"{settings.poll_timeout_ms / 1000:g} s at offset {position}, where their log ends "
                f"(reading up to {part.end}; kafkaConsumer.pollTimeoutMs)"
            )
        client.wait(settings.wire.retry_backoff_ms)


def _data_loss(part: BrokerTailPartition, position: int, lost: OffsetOutOfRangeError) -> int:
    """The brokers no longer hold `position`: fail (failOnDataLoss) or say where to go on from."""
    name, servers = f"{part.topic}-{part.partition}", part.settings.servers
    if position >= lost.log_end_offset:  # past the log's end: it was truncated below the planned range
        resume = part.end
        message = (
            f"{name}: offsets {position}..{part.end - 1} are not on the Kafka brokers {servers} (their log "
            f"ends at {lost.log_end_offset})"
        )
    else:
        resume = max(position, lost.log_start_offset)
        message = (
            f"{name}: offsets {position}..{resume - 1} are neither in the store nor on the Kafka brokers "
            f"{servers} (their log starts at {lost.log_start_offset})"
        )
    if part.settings.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to read what is left")
    log.warning("%s; reading what is left (failOnDataLoss=false)", message)
    return resume


def read_tail(part: BrokerTailPartition, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of offsets [start, end) from the brokers, in the store path's schema (or its `columns`)."""
    if part.start >= part.end:
        return
    with BrokerWire(part.settings.wire) as client:
        for chunk in tail_chunks(client, part):
            yield from chunk_rows(chunk, part, columns)


def chunk_rows(
    chunk: WireChunk, part: BrokerTailPartition, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """One Fetch response's rows as the store path makes a chunk's: decoded (only the columns asked for),
    the pushed filters applied, converted to the source's schema (see the module docstring)."""
    settings = part.settings
    projection = decoder_projection(columns, settings.include_headers, batch_fields=False)
    want_flag = settings.flag_violations and (columns is None or VIOLATION_COLUMN in columns)
    for batch in decode_chunk(chunk, settings.isolation, projection):
        keep = part.filters.row_mask(batch.column("offset"), batch.column("timestamp"))
        if keep is not None:
            batch = batch.filter(keep)
        if not batch.num_rows:
            continue
        flag = pa.nulls(batch.num_rows, pa.string()) if want_flag else None
        yield to_spark_batch(batch, part.topic, part.partition, settings.include_headers, flag, columns)


def count_tail(part: BrokerTailPartition) -> int:
    """The rows `read_tail` gives, from the batch headers (`brokerwire.count`); a timestamp filter or an
    IN list on offsets, which headers cannot settle, is counted by reading the offsets."""
    filters = part.filters
    if filters.timestamp_us != UNBOUNDED or filters.offset.values is not None:
        return sum(batch.num_rows for batch in read_tail(part, ("offset",)))
    if part.start >= part.end:
        return 0
    with BrokerWire(part.settings.wire) as client:
        return sum(
            count_chunk(chunk, part.settings.isolation, filters.offset.lo, filters.offset.hi)
            for chunk in tail_chunks(client, part)
        )
