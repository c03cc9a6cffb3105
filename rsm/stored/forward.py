"""A forward: the small document a move leaves at a segment's old location, naming where it went.

Why a document of the stored format: `rsm migrate move` writes it, and the RSM's fetch and delete, the
catalog's tools and `rsm migrate gc` read it, so its shape belongs to none of them. Reading and writing it
through a store, and following a chain of them, is `rsm.store.forward`'s job; this module is its JSON:

    <old prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segment id>.forward
    {"format": "kafka-tiered-rsm/segment-forward", "version": 1,
     "topic": "t", "topic_id": "<22-char base64>", "partition": 0, "start_offset": 0,
     "segment_id": "<22-char base64>", "to": {"bucket": "b", "prefix": "p/"}, "moved_ms": 1700000000000}

(JSON, keys sorted.) What a forward may name is checked like custom metadata: the bucket and prefix must be
valid names (`rsm.api.names`), and its segment fields must be the segment's own, so a forward can only
lead to this segment's objects (`rsm.stored.layout` derives every key from the location and the segment).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from rsm.api.metadata import RemoteLogSegmentMetadata, uuid_to_base64
from rsm.api.names import bucket_problem, prefix_problem
from rsm.stored.layout import Location, partition_dir

FORMAT = "kafka-tiered-rsm/segment-forward"
VERSION = 1
FORWARD_SUFFIX = ".forward"


class ForwardError(ValueError):
    """A forward object that cannot be used (malformed, or naming another segment or a bad location)."""


@dataclass(frozen=True)
class SegmentRef:
    """What names a segment's objects at any location: topic, topic id, partition, offset, segment id."""

    topic: str
    topic_id: str  # Kafka base64
    partition: int
    start_offset: int
    segment_id: str  # Kafka base64

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata) -> SegmentRef:
        seg = metadata.remote_log_segment_id
        tip = seg.topic_id_partition
        return cls(tip.topic, uuid_to_base64(tip.topic_id), tip.partition, metadata.start_offset,
                   uuid_to_base64(seg.id))  # fmt: skip

    def stem(self, location: Location) -> str:
        """The key stem of the segment's objects at `location` (as `rsm.stored.layout.SegmentKeys`)."""
        base = partition_dir(location.prefix, self.topic, self.topic_id, self.partition)
        return f"{base}{self.start_offset:020d}-{self.segment_id}"

    def forward_key(self, location: Location) -> str:
        return self.stem(location) + FORWARD_SUFFIX


@dataclass(frozen=True)
class Forward:
    """One forward object: the segment it belongs to and the location it was moved to."""

    segment: SegmentRef
    to: Location
    moved_ms: int

    def to_bytes(self) -> bytes:
        s = self.segment
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "topic": s.topic,
            "topic_id": s.topic_id,
            "partition": s.partition,
            "start_offset": s.start_offset,
            "segment_id": s.segment_id,
            "to": {"bucket": self.to.bucket, "prefix": self.to.prefix},
            "moved_ms": self.moved_ms,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def new(cls, segment: SegmentRef, to: Location) -> Forward:
        return cls(segment, to, int(time.time() * 1000))

    @classmethod
    def from_bytes(cls, raw: bytes, source: str, expected: SegmentRef | None = None) -> Forward:
        """Parse a stored forward; ``expected``: refuse one that belongs to another segment."""
        try:
            doc: Any = json.loads(raw)
        except ValueError:
            raise ForwardError(f"forward {source} is not JSON") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ForwardError(f"forward {source} is not a {FORMAT} document")
        if doc.get("version") != VERSION:
            raise ForwardError(
                f"forward {source} has version {doc.get('version')!r}; this reader knows {VERSION}"
            )
        try:
            segment = SegmentRef(
                str(doc["topic"]), str(doc["topic_id"]), int(doc["partition"]), int(doc["start_offset"]),
                str(doc["segment_id"]),
            )  # fmt: skip
            to = Location(str(doc["to"]["bucket"]), str(doc["to"]["prefix"]))
            moved_ms = int(doc.get("moved_ms", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise ForwardError(f"forward {source} is malformed: {type(exc).__name__}: {exc}") from None
        for what, name, problem in (
            ("bucket", to.bucket, bucket_problem(to.bucket)),
            ("prefix", to.prefix, prefix_problem(to.prefix)),
        ):
            if problem:
                raise ForwardError(f"forward {source} names an unusable {what} {name!r}: it {problem}")
        if expected is not None and segment != expected:
            raise ForwardError(f"forward {source} belongs to another segment ({segment.segment_id})")
        return cls(segment, to, moved_ms)
