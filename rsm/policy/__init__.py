"""The topic management policy (KIP-108, KIP-201, KIP-525's dry runs): the API (`api`), the built-in rules (`builtin`), loading the configured one (`loading`),
settings written before a topic exists (`pending`) and the RSM's own use of the policy (`enforce`)."""

from rsm.policy.api import (
    AlterTopicRequest,
    BrokerState,
    ClusterState,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    PolicyViolationException,
    RequestedTopicState,
    StaticClusterState,
    TopicManagementPolicy,
    TopicState,
)
from rsm.policy.loading import load_topic_policy

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
    "load_topic_policy",
]
