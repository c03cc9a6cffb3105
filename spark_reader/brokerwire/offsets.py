"""The ListOffsets request: earliest, latest (the high watermark, or the last stable offset under
read_committed: the broker answers `latest` at the request's isolation level), or the first offset at or
after a timestamp, for some partitions (of one topic or several) led by one broker.

The specs are Kafka's own wire values, which `spark_reader.offsets` uses too: EARLIEST -2, LATEST -1, a
timestamp (ms) >= 0. A timestamp past every record gives offset -1 (None here), as offsetsForTimes does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_reader.brokerwire.fetch import WIRE_ISOLATION
from spark_reader.options import IsolationLevel


@dataclass(frozen=True)
class ListedOffset:
    """One partition's answer: Kafka's error code (0: none), the offset (None: no record that late) and
    the timestamp of the record found (-1 for earliest and latest)."""

    error_code: int
    offset: int | None
    timestamp: int


Key = tuple[str, int]  # (topic, partition)


def list_offsets_request(
    specs: Mapping[Key, int],
    epochs: Mapping[Key, int],
    isolation: IsolationLevel,
    timeout_ms: int,
) -> Any:  # noqa: ANN401 - kafka.protocol.consumer.ListOffsetsRequest
    """One ListOffsets for `specs` ((topic, partition) -> EARLIEST, LATEST or a timestamp), with the
    partitions' leader epochs."""
    from kafka.protocol.consumer import ListOffsetsRequest

    Topic = ListOffsetsRequest.ListOffsetsTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), spec in sorted(specs.items()):
        by_topic.setdefault(topic, []).append(
            Topic.ListOffsetsPartition(
                partition_index=p, current_leader_epoch=epochs.get((topic, p), -1), timestamp=spec
            )
        )
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=WIRE_ISOLATION[isolation],
        topics=[Topic(name=topic, partitions=parts) for topic, parts in by_topic.items()],
        timeout_ms=timeout_ms,
        min_version=2 if isolation is IsolationLevel.READ_COMMITTED else 1,
    )


def parse_list_offsets(response: Any) -> dict[Key, ListedOffset]:  # noqa: ANN401
    out: dict[Key, ListedOffset] = {}
    for t in response.topics:
        for p in t.partitions:
            offset = int(p.offset)
            out[(str(t.name), int(p.partition_index))] = ListedOffset(
                int(p.error_code), None if offset < 0 else offset, int(p.timestamp)
            )
    return out
