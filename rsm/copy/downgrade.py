"""No silent downgrade: a copy never writes a topic's segment in plaintext, or under another key, by accident.

A topic's encryption is a setting that can vanish: its overlay lives in the store (`rsm.store.overlays`), and
when that document cannot be read, or is no longer where the broker looks (the default `bucket` changed,
so the catalog home moved with it: `rsm.store.home`), the broker's defaults apply. Left alone, the next
segments of an encrypted topic would go out in plaintext. Three checks, before anything is written:

1. **The home is the one in use**: not moved away, not half filled by a move (`CatalogHome.check`).
2. **The home knows the topic, when the topic has a past.** Kafka copies a partition's segments in offset
   order and hands each copy the leader-epoch checkpoint from the log's start offset (its first entry
   starts there). A segment starting after that offset therefore has earlier offsets that were tiered
   already, by some RSM, somewhere. If the home records nothing of the topic (no location entry, no
   overlay, no encryption memory) and no segment of the partition lies where this copy goes, those
   segments, and the documents that went with them, are elsewhere: the copy is refused with one line that
   names the procedure. A topic seen once is remembered for the process.
3. **Encryption only weakens on purpose.** The home keeps each topic's encryption memory
   (`rsm.store.topic_encryption`), written by the copy when it changes.
   A topic whose last copies were encrypted is not copied in plaintext unless a setting says so at the same
   level or above: `unchecked.rsm.encryption.enabled=false` on the topic when a topic-level setting turned it
   on, or explicitly in the broker's properties when the broker's did (a default is never enough). A key
   chosen at the topic level is not replaced by the broker's default key. Rotating the broker's default key
   for topics that never chose their own is fine. A memory that cannot be read fails the copy, as an
   overlay that cannot be read does: neither is ever taken as absent.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.metadata import LogSegmentData, RemoteLogSegmentMetadata, to_uuid, uuid_to_base64
from rsm.config.settings import ConfigSource, TopicSettings
from rsm.store.errors import safe_message
from rsm.store.home import PROCEDURE
from rsm.store.layout import Location, partition_dir
from rsm.store.objects import ObjectNotFound
from rsm.stored.topic_encryption import EncryptionState
from segment_format.errors import CorruptRecordError
from segment_format.leader_epoch import LeaderEpochCheckpoint

if TYPE_CHECKING:
    from rsm.services import RsmServices

log = logging.getLogger(__name__)

TOPIC_LEVEL = frozenset({ConfigSource.TOPIC_UNCHECKED, ConfigSource.TOPIC_OVERLAY, ConfigSource.TOPIC})

__all__ = ["guard_copy"]


def _earlier_start(metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> int | None:
    """The log's start offset when it lies before this segment (earlier offsets were tiered), else None."""
    try:
        checkpoint = LeaderEpochCheckpoint.from_bytes(segment_data.leader_epoch_index)
    except CorruptRecordError:
        return None  # the copy's own checks name a bad checkpoint
    if not checkpoint.entries:
        return None
    first = checkpoint.entries[0].start_offset
    return first if 0 <= first < metadata.start_offset else None


def _topic_known(
    services: RsmServices, topic: str, topic_id: uuid.UUID, partition: int, location: Location
) -> bool:
    """Whether the catalog home (or the copy's own location) holds anything of this topic id beside its
    encryption memory (which the caller has read already)."""
    if services.registry.locations(topic, topic_id) or services.overlays.configs(topic, topic_id):
        return True
    # a store written before location records: the partition's earlier segments where this one goes
    found = services.store.list_from(
        location.bucket, partition_dir(location.prefix, topic, topic_id, partition), limit=1
    )
    return bool(found)


def _wanted(settings: TopicSettings) -> EncryptionState:
    if not settings.encryption_enabled:
        return EncryptionState(None, settings.encryption_setting, settings.encryption_source in TOPIC_LEVEL)
    return EncryptionState(
        settings.encryption_key_id, settings.key_setting, settings.key_source in TOPIC_LEVEL
    )


def guard_copy(
    services: RsmServices,
    known: set[uuid.UUID],
    metadata: RemoteLogSegmentMetadata,
    segment_data: LogSegmentData,
    settings: TopicSettings,
    *,
    warned: bool = False,
) -> None:
    """Refuse a copy that would silently downgrade the topic (see the module docstring); remember the
    topic's encryption when it changes. Runs before anything of the segment is written. `known`: the topic
    ids the catalog home was found to know (added to); `warned`: a missing default location was said."""
    home, memory = services.home, services.encryption_memory
    seg = metadata.remote_log_segment_id
    tip = seg.topic_id_partition
    topic, tid = tip.topic, to_uuid(tip.topic_id)
    location = Location(settings.bucket, settings.prefix)
    what = f"{tip} segment {seg.id_base64}"
    try:
        home.check()
        prior = memory.read(topic, tid)
        earlier = _earlier_start(metadata, segment_data)
        if earlier is not None and tid not in known:
            if prior is None and not _topic_known(services, topic, tid, tip.partition, location):
                raise ConfigException(
                    f"copy of {what} refused: its offsets {earlier}..{metadata.start_offset - 1} were tiered "
                    f"already, but the catalog at {home.describe()} knows nothing of topic {topic} "
                    f"({uuid_to_base64(tid)}): was bucket or prefix changed without catalog.bucket / "
                    f"catalog.prefix? Keep the catalog where it was ({PROCEDURE})"
                )
            known.add(tid)
    except ConfigException:
        raise
    except Exception as exc:  # noqa: BLE001 - a store failure fails the copy, never reads as "nothing there"
        raise RemoteStorageException(
            f"copy of {what} refused: cannot read the catalog at {home.describe()}: "
            f"{type(exc).__name__}: {safe_message(exc)}"
        ) from exc
    wanted = _wanted(settings)
    if prior is not None and prior.key_id is not None:
        if wanted.key_id is None:
            explicit = wanted.topic_level or (
                not prior.topic_level and settings.encryption_source is ConfigSource.BROKER
            )
            if not explicit:
                needed = (
                    "unchecked.rsm.encryption.enabled=false on the topic"
                    if prior.topic_level
                    else ("encryption.enabled=false in the broker's properties, or on the topic")
                )
                raise ConfigException(
                    f"copy of {what} refused: topic {topic} was encrypted under key {prior.key_id} "
                    f"(chosen by {prior.setting}) and encryption.enabled now resolves to false from "
                    f"{_source_name(settings.encryption_source, settings.encryption_setting)}: "
                    f"restore the topic's overlay, or set {needed} to turn encryption off"
                )
        elif wanted.key_id != prior.key_id and prior.topic_level and not wanted.topic_level:
            raise ConfigException(
                f"copy of {what} refused: topic {topic} was encrypted under its own key {prior.key_id} "
                f"({prior.setting}) and would now use {wanted.key_id} from "
                f"{_source_name(settings.key_source, settings.key_setting)}: restore the topic's overlay, "
                "or set unchecked.rsm.encryption.key.id on the topic"
            )
    if wanted != prior and (prior is not None or wanted.key_id is not None):
        try:
            memory.write(topic, tid, wanted)
        except (ObjectNotFound, FileNotFoundError):
            # no catalog bucket at all (every topic names its own, so no overlay can exist either): the copy
            # goes on as it does without a location record (rsm.copy.pipeline), and says so once
            if not warned:
                log.warning(
                    "the catalog home %s does not exist: topics' encryption is not remembered there",
                    home.describe(),
                )
        except Exception as exc:  # noqa: BLE001 - nothing is written before the topic's memory is
            raise RemoteStorageException(
                f"copy of {what} refused: cannot write the topic's encryption memory "
                f"{memory.describe(topic, tid)}: {type(exc).__name__}: {safe_message(exc)}"
            ) from exc


def _source_name(source: ConfigSource, setting: str) -> str:
    if source is ConfigSource.DEFAULT:
        return f"the built-in default of {setting}"
    if source is ConfigSource.BROKER:
        return f"the broker's {setting}"
    return setting
