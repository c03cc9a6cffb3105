"""Offsets [start, end) of one partition from the brokers, as chunks of raw record batches.

Each chunk is one Fetch response's whole batches, untouched (`records` is a view of the response's
bytes), with the aborted transactions that response listed for them and the window of offsets the
caller asked for (`start`..`end`: the first batch may begin before the fetch offset, a compressed batch
being returned whole, and the last may run past the end). Nothing here parses a record:
`spark_reader.brokerwire.arrow` decodes a chunk with segment_format's columnar decoder.

The next fetch starts at the offset after the last whole batch, so a batch cut by the size limit is
fetched again whole. It is sent before the chunk is handed on (`BrokerWire.fetch_ahead`), so the broker
reads and sends the next one while the caller decodes this one. The batches of a response that start
at `end` or later are cut off the chunk (`batches.cut_at`): a response is sized in bytes and usually
runs past the end, and what lies past it would only be decompressed to be dropped (a small
micro-batch's task asks for a fraction of one response). The read stops at `end`, or where the
brokers' log stops: the high watermark, or under read_committed the last stable offset (records past
it are not readable yet), whichever the last response gave. A response with no batch while offsets
below that remain (possible while a leader moves) is retried after `retry.backoff.ms`, for at most
`default.api.timeout.ms` without progress.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from spark_reader.brokerwire.batches import cut_at
from spark_reader.brokerwire.client import BrokerWire
from spark_reader.brokerwire.connection import Deadline
from spark_reader.brokerwire.errors import WireError, WireTimeoutError
from spark_reader.brokerwire.fetch import AbortedTransaction, FetchResult
from spark_reader.options import IsolationLevel

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class WireChunk:
    """One Fetch response's whole record batches for offsets [start, end) of a partition.

    `records`: the batches as the broker sent them (keep only rows with start <= offset < end);
    `aborted`: the aborted transactions the response listed (read_committed; empty otherwise);
    `next_offset`: the offset after the last batch, or where batches past `end` were cut off, the first
    of those (either way where a read goes on); the rest is the partition as the leader answered."""

    topic: str
    partition: int
    records: memoryview
    start: int
    end: int
    next_offset: int
    aborted: tuple[AbortedTransaction, ...]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


def _limit(result: FetchResult, isolation: IsolationLevel) -> int:
    """Where the brokers' readable log ends for this isolation level."""
    if isolation is IsolationLevel.READ_COMMITTED and result.last_stable_offset >= 0:
        return result.last_stable_offset
    return result.high_watermark


def read_range(
    client: BrokerWire,
    topic: str,
    partition: int,
    start: int,
    end: int,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> Iterator[WireChunk]:
    """The chunks of offsets [start, end) of `topic`-`partition` (see the module docstring).

    Raises `OffsetOutOfRangeError` (the log's bounds in it) when `start` is no longer, or not yet, in the
    brokers' log; the caller decides what failOnDataLoss means."""
    name = f"{topic}-{partition}"
    position, stalled, ahead = start, None, None
    while position < end:
        result = client.fetch(topic, partition, position, isolation, ahead)
        ahead = None
        limit = _limit(result, isolation)
        if result.next_offset is None:
            if position >= limit:
                log.debug("%s: stopped at %d, the brokers' end (reading up to %d)", name, position, end)
                return
            stalled = stalled or Deadline(client.settings.default_api_timeout_ms)
            if stalled.expired:
                raise WireTimeoutError(
                    f"{name}: the Kafka brokers {client.servers} returned no record at offset {position} "
                    f"for {stalled.timeout_ms / 1000:g} s though their log goes on to {limit} "
                    "(kafka.default.api.timeout.ms)"
                )
            client.wait(client.settings.retry_backoff_ms)
            continue
        if result.next_offset <= position:
            raise WireError(
                f"{name}: the Kafka brokers {client.servers} answered a fetch at offset {position} with "
                f"batches ending at {result.next_offset - 1}"
            )
        stalled = None
        if result.next_offset < min(end, limit):  # the next Fetch goes out before this chunk is decoded
            ahead = client.fetch_ahead(topic, partition, result.next_offset, isolation)
        records, next_offset = result.records, result.next_offset
        if next_offset > end and (cut := cut_at(records, end)) is not None:
            records, next_offset = records[: cut.size], cut.next_offset  # nothing past the end is decoded
        yield WireChunk(
            topic=topic,
            partition=partition,
            records=records,
            start=position,
            end=min(end, next_offset),
            next_offset=next_offset,
            aborted=result.aborted,
            high_watermark=result.high_watermark,
            last_stable_offset=result.last_stable_offset,
            log_start_offset=result.log_start_offset,
        )
        position = next_offset
        if position >= limit:
            return
