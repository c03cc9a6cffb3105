"""The topic management policy API (KIP-108, KIP-201): one policy for create, alter, delete topic and delete
records, shaped as KIP-201's `TopicManagementPolicy`, in snake_case.

A policy sees each request (the topic, the principal, the requested state: partitions, replication factor,
assignments, the configs requested and the configs the topic will have) and the cluster's state, and
refuses it by raising `PolicyViolationException` with a message the user can act on. Which policy runs is
the broker's `rsm.config.policy.class.name` (`module:Class`), or the built-in one (`rsm.policy.builtin`),
configured with the broker's `rsm.config.*` keys (prefix stripped) through `configure`.

Where it runs (every change path asks the same policy):

| path | operation asked |
| --- | --- |
| the broker's `CreateTopicPolicy` (JVM plugin -> bridge op `validate_create_topic`) | `validate_create_topic` |
| the broker's `AlterConfigPolicy` (-> bridge op `validate_alter_config`) | `validate_alter_topic` |
| `rsm topic-config set / unset` (and `--dry-run`) on a topic's overlay | `validate_alter_topic` |
| `rsm topic-config set --pending` (settings of a topic not created yet) | `validate_create_topic` |
| the RSM reading a topic's overlay before a copy (the topic's state as it is) | `validate_alter_topic` |
| the RSM before deleting a tiered segment (retention, DeleteRecords, topic deletion) | `validate_delete_records` |

Topic configs are one map: Kafka's own keys (`cleanup.policy`, `remote.storage.enable`, ...) and the
`unchecked.*` keys of the topic configs proposal, whether the broker holds them or they live in the topic's overlay (today's
brokers refuse them as topic configs): a policy written for those keys works unchanged on both. A value that
is not known on a path is absent (the CLI does not know Kafka's configs unless it can ask a broker).
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from types import MappingProxyType

from rsm.api.moved import moved_names

__all__ = [
    "AlterTopicRequest",
    "BrokerState",
    "ClusterState",
    "CreateTopicRequest",
    "DeleteRecordsRequest",
    "DeleteTopicRequest",
    "PolicyViolationException",
    "RequestedTopicState",
    "StaticClusterState",
    "TopicManagementPolicy",
    "TopicState",
    "broker_configs_for_policy",
]


class PolicyViolationException(Exception):
    """The request does not satisfy the topic management policy (Kafka's `PolicyViolationException`).

    The message is what the user sees (Kafka's POLICY_VIOLATION error message): it says what is wrong and
    how to fix it, and never holds a secret.
    """


def _frozen(configs: Mapping[str, str | None] | None) -> Mapping[str, str | None]:
    return MappingProxyType(dict(configs or {}))


@dataclass(frozen=True)
class TopicState:
    """The state of a topic (KIP-201 `TopicState`); None where a path does not know a value."""

    num_partitions: int | None = None
    replication_factor: int | None = None
    replicas_assignments: Mapping[int, tuple[int, ...]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    marked_for_deletion: bool = False
    internal: bool = False
    topic_id: uuid.UUID | None = None  # when known (not before creation)

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _frozen(self.configs))
        if self.replicas_assignments is not None:
            object.__setattr__(
                self,
                "replicas_assignments",
                MappingProxyType({int(p): tuple(r) for p, r in self.replicas_assignments.items()}),
            )


@dataclass(frozen=True)
class RequestedTopicState(TopicState):
    """The state the topic will have if the request succeeds (KIP-201 `RequestedTopicState`).

    `configs` is the resulting configuration (current configs with the requested ones applied);
    `requested_configs` is what the request itself sets, a None value meaning the key is removed.
    """

    requested_configs: Mapping[str, str | None] = field(default_factory=dict)
    generated_replica_assignments: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "requested_configs", _frozen(self.requested_configs))


@dataclass(frozen=True)
class BrokerState:
    """The broker's configuration as the policy may see it (no secrets)."""

    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _frozen(self.configs))


class ClusterState(abc.ABC):
    """The cluster before the request takes effect (KIP-201 `ClusterState`)."""

    @abc.abstractmethod
    def topic_state(self, topic: str) -> TopicState | None:
        """The topic's current state, or None when it does not exist (or is not known on this path)."""

    @abc.abstractmethod
    def topics(self, include_internal: bool = False, include_marked_for_deletion: bool = False) -> Set[str]:
        """The topics this path knows of."""

    @abc.abstractmethod
    def cluster_size(self) -> int | None:
        """The number of brokers, or None when unknown."""

    @abc.abstractmethod
    def broker_state(self) -> BrokerState:
        """The state of the broker (or tool) running the policy."""


class StaticClusterState(ClusterState):
    """A cluster state from what the caller knows: some topics' states and the broker's configs."""

    def __init__(
        self,
        topics: Mapping[str, TopicState] | None = None,
        broker_configs: Mapping[str, str] | None = None,
        cluster_size: int | None = None,
    ) -> None:
        self._topics = dict(topics or {})
        self._broker = BrokerState(broker_configs or {})
        self._size = cluster_size

    def topic_state(self, topic: str) -> TopicState | None:
        return self._topics.get(topic)

    def topics(self, include_internal: bool = False, include_marked_for_deletion: bool = False) -> Set[str]:
        return frozenset(
            name
            for name, state in self._topics.items()
            if (include_internal or not state.internal)
            and (include_marked_for_deletion or not state.marked_for_deletion)
        )

    def cluster_size(self) -> int | None:
        return self._size

    def broker_state(self) -> BrokerState:
        return self._broker


@dataclass(frozen=True)
class CreateTopicRequest:
    topic: str
    requested_state: RequestedTopicState
    principal: str | None = None  # "User:alice", or None when not authenticated / not known


@dataclass(frozen=True)
class AlterTopicRequest:
    topic: str
    requested_state: RequestedTopicState
    principal: str | None = None


@dataclass(frozen=True)
class DeleteTopicRequest:
    topic: str
    principal: str | None = None


@dataclass(frozen=True)
class DeleteRecordsRequest:
    """Records before `deleted_message_offsets[partition]` are deleted (partitions left out keep theirs)."""

    topic: str
    deleted_message_offsets: Mapping[int, int] = field(default_factory=dict)
    principal: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "deleted_message_offsets", MappingProxyType(dict(self.deleted_message_offsets))
        )


class TopicManagementPolicy(abc.ABC):
    """One policy for topic creation, alteration and deletion and for record deletion (KIP-201).

    Each `validate_*` returns when the request is allowed and raises `PolicyViolationException` (message
    for the user) when it is not. Implementations must be thread-safe: the bridge serves requests
    concurrently. `configure` receives the broker's `rsm.config.*` keys (prefix stripped) once, before any
    request; `close` is called at shutdown.
    """

    def configure(self, configs: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """The broker's `rsm.config.*` settings (prefix stripped)."""

    @abc.abstractmethod
    def validate_create_topic(self, request: CreateTopicRequest, cluster_state: ClusterState) -> None:
        """Refuse (PolicyViolationException) a topic creation, or return."""

    @abc.abstractmethod
    def validate_alter_topic(self, request: AlterTopicRequest, cluster_state: ClusterState) -> None:
        """Refuse a change of an existing topic (its configs, here), or return."""

    @abc.abstractmethod
    def validate_delete_topic(self, request: DeleteTopicRequest, cluster_state: ClusterState) -> None:
        """Refuse a topic deletion, or return."""

    @abc.abstractmethod
    def validate_delete_records(self, request: DeleteRecordsRequest, cluster_state: ClusterState) -> None:
        """Refuse a deletion of records, or return."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (the broker is shutting down)."""


BROKER_KEYS_SHOWN = (
    "num.partitions",
    "default.replication.factor",
    "min.insync.replicas",
    "node.id",
    "broker.id",
)
_SECRET_MARKERS = ("password", "secret", "token", "credential", "jaas", "keystore", "truststore", ".key")


def broker_configs_for_policy(props: Mapping[str, str]) -> dict[str, str]:
    """The broker settings a policy sees (`BrokerState.configs`): Kafka's `log.*` topic defaults and a few
    cluster-wide settings, never anything that may hold a secret. The JVM plugin sends the same subset."""
    return {
        k: v
        for k, v in props.items()
        if (k.startswith("log.") or k in BROKER_KEYS_SHOWN)
        and not any(m in k.lower() for m in _SECRET_MARKERS)
    }


# loading the configured policy moved to rsm.policy.loading (it names the built-in policy, which uses this API)
__getattr__, __dir__ = moved_names(
    __name__, {"load_topic_policy": "rsm.policy.loading", "ConfigException": "rsm.api.errors"}
)
