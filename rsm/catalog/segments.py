"""The committed segments of one topic id, read from their manifests across every location.

A segment exists for readers exactly when its manifest exists (the manifest is written last), so listing
manifests under `<prefix><topic>-<topicId>/` at each location finds every committed copy and nothing
half-written. Manifests are small and read in parallel; nothing of the `.log` objects is touched.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from rsm.api.metadata import uuid_to_base64
from rsm.store.concurrency import map_concurrently
from rsm.store.layout import MANIFEST_SUFFIX, Location, partition_dir
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.manifest import Manifest, ManifestError

log = logging.getLogger(__name__)

__all__ = [
    "CatalogError",
    "DamagedManifest",
    "StoredSegment",
    "list_segments",
    "load_segment",
    "map_concurrently",
    "read_manifest",
    "reporting_damage",
]


class CatalogError(Exception):
    """The store cannot be planned from: one line naming the object at fault."""


@dataclass(frozen=True)
class StoredSegment:
    """One committed segment copy: where its manifest is, and the manifest itself."""

    location: Location
    manifest_key: str
    manifest: Manifest
    epochs: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        chain = sorted((int(e), int(o)) for e, o in self.manifest.segment.segment_leader_epochs.items())
        object.__setattr__(self, "epochs", tuple(chain))

    @property
    def bucket(self) -> str:
        return self.location.bucket

    @property
    def partition(self) -> int:
        return self.manifest.segment.partition

    @property
    def start_offset(self) -> int:
        return self.manifest.segment.start_offset

    @property
    def end_offset(self) -> int:
        return self.manifest.segment.end_offset

    @property
    def last_record_offset(self) -> int:
        """The last offset a batch of this copy holds (`Manifest.last_batch_offset`): the metadata's end
        offset can lie past it (a compacted tail), and the offsets between are no record's."""
        return self.manifest.last_batch_offset

    @property
    def max_timestamp_ms(self) -> int:
        return self.manifest.segment.max_timestamp_ms

    @property
    def segment_id(self) -> str:
        return self.manifest.segment.segment_id

    @property
    def size(self) -> int:
        return self.manifest.log.size

    @property
    def max_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def epoch_ranges(self) -> list[tuple[int, int, int]]:
        """(epoch, first offset, last offset) of each epoch in this segment, from its leader-epoch chain."""
        out = []
        for i, (epoch, start) in enumerate(self.epochs):
            end = self.epochs[i + 1][1] - 1 if i + 1 < len(self.epochs) else self.last_record_offset
            lo = max(start, self.start_offset)
            if lo <= end:
                out.append((epoch, lo, end))
        if not out and not self.epochs:
            out.append((-1, self.start_offset, self.last_record_offset))
        return out


def read_manifest(store: ObjectStore, bucket: str, key: str) -> Manifest:
    """One manifest, refused with a one-line CatalogError naming the object when it cannot be read."""
    where = store.describe(bucket, key)
    try:
        return Manifest.from_bytes(store.get(bucket, key), where)
    except ManifestError as exc:
        raise CatalogError(f"cannot read manifest {where}: {exc}") from None


@dataclass(frozen=True)
class DamagedManifest:
    """A listed manifest that cannot be read or does not match its key: the object and what is wrong."""

    object: str
    problem: str


_DAMAGE: ContextVar[list[DamagedManifest] | None] = ContextVar("rsm_catalog_damage", default=None)


@contextmanager
def reporting_damage() -> Iterator[list[DamagedManifest]]:
    """``with``: a damaged manifest (`load_segment`) is recorded in the list this yields and its segment
    left out, instead of failing the whole listing. Why: the tools that report on a store (`rsm store du`,
    `ls`, `rsm migrate verify`) exist to show what is there, a tampered manifest included, and one such
    object stopped them for every other segment. Readers stay strict: they never enter this."""
    found: list[DamagedManifest] = []
    token = _DAMAGE.set(found)
    try:
        yield found
    finally:
        _DAMAGE.reset(token)


def load_segment(
    store: ObjectStore, topic: str, tid: str, location: Location, key: str
) -> StoredSegment | None:
    """One listed copy's manifest, checked against its key; None when it was deleted since the listing
    (retention), a one-line CatalogError when it cannot be read or names another topic id or partition
    than its key (within `reporting_damage`: recorded there, and None)."""
    try:
        return _load_segment(store, topic, tid, location, key)
    except CatalogError as exc:
        damage = _DAMAGE.get()
        if damage is None:
            raise
        damage.append(DamagedManifest(store.describe(location.bucket, key), str(exc)))
        return None


def _load_segment(
    store: ObjectStore, topic: str, tid: str, location: Location, key: str
) -> StoredSegment | None:
    try:
        manifest = read_manifest(store, location.bucket, key)
    except ObjectNotFound:
        log.info("segment %s deleted while listing", store.describe(location.bucket, key))
        return None
    seg = manifest.segment
    expected = partition_dir(location.prefix, topic, tid, seg.partition)
    if seg.topic_id != tid or seg.topic != topic or not key.startswith(expected):
        raise CatalogError(
            f"manifest {store.describe(location.bucket, key)} describes {seg.topic}-{seg.partition} "
            f"(topic id {seg.topic_id}), not what its key says"
        )
    return StoredSegment(location, key, manifest)


def list_segments(
    store: ObjectStore,
    topic: str,
    topic_id: uuid.UUID,
    locations: Iterable[Location],
    partitions: Iterable[int] | None = None,
    on_key: Callable[[Location, str], None] | None = None,
) -> list[StoredSegment]:
    """Every committed segment of the topic id at the given locations, sorted by (partition, offset).

    A manifest that vanished between the listing and its read was deleted meanwhile (retention) and is
    skipped; a manifest that names another topic id or partition than its key says is refused.
    ``on_key`` sees every key listed under the topic's directories (a planner collects the forwards there
    from the same listings: one round trip per location, the locations listed at once).
    """
    tid = uuid_to_base64(topic_id)
    wanted = None if partitions is None else set(partitions)
    keys: list[tuple[Location, str]] = []
    where = list(dict.fromkeys(locations))

    def listing(location: Location) -> list[str]:
        return store.list(location.bucket, f"{location.prefix}{topic}-{tid}/")

    for location, found_keys in zip(where, map_concurrently(listing, where), strict=True):
        base = f"{location.prefix}{topic}-{tid}/"
        for key in found_keys:
            if on_key is not None:
                on_key(location, key)
            if not key.endswith(MANIFEST_SUFFIX):
                continue
            part = key[len(base) :].split("/", 1)[0]
            if not part.isdigit() or (wanted is not None and int(part) not in wanted):
                continue
            keys.append((location, key))

    def load(item: tuple[Location, str]) -> StoredSegment | None:
        return load_segment(store, topic, tid, *item)

    found = [s for s in map_concurrently(load, keys) if s is not None]
    found.sort(key=lambda s: (s.partition, s.start_offset, s.end_offset, s.manifest.created_ms))
    return found
