"""What the store holds per topic, partition and location: the figures `rsm store du` shows.

Segment counts and stored bytes (the `.log` and `.indexes` objects as stored: what the RSM's
`object-upload-bytes` counts) come from one listing per location (a listing pages 1,000 keys, a
manifest is one GET per segment), and so do orphans: segment objects without a committed manifest (an
interrupted copy, a delete cut short) and temporary files of writes that never finished (the file store's
`.<name>.tmp-<hex>`): readers never see them, `rsm migrate gc` removes them.

Offsets and timestamps come from the manifests of each partition's first and last copies (by the base
offsets the keys carry): the first offset and the first timestamp (the earliest segment's integrity record:
its first batch's max timestamp, Kafka's `getFirstBatchTimestamp`; copies made before it was recorded have
none) from the first, the last offset and the last timestamp from the last (segments' max timestamps are
ordered, as Kafka's `offsetsForTimes` assumes). Key ids come from the encryption block of the manifests
read. ``every_manifest`` (`rsm store du --every-manifest`) reads every manifest instead: each copy's key id,
and the largest offset and timestamp whatever copy holds them.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from rsm.api.metadata import uuid_to_base64
from rsm.catalog.catalog import TopicCatalog
from rsm.catalog.keys import SegmentKey, parse_listing, topic_dir
from rsm.catalog.segments import StoredSegment, load_segment, map_concurrently
from rsm.store.layout import INDEXES_SUFFIX, LOG_SUFFIX, MANIFEST_SUFFIX, Location
from rsm.store.objects import ObjectInfo


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
    manifests_read: str = "every segment"

    def add(self, seg: StoredSegment, *, count: bool = True) -> None:
        """One copy's manifest; ``count=False``: its offsets, timestamps and key only (counted already
        from the listing)."""
        m = seg.manifest
        if count:
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
            "manifests_read": self.manifests_read,
            "orphans": len(self.orphans),
            "orphan_objects": list(self.orphans),
        }


def _orphans(base: str, listed: list[ObjectInfo], describe: Callable[[str], str]) -> dict[int, list[str]]:
    """Segment objects (`.log`, `.indexes`) whose stem has no manifest, and temporary files of unfinished
    writes, per partition, from a listing of a topic's directory (temporary files included)."""
    stems: dict[str, set[str]] = defaultdict(set)
    out: dict[int, list[str]] = defaultdict(list)
    for obj in listed:
        key = obj.key
        directory, _, name = key.rpartition("/")
        if ".tmp-" in name:  # `.<name>.tmp-<hex>`: a write that never finished (a killed copy)
            part = directory[len(base) :].split("/", 1)[0]
            if part.isdigit():
                out[int(part)].append(describe(key))
            continue
        for suffix in (LOG_SUFFIX, INDEXES_SUFFIX, MANIFEST_SUFFIX):
            if key.endswith(suffix):
                stems[key[: -len(suffix)]].add(suffix)
    for stem, suffixes in sorted(stems.items()):
        part = stem[len(base) :].split("/", 1)[0]
        if MANIFEST_SUFFIX not in suffixes and part.isdigit():
            out[int(part)] += [describe(stem + s) for s in sorted(suffixes)]
    return out


def _list_topic(catalog: TopicCatalog, location: Location, base: str) -> list[ObjectInfo]:
    """Everything under a topic's directory at one location, temporary files included: its partitions
    listed at once, page by page (each page within the store's deadline, however long the history)."""
    store = catalog.store
    if not store.ranged_listing:
        return store.list_objects(location.bucket, base, include_temporary=True)
    parts = store.list_dirs(location.bucket, base)

    def one(part: str) -> list[ObjectInfo]:
        return store.list_from(location.bucket, f"{base}{part}/", include_temporary=True)

    return [o for found in map_concurrently(one, parts) for o in found]


def _edges(keys: list[SegmentKey]) -> list[SegmentKey]:
    """The copies at a partition's first and last base offsets."""
    first, last = keys[0].base, keys[-1].base
    return [k for k in keys if k.base in (first, last)]


def topic_usage(catalog: TopicCatalog, topic: str, *, every_manifest: bool = False) -> list[PartitionUsage]:
    """One row per (topic id, partition, location) holding segments or orphans of the topic."""
    store = catalog.store
    rows: dict[tuple[uuid.UUID, int, Location], PartitionUsage] = {}
    for topic_id in sorted(catalog.topic_ids(topic), key=uuid_to_base64):
        tid = uuid_to_base64(topic_id)
        for location in catalog.locations(topic, topic_id):
            base = topic_dir(location, topic, topic_id)
            listed = _list_topic(catalog, location, base)
            for partition, keys in parse_listing(location, base, listed).items():
                row = rows.setdefault(
                    (topic_id, partition, location), PartitionUsage(topic, topic_id, partition, location)
                )
                wanted = keys if every_manifest else _edges(keys)
                segs = map_concurrently(
                    lambda k, t=tid: load_segment(store, topic, t, k.location, k.manifest_key),
                    wanted,
                )
                if every_manifest:
                    for seg in segs:
                        if seg is not None:
                            row.add(seg)
                    continue
                row.manifests_read = "first and last segments"
                row.segments += len(keys)
                row.bytes += sum(k.stored_bytes for k in keys)
                for seg in segs:
                    if seg is not None:
                        row.add(seg, count=False)

            def describe(key: str, bucket: str = location.bucket) -> str:
                return store.describe(bucket, key)

            for partition, objects in _orphans(base, listed, describe).items():
                key = (topic_id, partition, location)
                rows.setdefault(key, PartitionUsage(topic, topic_id, partition, location)).orphans += objects
    return sorted(
        rows.values(), key=lambda r: (r.topic, uuid_to_base64(r.topic_id), r.partition, str(r.location))
    )
