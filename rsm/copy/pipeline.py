"""The copy: a rolled segment and its indexes into the store, the manifest last, as one commit.

In order, so that nothing a reader can mistake for a segment reaches the store:
1. resolve the topic's settings and the location; ask the topic policy about the topic's state (a violation
   refuses the copy: `rsm.policy.enforce`); encode the custom metadata (refused if over 128 bytes);
2. read the whole segment once, checking every batch, computing a CRC-32C per chunk and noting which chunks
   are mostly already-compressed batches; run the topic's record validation policy (`rsm.copy.checks`);
3. record the location for readers without a broker; delete a manifest left by an earlier attempt with the
   same segment id (so readers see "missing", never a mix of two attempts), then stream the `.log` object
   chunk by chunk and the `.indexes` object (`rsm.copy.upload`);
4. write the manifest: the commit point. On failure, every object of the segment is removed (best effort;
   a write whose answer was lost may have landed; within what is left of the copy's budget,
   `copy.timeout.ms`: `rsm.copy.cleanup`) and a `RemoteStorageException` names the topic-partition, the
   segment and the object;
5. failed or not, remove what unfinished writes of the segment's keys left (`rsm.store.debris`): temporary
   files or multipart uploads of this attempt or of an earlier one killed mid-copy.

Memory during a copy is bounded by a few chunks plus the S3 part buffer, whatever the segment size.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from rsm.api.errors import ConfigException
from rsm.api.log_config import LogConfig
from rsm.api.metadata import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from rsm.config.kms import is_kms_key
from rsm.config.settings import TopicSettings
from rsm.copy.checks import verify_segment
from rsm.copy.cleanup import remove_failed_copy
from rsm.copy.downgrade import guard_copy
from rsm.copy.upload import upload_indexes, upload_log
from rsm.store.deadlines import Budget, within
from rsm.store.deletion import sweep_leftovers
from rsm.store.errors import StoreErrors
from rsm.store.first_copy import starts_the_log
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.store.overlays import named_buckets
from rsm.stored import custom_metadata as cm
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import Encryption, Manifest, SegmentInfo

if TYPE_CHECKING:
    from rsm.broker_settings import RsmSettings
    from rsm.config.keyring import Keyring
    from rsm.metrics import RsmMetrics
    from rsm.services import RsmServices
    from rsm.validation.records import ValidationStats

log = logging.getLogger("rsm.manager")  # the copy's line, under the name operators' filters know


class CopyState(Protocol):
    """What the copy uses of the manager's state: the configured settings and services, the topic's overlay,
    and what outlives a reconfiguration (counters, memos, what was said once). `rsm.state.RsmState` has all
    of it; it is named here, not imported, because the state sits above the jobs it hands itself to."""

    metrics: RsmMetrics
    validation_stats: ValidationStats
    known_topics: set[uuid.UUID]  # topic ids the catalog home was found to know (`rsm.copy.downgrade`)
    registry_warned: bool

    @property
    def broker_settings(self) -> RsmSettings: ...

    def configured(self) -> tuple[RsmSettings, RsmServices]: ...

    def topic_overlay(self, topic_id_partition: TopicIdPartition) -> Mapping[str, str]: ...

    def forget(self, keys: SegmentKeys) -> None: ...


def copy_segment(
    state: CopyState,
    metadata: RemoteLogSegmentMetadata,
    segment_data: LogSegmentData,
    log_config: Mapping[str, str] | None,
) -> CustomMetadata:
    """Upload a rolled segment and its indexes (see the module docstring); returns where it went. The
    whole copy, its clean-up on failure included, runs within `copy.timeout.ms` (`rsm.copy.cleanup`)."""
    seconds = state.broker_settings.copy_timeout_s
    with within(Budget.starting_now(seconds, "copy.timeout.ms")):
        return _copy(state, metadata, segment_data, log_config)


def _copy(
    state: CopyState,
    metadata: RemoteLogSegmentMetadata,
    segment_data: LogSegmentData,
    log_config: Mapping[str, str] | None,
) -> CustomMetadata:
    broker, services = state.configured()
    store = services.store
    seg = metadata.remote_log_segment_id
    overlay = state.topic_overlay(seg.topic_id_partition)
    settings = broker.config.resolve(log_config if log_config is not None else LogConfig(), overlay)
    services.gate.check_copy(seg.topic_id_partition, log_config, overlay)
    location = Location(settings.bucket, settings.prefix)
    custom = cm.encode(location)
    keys = SegmentKeys.of(location, metadata)
    key_id = _key_id(broker, services.keyring, seg.topic_id_partition.topic, settings)
    # no silent downgrade: the home in use, the topic's past known to it, encryption weakened only on purpose
    guard_copy(services, state.known_topics, metadata, segment_data, settings, warned=state.registry_warned)
    started = time.monotonic()

    # 1. check the whole segment (batches, indexes, the topic's record policy) before anything is uploaded
    summary, chunk_crcs, validation = verify_segment(
        metadata, segment_data, settings,
        policy=services.record_policy, stats=state.validation_stats, metrics=state.metrics,
    )  # fmt: skip

    # 2. transform and upload, manifest last
    cipher = None
    encryption = None
    if key_id is not None:
        assert services.keyring is not None
        with StoreErrors(store, "data key", metadata, keys.bucket, keys.manifest):  # KMS's GenerateDataKey
            data_key, wrapped = services.keyring.new_data_key(key_id, seg.id.bytes)
        cipher = SegmentCipher(data_key, seg.id)
        encryption = Encryption(key_id, wrapped)
    if _record_location(
        services, broker.data_default, metadata, segment_data, location, state.registry_warned
    ):
        state.registry_warned = True
    with StoreErrors(store, "removal of an earlier attempt's manifest", metadata, keys.bucket, keys.manifest):
        store.delete(keys.bucket, keys.manifest)
    state.forget(keys)
    try:
        chunk_index = upload_log(
            store, metadata, keys, segment_data.log_segment, settings, summary, chunk_crcs, cipher
        )
        index_entries = upload_indexes(store, metadata, keys, segment_data, settings, cipher)
        manifest = Manifest(
            copy_id=uuid.uuid4().hex,
            created_ms=int(time.time() * 1000),
            segment=SegmentInfo.of(metadata, txn_idx_empty=IndexType.TRANSACTION not in index_entries),
            location={
                "bucket": keys.bucket,
                "prefix": location.prefix,
                "log": keys.log,
                "indexes": keys.indexes,
            },
            encryption=encryption,
            log=chunk_index,
            indexes=index_entries,
            integrity=summary.manifest_record(),
            validation=validation,
        )
        with StoreErrors(store, "manifest write", metadata, keys.bucket, keys.manifest):
            store.put(keys.bucket, keys.manifest, manifest.to_bytes(cipher))
    except BaseException:
        remove_failed_copy(store, metadata, keys)  # within what is left of the budget (rsm.copy.cleanup)
        raise
    # a botocore retry of CreateMultipartUpload whose first answer was lost leaves an upload nobody
    # completes, and an earlier attempt killed mid-copy leaves its own: both are this segment's
    sweep_leftovers(store, metadata, keys)
    stored = chunk_index.stored_size + sum(e.stored_size for e in index_entries.values())
    _say_copied(state.metrics, store, metadata, keys, summary.size, stored, chunk_index.count,
                time.monotonic() - started, key_id, validation)  # fmt: skip
    return custom


def _key_id(broker: RsmSettings, keyring: Keyring | None, topic: str, settings: TopicSettings) -> str | None:
    """The key id wrapping the segment's data key (None: not encrypted); ConfigException when the topic
    asks for encryption the configuration cannot give, or refuses what it would write."""
    if not settings.encryption_enabled:
        if broker.require_authenticated:
            raise ConfigException(
                f"topic {topic} is not encrypted, but manifest.require.authenticated=true "
                "would refuse to fetch its segments"
            )
        return None
    key_id = settings.encryption_key_id
    if keyring is None or (not is_kms_key(key_id) and keyring.path is None and not keyring.key_ids()):
        raise ConfigException(
            f"topic {topic} asks for encryption but no keyring is configured "
            "(encryption.keyring.path) and its key id is not a KMS key (kms:...)"
        )
    if not key_id:
        raise ConfigException(
            f"topic {topic} asks for encryption but no key id is set "
            "(unchecked.rsm.encryption.key.id, its topic overlay, or encryption.key.id)"
        )
    if key_id not in keyring:
        raise ConfigException(f"topic {topic}: encryption key id {key_id!r} is not in the keyring")
    return key_id


def _say_copied(
    recorder: RsmMetrics,
    store: ObjectStore,
    metadata: RemoteLogSegmentMetadata,
    keys: SegmentKeys,
    size: int,
    stored: int,
    chunks: int,
    elapsed: float,
    key_id: str | None,
    validation: Mapping[str, object] | None,
) -> None:
    """The copy's metrics and its one line, the same fields as the delete's, to search for (never one per
    fetch at INFO)."""
    seg = metadata.remote_log_segment_id
    tip = seg.topic_id_partition
    recorder.copied(tip.topic, tip.partition, size, stored, 3, elapsed)
    log.info(
        "copied segment topic=%s partition=%d segment=%s offsets=%d..%d bytes=%d stored_bytes=%d "
        "chunks=%d time_ms=%d location=%s key_id=%s%s",
        tip.topic,
        tip.partition,
        seg.id_base64,
        metadata.start_offset,
        metadata.end_offset,
        size,
        stored,
        chunks,
        round(elapsed * 1000),
        store.describe(keys.bucket, keys.stem),
        key_id or "-",
        ""
        if validation is None
        else f" validated_records={validation['records']} violations={validation['violation_count']}",
    )


def _record_location(
    services: RsmServices,
    default: Location,
    metadata: RemoteLogSegmentMetadata,
    segment_data: LogSegmentData,
    location: Location,
    warned: bool,
) -> bool:
    """Readers without a broker find a topic's segments through this record (`rsm.store.locations`); the
    first copy of a partition's log may vouch for it whole (`rsm.store.first_copy`). `default`: the
    broker's default location; True when it said (`warned`: said already) that the record's bucket is
    missing."""
    seg = metadata.remote_log_segment_id
    registry, notes = services.registry, services.notes

    def scanned_buckets() -> list[str]:  # what a reader's scan would list, and this copy's bucket
        overlays = services.overlays.overlays.list()  # the overlay store beside the record
        return named_buckets(default, overlays, location.bucket)

    try:  # a store recorded from its first segment: readers then never scan it (rsm.store.locations)
        registry.mark_scanned_if_fresh(scanned_buckets)
    except Exception as exc:  # noqa: BLE001 - what spares readers a scan must never fail Kafka's copy
        log.warning(
            "could not tell whether %s was recorded from its first segment (readers scan instead): %s: %s",
            registry.describe(), type(exc).__name__, exc,
        )  # fmt: skip
    with StoreErrors(services.store, "location record", metadata, registry.bucket, registry.prefix):
        try:
            tip = seg.topic_id_partition
            wrote = registry.record(tip.topic, tip.topic_id, location)
            if wrote and starts_the_log(metadata.start_offset, segment_data.leader_epoch_index):
                notes.first_copy(tip.topic, tip.topic_id, scanned_buckets)
        except (ObjectNotFound, FileNotFoundError):
            # no default bucket (every topic names its own): the copy goes on, readers scan instead
            if not warned:
                log.warning(
                    "the default location %s does not exist, so topics' locations are not recorded there; "
                    "readers without a broker find segments by listing the buckets they are told about",
                    services.store.describe(registry.bucket, registry.prefix),
                )
                return True
    return False
