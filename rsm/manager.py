"""The RemoteStorageManager: Kafka's contract (configure, copy, fetch, fetch index, delete, close).

The interface is Kafka's `RemoteStorageManager` in snake_case with the topic configs extension: every operation
receives the topic's LogConfig, whose `unchecked.rsm.*` keys choose bucket, prefix, encryption,
compression and chunk size (see `rsm.config.settings`).

Today's brokers refuse `unchecked.*` topic configs, so those keys also come from the topic's overlay in
the store (`rsm.store.overlays`, set with `rsm topic-config`, keyed by topic id, cached
`topic.overlay.cache.ms`): LogConfig keys win over the overlay, the overlay over the broker's
`rsm.config.*`. Only new copies read the settings: an existing segment is found through its custom
metadata (where it was written), so a changed bucket or prefix never orphans it.

This class is the contract and nothing else: it checks the arguments (`rsm.api.checks`) and hands each
operation to the module that does the job. `configure` decides the settings (`rsm.broker_settings`, one
immutable value) and builds the services they name (`rsm.services`: the store, the keyring, the policies, the
overlays, the location record); `rsm.state.RsmState` holds both, with the caches and threads that outlive a
reconfiguration, and each job takes the settings and services it uses:

- copy: `rsm.copy.pipeline` (check the whole segment, upload the `.log` and `.indexes`, the manifest last
  as the commit point, clean up on failure);
- fetch and fetch index: `rsm.fetch.segments` (manifests, forwards, chunk readers and their caches);
- delete: `rsm.store.deletion` (the manifest first, moved copies and forwards, unfinished writes).

Where segments are is recorded under the default location for readers without a broker: a copy records its
location before its first upload, and a fetch or delete records any other location it finds a segment in
(`rsm.store.location_notes`: after the default bucket or prefix changed, the older locations follow).
Every method is thread-safe; the bridge calls them from many threads at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import BinaryIO

from rsm import metrics
from rsm.api.checks import check_call, check_positions, check_segment_data, index_type_of
from rsm.api.errors import RemoteResourceNotFoundException
from rsm.api.metadata import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from rsm.config.settings import ConfigEntry, RsmConfig
from rsm.copy.pipeline import copy_segment
from rsm.fetch import segments
from rsm.fetch.reader import ChunkAllocator
from rsm.policy.api import TopicManagementPolicy
from rsm.policy.pending import PendingOverlayStore
from rsm.state import RsmState
from rsm.store.deletion import delete_segment
from rsm.store.objects import ObjectStore
from rsm.store.overlays import OverlayCache


class RemoteStorageManager:
    """Kafka's RemoteStorageManager in Python (see the module docstring)."""

    def __init__(self, store: ObjectStore | None = None) -> None:
        """`store` overrides the store built from the configuration (tests inject failing stores)."""
        self._state = RsmState(store)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, str]) -> None:
        """Take the broker's `rsm.config.*` keys (prefix stripped, as Kafka passes them)."""
        self._state.configure(configs)

    def close(self) -> None:
        self._state.close()

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what it was configured with -----------------------------------------------------------------------
    @property
    def config(self) -> RsmConfig:
        """The broker-level configuration; `config.describe(log_config)` answers effective values."""
        return self._state.config

    @property
    def store(self) -> ObjectStore:
        return self._state.store

    @property
    def overlays(self) -> OverlayCache:
        """The per-topic overlays (`rsm topic-config`) this RSM reads, cached `topic.overlay.cache.ms`."""
        return self._state.overlays

    @property
    def pending_overlays(self) -> PendingOverlayStore:
        """Settings of topics not created yet, adopted before their first copy (`rsm.policy.pending`)."""
        return self._state.services.pending

    @property
    def topic_policy(self) -> TopicManagementPolicy:
        """The topic management policy (`policy.class.name`, or the built-in one), configured like the RSM:
        the bridge answers the broker's policy classes with it, and copies and deletions ask it too."""
        return self._state.services.gate.policy

    @property
    def _metrics(self) -> metrics.RsmMetrics:
        """The recorder `metrics.counts_failures` counts this instance's failures with."""
        return self._state.metrics

    def topic_overlay(self, topic_id_partition: TopicIdPartition) -> Mapping[str, str]:
        """The topic's overlay keys (cached); RemoteStorageException if the store cannot be read."""
        return self._state.topic_overlay(topic_id_partition)

    def describe_topic_config(
        self, topic_id_partition: TopicIdPartition, log_config: Mapping[str, str] | None = None
    ) -> list[ConfigEntry]:
        """Every effective setting of a topic with its source (LogConfig, overlay, broker, default)."""
        self._state.check_open()
        return self.config.describe(log_config, self.topic_overlay(topic_id_partition))

    def validation_stats(self) -> dict[str, dict[str, int | float]]:
        """Record validation counters per topic since start: {topic: {segments, records, violations,
        refused, seconds}} (segments validated, records checked, records violating the policy, copies
        refused for violations, seconds spent decoding and in the policy)."""
        return self._state.validation_stats.snapshot()

    def set_chunk_allocator(self, allocate: ChunkAllocator | None) -> None:
        """Decode fetched chunks into buffers from ``allocate(size)`` (None from it: the heap as usual).

        Why: the bridge passes its shared-memory arena, so a chunk decoded for one fetch is cached where the
        broker can read it in place, with no copy between the processes.
        """
        self._state.allocate = allocate
        self._state.readers.clear()  # they decode with the allocator they were made with

    # -- the operations ----------------------------------------------------------------------------------
    @metrics.counts_failures("copy")
    def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment_data: LogSegmentData,
        log_config: Mapping[str, str] | None = None,
    ) -> CustomMetadata | None:
        """Upload a rolled segment and its indexes; returns where it went (<= 128 bytes)."""
        self._state.check_open()
        check_call(metadata, log_config)
        check_segment_data(segment_data)
        return copy_segment(self._state, metadata, segment_data, log_config)

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        log_config: Mapping[str, str] | None = None,
    ) -> BinaryIO:
        """A stream of the segment's bytes [start_position, end_position] (inclusive), fetched lazily.

        Its failures are counted where they happen (`rsm.fetch.segments`), not by a wrapper: this runs once
        per Kafka fetch, and a wrapper's frame cost more than the counting."""
        self._state.check_open()
        check_call(metadata, log_config)
        check_positions(metadata, start_position, end_position)
        return segments.fetch_log_segment(self._state, metadata, start_position, end_position, log_config)

    @metrics.counts_failures("index-fetch", expected=(RemoteResourceNotFoundException,))
    def fetch_index(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        log_config: Mapping[str, str] | None = None,
    ) -> BinaryIO:
        """A stream of one index file as the broker had it; missing optional index -> not found.

        `index_type` is an IndexType or its name (`"OFFSET"`), as the bridge passes Kafka's enum.
        """
        self._state.check_open()
        check_call(metadata, log_config)
        return segments.fetch_index(self._state, metadata, index_type_of(metadata, index_type), log_config)

    @metrics.counts_failures("delete")
    def delete_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None = None
    ) -> None:
        """Remove the segment's objects, the manifest first so readers never see a half-deleted segment, then
        whatever unfinished writes of them left (`rsm.store.deletion`)."""
        self._state.check_open()
        check_call(metadata, log_config)
        delete_segment(self._state, metadata, log_config)
