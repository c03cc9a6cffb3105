"""What the store holds per topic, partition and location: the figures `rsm store du` shows.

Everything comes from listings and manifests: segment counts, stored bytes (the `.log` and `.indexes`
objects as stored: what the RSM's `object-upload-bytes` counts), offsets and the last timestamp from the
manifests' copy of the segment metadata, the first timestamp from the earliest segment's integrity record
(its first batch's max timestamp, Kafka's `getFirstBatchTimestamp`; copies made before it was recorded have
none), key ids from their encryption block. Orphans are segment objects without a committed manifest (an
interrupted copy, a delete cut short) and temporary files of writes that never finished (the file store's
`.<name>.tmp-<hex>`): readers never see them, `rsm migrate gc` removes them.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from rsm.api.metadata import uuid_to_base64
from rsm.catalog.catalog import TopicCatalog
from rsm.catalog.segments import StoredSegment
from rsm.store.layout import INDEXES_SUFFIX, LOG_SUFFIX, MANIFEST_SUFFIX, Location


@dataclass
class PartitionUsage:
    topic: str
    topic_id: uuid.UUID
    partition: int
    location: Location
    segments: int = 0
    bytes: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    first_timestamp: int | None = None
    last_timestamp: int | None = None
    key_ids: set[str] = field(default_factory=set)
    orphans: list[str] = field(default_factory=list)

    def add(self, seg: StoredSegment) -> None:
        m = seg.manifest
        self.segments += 1
        self.bytes += m.stored_bytes
        if self.first_offset is None or seg.start_offset < self.first_offset:
            self.first_offset = seg.start_offset
            first_ts = m.integrity.get("first_batch_timestamp_ms", -1)
            self.first_timestamp = first_ts if first_ts >= 0 else None
        self.last_offset = (
            seg.end_offset if self.last_offset is None else max(self.last_offset, seg.end_offset)
        )
        ts = seg.max_timestamp_ms
        self.last_timestamp = ts if self.last_timestamp is None else max(self.last_timestamp, ts)
        if m.encryption is not None:
            self.key_ids.add(m.encryption.key_id)

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "topic_id": uuid_to_base64(self.topic_id),
            "partition": self.partition,
            "location": str(self.location),
            "bucket": self.location.bucket,
            "prefix": self.location.prefix,
            "segments": self.segments,
            "bytes": self.bytes,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "key_ids": sorted(self.key_ids),
            "orphans": len(self.orphans),
            "orphan_objects": list(self.orphans),
        }


def _orphans(
    catalog: TopicCatalog, topic: str, topic_id: uuid.UUID, location: Location
) -> dict[int, list[str]]:
    """Segment objects (`.log`, `.indexes`) whose stem has no manifest, and temporary files of unfinished
    writes, per partition."""
    base = f"{location.prefix}{topic}-{uuid_to_base64(topic_id)}/"
    stems: dict[str, set[str]] = defaultdict(set)
    out: dict[int, list[str]] = defaultdict(list)
    for key in catalog.store.list(location.bucket, base, include_temporary=True):
        directory, _, name = key.rpartition("/")
        if ".tmp-" in name:  # `.<name>.tmp-<hex>`: a write that never finished (a killed copy)
            part = directory[len(base) :].split("/", 1)[0]
            if part.isdigit():
                out[int(part)].append(catalog.store.describe(location.bucket, key))
            continue
        for suffix in (LOG_SUFFIX, INDEXES_SUFFIX, MANIFEST_SUFFIX):
            if key.endswith(suffix):
                stems[key[: -len(suffix)]].add(suffix)
    for stem, suffixes in sorted(stems.items()):
        part = stem[len(base) :].split("/", 1)[0]
        if MANIFEST_SUFFIX not in suffixes and part.isdigit():
            out[int(part)] += [catalog.store.describe(location.bucket, stem + s) for s in sorted(suffixes)]
    return out


def topic_usage(catalog: TopicCatalog, topic: str) -> list[PartitionUsage]:
    """One row per (topic id, partition, location) holding segments or orphans of the topic."""
    rows: dict[tuple[uuid.UUID, int, Location], PartitionUsage] = {}
    for topic_id in sorted(catalog.topic_ids(topic), key=uuid_to_base64):
        locations = catalog.locations(topic, topic_id)
        for seg in catalog.segments(topic, topic_id):
            key = (topic_id, seg.partition, seg.location)
            rows.setdefault(key, PartitionUsage(topic, topic_id, seg.partition, seg.location)).add(seg)
        for location in locations:
            for partition, objects in _orphans(catalog, topic, topic_id, location).items():
                key = (topic_id, partition, location)
                rows.setdefault(key, PartitionUsage(topic, topic_id, partition, location)).orphans += objects
    return sorted(
        rows.values(), key=lambda r: (r.topic, uuid_to_base64(r.topic_id), r.partition, str(r.location))
    )
