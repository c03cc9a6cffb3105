"""The delete: a segment's objects out of the store, the manifest first, wherever copies and forwards are.

The manifest goes first so readers never see a half-deleted segment; then the `.log` and `.indexes`, the
objects at every location `rsm migrate move` left a forward to, the forwards last (a delete cut short and
retried still finds whatever the first attempt left), and whatever unfinished writes of the segment left
(`rsm.store.debris`). Why the leftovers too: Kafka deletes a segment whose copy never finished (a broker or
bridge killed mid-copy) through this call, and nothing else would ever find its temporary files or
incomplete multipart uploads. A failure to remove them fails the delete, so Kafka retries it. A legal hold
(`rsm.policy.enforce`) keeps the segment. Before anything is removed, the partition's log-start mark is
raised past the segment (`rsm.store.log_starts`): readers without a broker tell retention from a hole by it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from rsm.api.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from rsm.api.names import topic_problem
from rsm.store import forward
from rsm.store.debris import remove_segment_leftovers
from rsm.store.errors import StoreErrors
from rsm.store.layout import Location, SegmentKeys
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.forward import SegmentRef

if TYPE_CHECKING:
    from rsm.metrics import RsmMetrics
    from rsm.store.location_notes import LocationNotes

log = logging.getLogger("rsm.manager")  # the delete's line, under the name operators' filters know


class DeleteGate(Protocol):
    """The topic management policy's say on a delete (`rsm.policy.enforce.PolicyGate`): a legal hold raises
    RemoteStorageException and the segment is kept."""

    def check_delete(
        self,
        metadata: RemoteLogSegmentMetadata,
        log_config: Mapping[str, str] | None,
        overlay: Mapping[str, str] | None,
    ) -> None: ...


class DeletionServices(Protocol):
    """The configured services the delete uses (`rsm.services.RsmServices` has them)."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def gate(self) -> DeleteGate: ...

    @property
    def registry(self) -> LocationRegistry: ...

    @property
    def notes(self) -> LocationNotes: ...


class DeletionState(Protocol):
    """What the delete uses of the manager's state. `rsm.state.RsmState` has all of it; it is named here, not
    imported, because the state and its services are built on this package (the import would be a circle)."""

    metrics: RsmMetrics
    registry_warned: bool

    @property
    def services(self) -> DeletionServices: ...

    def location(
        self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
    ) -> Location: ...

    def forget(self, keys: SegmentKeys) -> None: ...

    def topic_overlay(self, topic_id_partition: TopicIdPartition) -> Mapping[str, str]: ...


def delete_segment(
    state: DeletionState, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
) -> None:
    """Remove the segment's objects, the manifest first so readers never see a half-deleted segment, then
    whatever unfinished writes of them left (`rsm.store.debris`).

    Why the leftovers too: Kafka deletes a segment whose copy never finished (a broker or bridge killed
    mid-copy) through this call, and nothing else would ever find its temporary files or incomplete
    multipart uploads. A failure to remove them fails the delete, so Kafka retries it.
    """
    services = state.services
    store = services.store
    # a legal hold keeps the segment (rsm.policy.enforce)
    services.gate.check_delete(metadata, log_config, _delete_overlay(state, metadata.topic_id_partition))
    started = time.monotonic()
    location = state.location(metadata, log_config)
    keys = SegmentKeys.of(location, metadata)
    # a copy that never finished moves no log start
    if _was_committed(store, metadata, keys) and _note_log_start(
        services.registry, metadata, state.registry_warned
    ):
        state.registry_warned = True
    state.forget(keys)
    # the topic's other segments there stay findable (rsm.store.location_notes)
    services.notes.deleted(metadata, [location])
    for key in keys.all():
        with StoreErrors(store, "delete", metadata, keys.bucket, key):
            store.delete(keys.bucket, key)
    _delete_moved(store, state.forget, metadata, keys)
    with StoreErrors(store, "removal of unfinished writes", metadata, keys.bucket, keys.stem):
        remove_segment_leftovers(store, keys.bucket, keys.stem)
    elapsed = time.monotonic() - started
    seg = metadata.remote_log_segment_id
    tip = seg.topic_id_partition
    state.metrics.deleted(tip.topic, tip.partition, metadata.segment_size_in_bytes, elapsed)
    log.info(
        "deleted segment topic=%s partition=%d segment=%s offsets=%d..%d bytes=%d time_ms=%d location=%s",
        tip.topic,
        tip.partition,
        seg.id_base64,
        metadata.start_offset,
        metadata.end_offset,
        metadata.segment_size_in_bytes,
        round(elapsed * 1000),
        store.describe(keys.bucket, keys.stem),
    )


def _was_committed(store: ObjectStore, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys) -> bool:
    """Whether the segment being deleted held offsets of the log: one Kafka saw copied (retention), or one
    whose copy Kafka never saw finish but that was committed here (its manifest, or a move's forward).
    Kafka also deletes the copies that failed: they hold no offsets and must not raise the log-start mark."""
    if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        return True
    ref = SegmentRef.of(metadata)
    with StoreErrors(store, "manifest check", metadata, keys.bucket, keys.manifest):
        return store.exists(keys.bucket, keys.manifest) or store.exists(
            keys.bucket, ref.forward_key(keys.location)
        )


def _note_log_start(registry: LocationRegistry, metadata: RemoteLogSegmentMetadata, warned: bool) -> bool:
    """Raise the partition's log-start mark past the segment, before anything is deleted: a mark that ran
    ahead of a delete cut short hides nothing that is gone, while one behind it would have readers call
    retention a hole. A failure fails the delete (Kafka retries it); a record location whose bucket does
    not exist has no record to keep (said once, as the copy says it: True when said now, `warned`: said
    already)."""
    tip = metadata.topic_id_partition
    if topic_problem(tip.topic):
        return False  # a name Kafka refuses (only a forged value gets here): the store refuses its keys below
    with StoreErrors(registry.store, "log-start mark", metadata, registry.bucket, registry.prefix):
        try:
            registry.note_log_start(tip.topic, tip.topic_id, tip.partition, metadata.end_offset + 1)
        except (ObjectNotFound, FileNotFoundError):
            if not warned:
                log.warning(
                    "the default location %s does not exist, so deletes are not recorded there; readers "
                    "without a broker cannot tell a hole at a partition's start from retention",
                    registry.describe(),
                )
                return True
    return False


def sweep_leftovers(store: ObjectStore, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys) -> None:
    """Remove the segment's unfinished writes at the end of a copy; a failure only warns: the copy's
    outcome stands, and `delete_log_segment_data` (or `rsm migrate gc`) tries again later."""
    try:
        with StoreErrors(store, "removal of unfinished writes", metadata, keys.bucket, keys.stem):
            remove_segment_leftovers(store, keys.bucket, keys.stem)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("%s", exc)


def _delete_overlay(state: DeletionState, tip: TopicIdPartition) -> Mapping[str, str]:
    """The overlay a deletion's legal-hold check reads. A topic name Kafka refuses (only a forged value
    gets here) can have no overlay: the store refuses its keys just below, naming them."""
    if topic_problem(tip.topic):
        return {}
    return state.topic_overlay(tip)


def _delete_moved(
    store: ObjectStore,
    forget: Callable[[SegmentKeys], None],
    metadata: RemoteLogSegmentMetadata,
    keys: SegmentKeys,
) -> None:
    """After the segment's own objects: its objects at every location forwards lead to from there
    (`rsm migrate move`), then the forwards themselves, last, so a delete cut short and retried still
    finds whatever the first attempt left (`rsm.store.forward`). `forget`: drops a copy's cached manifest."""
    ref = SegmentRef.of(metadata)
    with StoreErrors(store, "forward read", metadata, keys.bucket, ref.forward_key(keys.location)):
        hops = forward.chain(store, keys.location, ref)
    for location in hops:
        moved = SegmentKeys.of(location, metadata)
        forget(moved)
        for key in moved.all():
            with StoreErrors(store, "delete", metadata, moved.bucket, key):
                store.delete(moved.bucket, key)
    for location in [keys.location, *hops] if hops else []:
        with StoreErrors(store, "delete", metadata, location.bucket, ref.forward_key(location)):
            store.delete(location.bucket, ref.forward_key(location))
