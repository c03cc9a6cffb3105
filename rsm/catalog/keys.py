"""A partition's committed segment copies as listings name them: base offset, segment id, sizes, no manifest.

Why: every key carries its copy's base offset (`rsm.store.layout`: `<20-digit base>-<segment id>.<ext>`,
so a listing sorts copies by offset), and a listing returns 1,000 keys a page with each object's size and
modification time. That is enough to tell which copies can hold a range of offsets, how many segments
and bytes a partition has, and which copy was committed last, before a single manifest is read. Planners
then read the manifests of the copies their range needs (`rsm.catalog.ranged`), not of the whole history.

A copy is committed when its manifest exists (written last); `.log` and `.indexes` sizes come along from
the same listing for `rsm store du`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from rsm.api.metadata import uuid_to_base64
from rsm.store.layout import INDEXES_SUFFIX, LOG_SUFFIX, MANIFEST_SUFFIX, OBJECT_NAME, Location
from rsm.store.objects import ObjectInfo, ObjectStore

UNPLACED = -1  # the base of a listed manifest whose name does not carry one


@dataclass(frozen=True)
class SegmentKey:
    """One committed copy as its listing shows it (its manifest not read)."""

    location: Location
    manifest_key: str
    partition: int
    base: int
    segment_id: str
    modified: float  # the manifest's last modification: when the copy was committed
    stored_bytes: int  # `.log` + `.indexes` as listed (what `Manifest.stored_bytes` counts)

    @property
    def order(self) -> tuple[int, str, str]:
        return (self.base, self.manifest_key, str(self.location))


def topic_dir(location: Location, topic: str, topic_id: uuid.UUID) -> str:
    """`<prefix><topic>-<topicId>/`: where a topic id's partitions are at one location."""
    return f"{location.prefix}{topic}-{uuid_to_base64(topic_id)}/"


def parse_listing(
    location: Location, base: str, objects: Iterable[ObjectInfo]
) -> dict[int, list[SegmentKey]]:
    """Committed copies per partition from a listing under `base` (a topic's directory), sorted by base.

    Keys of another shape (location records, temporary files) are not copies and are left out."""
    sizes: dict[str, int] = {}
    manifests: list[tuple[int, str, int, str, float]] = []
    for obj in objects:
        rest = obj.key[len(base) :] if obj.key.startswith(base) else ""
        part, _, name = rest.partition("/")
        m = OBJECT_NAME.match(name)
        if part.isdigit() and m is None and name.endswith(MANIFEST_SUFFIX) and "/" not in name:
            # a manifest whose name carries no base offset: its copy cannot be placed by its key
            # (`RangedHistory` then plans the partition from every manifest, as unranged planning does)
            manifests.append((int(part), obj.key, UNPLACED, "", obj.modified))
            continue
        if not part.isdigit() or m is None:
            continue
        stem = obj.key[: -len(m.group(3)) - 1]
        if m.group(3) == MANIFEST_SUFFIX[1:]:
            manifests.append((int(part), obj.key, int(m.group(1)), m.group(2), obj.modified))
        elif m.group(3) in (LOG_SUFFIX[1:], INDEXES_SUFFIX[1:]):
            sizes[stem] = sizes.get(stem, 0) + obj.size
    out: dict[int, list[SegmentKey]] = {}
    for partition, key, offset, segment_id, modified in manifests:
        stem = key[: -len(MANIFEST_SUFFIX)]
        out.setdefault(partition, []).append(
            SegmentKey(location, key, partition, offset, segment_id, modified, sizes.get(stem, 0))
        )
    for keys in out.values():
        keys.sort(key=lambda k: k.order)
    return out


def list_topic(
    store: ObjectStore, location: Location, topic: str, topic_id: uuid.UUID
) -> dict[int, list[SegmentKey]]:
    """Every committed copy of the topic id at one location, per partition (one listing, paged)."""
    base = topic_dir(location, topic, topic_id)
    return parse_listing(location, base, store.list_objects(location.bucket, base))


def list_partition(
    store: ObjectStore,
    location: Location,
    topic: str,
    topic_id: uuid.UUID,
    partition: int,
    *,
    from_base: int | None = None,
    limit: int | None = None,
) -> list[SegmentKey]:
    """A partition's committed copies at one location whose base offset is >= `from_base` (all when
    None), at most about `limit` objects listed: S3 starts the listing there (StartAfter)."""
    base = topic_dir(location, topic, topic_id)
    pdir = f"{base}{partition}/"
    after = "" if from_base is None else f"{pdir}{from_base:020d}"
    listed = store.list_from(location.bucket, pdir, start_after=after, limit=limit)
    return parse_listing(location, base, listed).get(partition, [])


def partitions_at(store: ObjectStore, location: Location, topic: str, topic_id: uuid.UUID) -> list[int]:
    """The partitions with a directory at one location (one delimited listing: no key below is listed)."""
    names = store.list_dirs(location.bucket, topic_dir(location, topic, topic_id))
    return sorted(int(n) for n in names if n.isdigit())
