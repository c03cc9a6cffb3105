"""The RSM's own use of the topic policy: the last door before data reaches, or leaves, the store.

The broker asks the policy when a topic is created or its configs change, and `rsm topic-config` when an
overlay changes; but an overlay can also arrive by other ways (written by an older tool, adopted from a
pending overlay, a topic created on a broker without the policy classes), and today's brokers have no
policy hook for deleting topics or records at all. So the RSM asks too:

* before a copy, the topic's state as the copy will see it (its LogConfig, its overlay, and
  `remote.storage.enable=true`, since it is being tiered) goes through `validate_alter_topic`; a violation
  fails the copy with the policy's message (Kafka retries it later, the segment stays local), so a topic the
  policy requires to be encrypted is never tiered in the clear. Answers are cached per topic state for
  `topic.overlay.cache.ms`, so a copy costs a dictionary lookup;
* before deleting a tiered segment (retention, DeleteRecords, or the deletion of its topic: on Kafka 4.4
  they all end in `delete_log_segment_data`), `validate_delete_records`; a violation (a legal hold) fails
  the deletion and the segment is kept in the store.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from rsm.policy.api import (
    AlterTopicRequest,
    DeleteRecordsRequest,
    PolicyViolationException,
    RequestedTopicState,
    StaticClusterState,
    TopicManagementPolicy,
    TopicState,
)

__all__ = ["PolicyGate", "topic_configs"]

MAX_CACHED = 4096


def topic_configs(log_config: Mapping[str, str] | None, overlay: Mapping[str, str] | None) -> dict[str, str]:
    """One topic config map, as the policy sees topics: the overlay's keys under the LogConfig's (which win,
    as in `RsmConfig.resolve`)."""
    return {**dict(overlay or {}), **dict(log_config or {})}


class PolicyGate:
    """Asks `policy` before copies and deletions (module docstring)."""

    def __init__(
        self, policy: TopicManagementPolicy, ttl_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy
        self.ttl = ttl_ms / 1000.0
        self._clock = clock
        self._answers: dict[tuple[str, uuid.UUID, frozenset[tuple[str, str]]], tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def check_copy(
        self, tip: TopicIdPartition, log_config: Mapping[str, str] | None, overlay: Mapping[str, str] | None
    ) -> None:
        """ConfigException (a RemoteStorageException) with the policy's message when the topic may not be
        tiered as it is."""
        configs = {**topic_configs(log_config, overlay), "remote.storage.enable": "true"}
        key = (tip.topic, tip.topic_id, frozenset(configs.items()))
        now = self._clock()
        with self._lock:
            hit = self._answers.get(key)
        if hit is not None and now < hit[0]:
            message = hit[1]
        else:
            state = RequestedTopicState(
                configs=configs, requested_configs=dict(overlay or {}), topic_id=tip.topic_id
            )
            cluster = StaticClusterState({tip.topic: TopicState(configs=configs, topic_id=tip.topic_id)})
            try:
                self.policy.validate_alter_topic(AlterTopicRequest(tip.topic, state), cluster)
                message = None
            except PolicyViolationException as exc:
                message = str(exc)
            except Exception as exc:  # noqa: BLE001 - a broken policy refuses, never passes silently
                raise RemoteStorageException(
                    f"copy of {tip} refused: the topic policy failed: {type(exc).__name__}: {exc}"
                ) from exc
            if self.ttl > 0:
                with self._lock:
                    if len(self._answers) >= MAX_CACHED:
                        self._answers.clear()
                    self._answers[key] = (now + self.ttl, message)
        if message is not None:  # the topic's configuration is at fault: a ConfigException, as the RSM's own
            raise ConfigException(f"copy of {tip} to tiered storage refused: {message}")

    def check_delete(
        self,
        metadata: RemoteLogSegmentMetadata,
        log_config: Mapping[str, str] | None,
        overlay: Mapping[str, str] | None,
    ) -> None:
        """RemoteStorageException (the segment is kept) when the policy refuses deleting its records."""
        tip = metadata.topic_id_partition
        configs = topic_configs(log_config, overlay)
        request = DeleteRecordsRequest(tip.topic, {tip.partition: metadata.end_offset + 1})
        cluster = StaticClusterState({tip.topic: TopicState(configs=configs, topic_id=tip.topic_id)})
        try:
            self.policy.validate_delete_records(request, cluster)
        except PolicyViolationException as exc:
            raise RemoteStorageException(
                f"deletion of segment {metadata.remote_log_segment_id} refused, the segment is kept: {exc}"
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise RemoteStorageException(
                f"deletion of segment {metadata.remote_log_segment_id} refused, the segment is kept: the "
                f"topic policy failed: {type(exc).__name__}: {exc}"
            ) from exc
