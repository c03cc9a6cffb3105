"""The Metadata request: each partition's leader and leader epoch, for some topics or all of them.

Topics are named (a read names its one topic; the driver the query's topics, all of them only for
`subscribePattern`) and never created: `allow_auto_topic_creation` is off, where a broker with
`auto.create.topics.enable` would otherwise create a topic a reader merely asked about.
The leader epoch is what Fetch and ListOffsets send as `current_leader_epoch`, so a broker that is no
longer the leader, or a leader that moved on, says so (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH)
instead of answering from a stale view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NO_LEADER = -1
UNKNOWN_TOPIC = 3  # Kafka's UNKNOWN_TOPIC_OR_PARTITION


@dataclass(frozen=True)
class PartitionLeader:
    """A partition's leader as Metadata gave it (`node_id` -1: none now; `error_code` Kafka's, 0: none)."""

    partition: int
    node_id: int
    leader_epoch: int
    error_code: int = 0


@dataclass(frozen=True)
class TopicLeaders:
    """One topic's answer: its error (0: none), its partitions' leaders, whether Kafka's own (internal)."""

    error_code: int
    leaders: dict[int, PartitionLeader]
    internal: bool = False


def metadata_request(topics: str | Sequence[str] | None) -> Any:  # noqa: ANN401 - kafka's MetadataRequest
    """Metadata of one topic, of several, or (None) of every topic."""
    from kafka.protocol.metadata import MetadataRequest

    names = [topics] if isinstance(topics, str) else topics
    return MetadataRequest(
        topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=name) for name in names],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def parse_topics(response: Any) -> dict[str, TopicLeaders]:  # noqa: ANN401
    """Every topic of a Metadata response, with its error and its partitions' leaders."""
    out: dict[str, TopicLeaders] = {}
    for t in response.topics:
        leaders = {
            int(p.partition_index): PartitionLeader(
                int(p.partition_index), int(p.leader_id), int(p.leader_epoch), int(p.error_code)
            )
            for p in t.partitions
        }
        out[str(t.name)] = TopicLeaders(int(t.error_code), leaders, bool(getattr(t, "is_internal", False)))
    return out


def parse_leaders(response: Any, topic: str) -> TopicLeaders:  # noqa: ANN401
    return parse_topics(response).get(topic) or TopicLeaders(UNKNOWN_TOPIC, {})  # the broker left it out
