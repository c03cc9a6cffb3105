"""Where a segment's objects live.

Object layout (one segment = three objects under one stem)::

    <prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segment id>.log
    <prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segment id>.indexes
    <prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segment id>.manifest

- ids are printed as Kafka prints them (22 characters of URL-safe base64), the base offset zero-padded to
  20 digits as in Kafka's file names, so listing a partition sorts segments by offset;
- the prefix is used verbatim (write `tenant-a/` to get a directory level);
- `.log` holds the transformed chunks of the segment back to back; `.indexes` holds every index of the
  segment (offset, time, producer snapshot, transaction when present, leader epoch) back to back; where each
  piece starts, and how to decode it, is in the `.manifest` (see `rsm.stored.manifest`), written last.

A location is the pair (bucket, prefix). The file store maps a bucket to a directory under its root; S3 maps
it to a bucket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rsm.api.metadata import RemoteLogSegmentMetadata, uuid_to_base64

LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"
MANIFEST_SUFFIX = ".manifest"
SEGMENT_SUFFIXES = (MANIFEST_SUFFIX, LOG_SUFFIX, INDEXES_SUFFIX)  # the order deletes go in: manifest first


@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"{self.bucket}/{self.prefix}"


def partition_dir(prefix: str, topic: str, topic_id: object, partition: int) -> str:
    """`<prefix><topic>-<topicId>/<partition>/`: the key prefix of a partition's segments."""
    tid = uuid_to_base64(topic_id) if not isinstance(topic_id, str) else topic_id  # type: ignore[arg-type]
    return f"{prefix}{topic}-{tid}/{partition}/"


@dataclass(frozen=True)
class SegmentKeys:
    """The three object keys of one segment at one location."""

    location: Location
    stem: str

    @classmethod
    def of(cls, location: Location, metadata: RemoteLogSegmentMetadata) -> SegmentKeys:
        seg = metadata.remote_log_segment_id
        tip = seg.topic_id_partition
        stem = (
            partition_dir(location.prefix, tip.topic, tip.topic_id, tip.partition)
            + f"{metadata.start_offset:020d}-{uuid_to_base64(seg.id)}"
        )
        return cls(location, stem)

    @property
    def bucket(self) -> str:
        return self.location.bucket

    @property
    def log(self) -> str:
        return self.stem + LOG_SUFFIX

    @property
    def indexes(self) -> str:
        return self.stem + INDEXES_SUFFIX

    @property
    def manifest(self) -> str:
        return self.stem + MANIFEST_SUFFIX

    def all(self) -> tuple[str, str, str]:
        """The segment's keys, manifest first (the order they are deleted in)."""
        return (self.manifest, self.log, self.indexes)


#: The name of a stored segment object: `<20-digit base offset>-<segment id>.log|indexes|manifest`.
OBJECT_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.(log|indexes|manifest)$")


#: A manifest's key at any prefix: `<anything><topic>-<topicId>/<partition>/<offset>-<segment id>.manifest`
#: (`dir` is everything up to the last '/' before the topic directory's name).
MANIFEST_KEY = re.compile(
    r"^(?P<dir>(?:.*/)?)(?P<name>[^/]+)-(?P<tid>[A-Za-z0-9_-]{22})/(?P<partition>\d+)/"
    r"(?P<offset>\d{20})-(?P<sid>[A-Za-z0-9_-]{22})" + re.escape(MANIFEST_SUFFIX) + "$"
)


def is_tiered_object(name: str) -> bool:
    """True for the name (or path) of a stored segment object (`OBJECT_NAME`)."""
    return bool(OBJECT_NAME.match(Path(name).name))
