"""The Metadata request for one topic: each partition's leader and leader epoch.

The topic is named (never all topics) and never created: `allow_auto_topic_creation` is off, where a
broker with `auto.create.topics.enable` would otherwise create a topic a reader merely asked about.
The leader epoch is what Fetch and ListOffsets send as `current_leader_epoch`, so a broker that is no
longer the leader, or a leader that moved on, says so (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH)
instead of answering from a stale view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NO_LEADER = -1


@dataclass(frozen=True)
class PartitionLeader:
    """A partition's leader as Metadata gave it (`node_id` -1: none now; `error_code` Kafka's, 0: none)."""

    partition: int
    node_id: int
    leader_epoch: int
    error_code: int = 0


@dataclass(frozen=True)
class TopicLeaders:
    """One topic's answer: its error (0: none) and its partitions' leaders."""

    error_code: int
    leaders: dict[int, PartitionLeader]


def metadata_request(topic: str) -> Any:  # noqa: ANN401 - kafka.protocol.metadata.MetadataRequest
    from kafka.protocol.metadata import MetadataRequest

    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def parse_leaders(response: Any, topic: str) -> TopicLeaders:  # noqa: ANN401
    for t in response.topics:
        if t.name == topic:
            leaders = {
                int(p.partition_index): PartitionLeader(
                    int(p.partition_index), int(p.leader_id), int(p.leader_epoch), int(p.error_code)
                )
                for p in t.partitions
            }
            return TopicLeaders(int(t.error_code), leaders)
    return TopicLeaders(3, {})  # UNKNOWN_TOPIC_OR_PARTITION: the broker left it out
