"""The bridge operations behind the JVM plugin's policy classes: `validate_create_topic` (Kafka's
`CreateTopicPolicy`) and `validate_alter_config` (`AlterConfigPolicy`), answered by the RSM's own topic
management policy (`RemoteStorageManager.topic_policy`, `rsm.policy`), so the broker, `rsm topic-config`
and the RSM's copies all ask one policy.

The request carries what Kafka hands the policy class (see PROTOCOL.md, "Topic policy"); the topic's
overlay joins it here: the pending overlay of the name for a topic being created (`rsm.policy.pending`),
the topic id's overlay (adopting a pending one) for an existing topic. KRaft also asks the alter policy
about a new topic's configs, just before the create policy: when the plugin found that the topic does not
exist yet (`"exists": false`), that request is judged, and worded, as the creation it is. A refusal is an `ERROR` frame with
code `POLICY_VIOLATION` and the policy's message, which the plugin throws as Kafka's
`PolicyViolationException`; an accepted request answers the effective RSM settings (secrets masked).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rsm.bridge import values
from rsm.bridge.protocol import Op
from rsm.config.settings import ConfigEntry
from rsm.policy.api import (
    AlterTopicRequest,
    CreateTopicRequest,
    RequestedTopicState,
    StaticClusterState,
    TopicState,
)
from rsm.policy.enforce import topic_configs

log = logging.getLogger(__name__)

__all__ = ["policy_handlers"]


def _strings(header: Mapping[str, Any], name: str, *, nulls: bool = False) -> dict[str, Any]:
    obj = header.get(name)
    if obj is None:
        return {}
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and (isinstance(v, str) or (nulls and v is None)) for k, v in obj.items()
    ):
        raise ValueError(f"{name}: expected an object of string values")
    return dict(obj)


def _text(header: Mapping[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = header.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string")
    return value


def _count(header: Mapping[str, Any], name: str) -> int | None:
    value = header.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= -1):
        return None if value in (None, -1) else value
    raise ValueError(f"{name}: expected an integer or null")


def _assignments(header: Mapping[str, Any]) -> dict[int, tuple[int, ...]] | None:
    obj = header.get("replicas_assignments")
    if obj is None:
        return None
    try:
        return {int(p): tuple(int(b) for b in replicas) for p, replicas in dict(obj).items()}
    except (TypeError, ValueError):
        raise ValueError("replicas_assignments: expected an object of partition -> [broker ids]") from None


def _entry_json(e: ConfigEntry) -> dict[str, Any]:
    return {
        "name": e.name,
        "value": e.value,
        "source": e.source.value,
        "key": e.key,
        "sensitive": e.sensitive,
    }


class _Context:
    """The part of a RequestContext the operations read."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.header = header


class PolicyOps:
    """The two operations, over an RSM that has a topic policy and overlays (ours)."""

    def __init__(self, rsm: Any) -> None:
        self.rsm = rsm

    def validate_create_topic(self, ctx: Any) -> dict[str, Any]:
        h = ctx.header
        topic = str(_text(h, "topic"))
        requested = _strings(h, "configs")
        pending = self.rsm.pending_overlays.read(topic)
        overlay = dict(pending.configs) if pending is not None else {}
        # what Kafka hands over is the request's configs: an absent remote.storage.enable is Kafka's default
        asked = topic_configs(requested, overlay)
        state = RequestedTopicState(
            num_partitions=_count(h, "num_partitions"),
            replication_factor=_count(h, "replication_factor"),
            replicas_assignments=_assignments(h),
            configs={"remote.storage.enable": "false", **asked},
            requested_configs=asked,
        )
        cluster = StaticClusterState({}, _strings(h, "broker_configs"))
        request = CreateTopicRequest(topic, state, _text(h, "principal", optional=True))
        self.rsm.topic_policy.validate_create_topic(request, cluster)
        return {
            "topic": topic,
            "pending_overlay": self.rsm.pending_overlays.describe(topic) if pending is not None else None,
            "configs": [_entry_json(e) for e in self.rsm.config.describe(requested, overlay)],
        }

    def validate_alter_config(self, ctx: Any) -> dict[str, Any]:
        h = ctx.header
        if h.get("resource_type") != "TOPIC":
            return {}  # broker and other resources: not the topic policy's business
        topic = str(_text(h, "resource_name"))
        altered = _strings(h, "configs", nulls=True)
        if h.get("exists") is False:  # KRaft asks the alter policy for a new topic's configs: a creation
            requested = {k: v for k, v in altered.items() if v is not None}
            return self.validate_create_topic(_Context({**h, "topic": topic, "configs": requested}))
        current_kafka = h.get("current_configs")
        current = _strings(h, "current_configs")
        raw_id = _text(h, "topic_id", optional=True)
        if raw_id is not None:  # an existing topic: its overlay (a pending one is adopted now)
            topic_id = values.uuid_from_kafka(raw_id, "topic_id")
            overlay = dict(self.rsm.overlays.configs(topic, topic_id))
        else:  # being created (KRaft asks this policy for the new topic's configs too), or not known
            topic_id = None
            pending = self.rsm.pending_overlays.read(topic)
            overlay = dict(pending.configs) if pending is not None else {}
        before = topic_configs(current, overlay)
        after = dict(before)
        for key, value in altered.items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        state = RequestedTopicState(configs=after, requested_configs=altered, topic_id=topic_id)
        known = raw_id is not None or current_kafka is not None
        topics = {topic: TopicState(configs=before, topic_id=topic_id)} if known else {}
        cluster = StaticClusterState(topics, _strings(h, "broker_configs"))
        request = AlterTopicRequest(topic, state, _text(h, "principal", optional=True))
        self.rsm.topic_policy.validate_alter_topic(request, cluster)
        return {"topic": topic, "configs": [_entry_json(e) for e in self.rsm.config.describe(after)]}


def policy_handlers(rsm: Any) -> dict[str, Any]:
    """The ops for `BridgeServer(handlers=...)`; none for an RSM without a topic policy (a test double or
    another RSM class: the plugin then refuses, naming the missing operation)."""
    if not all(hasattr(type(rsm), name) for name in ("topic_policy", "pending_overlays", "overlays")):
        return {}
    ops = PolicyOps(rsm)
    return {
        Op.VALIDATE_CREATE_TOPIC: ops.validate_create_topic,
        Op.VALIDATE_ALTER_CONFIG: ops.validate_alter_config,
    }
