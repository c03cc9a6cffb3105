"""One Fetch request for one partition, and what its response says, records left as raw bytes.

Version 12 is asked for at most: the highest without topic ids (v13+ name topics by id, which would cost
a Metadata v10+ lookup per topic and gain nothing for one partition; KIP-405/903/951/853's later fields
are for replicas and leader hints). Every version from 4 has the isolation level and, per partition, the
last stable offset and the aborted transactions; from 5 the log start offset; Kafka 4 brokers accept 4
and up, and ApiVersions settles the rest. No fetch session (session id 0, epoch -1: a full, sessionless
fetch, as a one-shot reader needs), `current_leader_epoch` from Metadata so a stale leader is fenced
(FENCED_LEADER_EPOCH) instead of answering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_reader.brokerwire.batches import whole_batches
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.options import IsolationLevel

FETCH_MAX_VERSION = 12
FETCH_MIN_VERSION = 4  # isolation level, last stable offset, aborted transactions
_SESSIONLESS_ID, _SESSIONLESS_EPOCH = 0, -1
_CONSUMER_REPLICA_ID = -1


#: Kafka's wire values of the isolation levels
WIRE_ISOLATION = {IsolationLevel.READ_UNCOMMITTED: 0, IsolationLevel.READ_COMMITTED: 1}


@dataclass(frozen=True)
class AbortedTransaction:
    """An aborted transaction a Fetch response lists: its producer and the offset of its first batch.

    Its end is that producer's next ABORT marker in the log (`spark_reader.brokerwire.aborts`)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True)
class FetchResult:
    """One partition's part of a Fetch response.

    `records` are the whole batches at the start of the response's records (a zero-copy view);
    `trimmed` the bytes of a partial batch cut after them; `next_offset` the offset after the last whole
    batch (None when none is whole). The offsets are the partition's as the leader answered: high
    watermark, last stable offset (-1 if the broker did not say), log start offset."""

    error_code: int
    records: memoryview
    trimmed: int
    next_offset: int | None
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[AbortedTransaction, ...]
    throttle_time_ms: int


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    isolation: IsolationLevel,
    settings: WireSettings,
) -> Any:  # noqa: ANN401 - kafka.protocol.consumer.FetchRequest
    """A sessionless Fetch of `partition` from `offset` (kafka-python negotiates the version, 4..12)."""
    from kafka.protocol.consumer import FetchRequest

    part = FetchRequest.FetchTopic.FetchPartition(
        partition=partition,
        current_leader_epoch=leader_epoch,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=settings.max_partition_fetch_bytes,
    )
    return FetchRequest(
        replica_id=_CONSUMER_REPLICA_ID,
        max_wait_ms=settings.fetch_max_wait_ms,
        min_bytes=settings.fetch_min_bytes,
        max_bytes=settings.fetch_max_bytes,
        isolation_level=WIRE_ISOLATION[isolation],
        session_id=_SESSIONLESS_ID,
        session_epoch=_SESSIONLESS_EPOCH,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[],
        rack_id="",
        min_version=FETCH_MIN_VERSION,
        max_version=FETCH_MAX_VERSION,
    )


def parse_fetch(response: Any, topic: str, partition: int) -> FetchResult | None:  # noqa: ANN401
    """The partition's part of a Fetch response, or None when the response leaves it out: a broker
    throttling a client (a quota) answers with no partition at all, and the throttle time."""
    for topic_data in response.responses:
        if topic_data.topic != topic:
            continue
        for data in topic_data.partitions:
            if data.partition_index == partition:
                return _result(data, getattr(response, "throttle_time_ms", 0) or 0, f"{topic}-{partition}")
    return None


def _result(data: Any, throttle_ms: int, name: str) -> FetchResult:  # noqa: ANN401
    raw = memoryview(data.records or b"")
    whole = whole_batches(raw, f"records of {name} from the brokers")
    aborted = tuple(
        AbortedTransaction(int(a.producer_id), int(a.first_offset)) for a in (data.aborted_transactions or ())
    )
    return FetchResult(
        error_code=int(data.error_code),
        records=raw[: whole.size],
        trimmed=len(raw) - whole.size,
        next_offset=whole.next_offset,
        high_watermark=int(data.high_watermark),
        last_stable_offset=int(data.last_stable_offset),
        log_start_offset=int(data.log_start_offset),
        aborted=aborted,
        throttle_time_ms=int(throttle_ms),
    )
