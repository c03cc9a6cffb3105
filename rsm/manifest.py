"""The segment manifest: versioned JSON, written last, the commit point of a copy.

A segment exists for readers exactly when its `.manifest` object exists: copy writes `.log` and `.indexes`
first and the manifest last (one atomic PUT / rename), retries delete the old manifest before rewriting the
data objects, and delete removes the manifest first. So a reader never sees half a copy.

The manifest carries everything needed to read the segment without a broker or the metadata topic (the
Spark reader and the migration tool rely on it):

```json
{
  "format": "kafka-tiered-rsm/segment-manifest",
  "version": 1,
  "copy_id": "<32 hex digits, new for every copy attempt; cache key of decoded chunks>",
  "created_ms": 1700000000000,
  "segment": {"topic": "t", "topic_id": "<22-char base64>", "partition": 0, "segment_id": "<base64>",
              "start_offset": 0, "end_offset": 99, "max_timestamp_ms": 1, "broker_id": 0,
              "event_timestamp_ms": 1, "segment_size_in_bytes": 12345, "txn_idx_empty": true,
              "segment_leader_epochs": {"0": 0}},
  "location": {"bucket": "b", "prefix": "p/", "log": "<key>", "indexes": "<key>"},
  "encryption": null | {"algorithm": "AES-256-GCM", "key_id": "k1", "wrapped_key": "<base64>"},
  "log": {"size": 12345, "stored_size": 6789, "chunk_size": 4194304,
          "stored_sizes": [...], "codecs": [0 | 1, ...], "crc32c": [...] | null},
  "indexes": {"OFFSET": {"offset": 0, "stored_size": 10, "size": 8, "codec": 0, "crc32c": 123 | null},
              "TIMESTAMP": ..., "PRODUCER_SNAPSHOT": ..., "LEADER_EPOCH": ..., "TRANSACTION": (when present)},
  "integrity": {"batches": 10, "first_offset": 0, "last_offset": 99, "max_timestamp_ms": 1,
                "compressed_batch_bytes": 0},
  "validation": null | {"policy": "...", "action": "tier", "violations": [{"offset": 5, "reason": "..."}],
                        "violation_count": 1}
}
```

`log.stored_sizes[i]` is the stored length of chunk i; chunk i holds original bytes
[i * chunk_size, min((i + 1) * chunk_size, size)) and starts in the `.log` object at the sum of the stored
sizes before it. `codecs` and `crc32c` follow the same numbering (`crc32c` is null for encrypted segments,
which GCM authenticates). Readers must refuse a `version` they do not know.

`location.log` and `location.indexes` must be exactly the keys `rsm.layout` derives from `location.prefix`
and the segment's own fields (topic, topic id, partition, start offset, segment id), and those fields and the
bucket and prefix must be valid names (`rsm.names`): readers refuse any other manifest, so one planted in
the store cannot make them read another segment's objects or a file outside the store.
"""

from __future__ import annotations

import base64
import itertools
import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from rsm.layout import INDEXES_SUFFIX, LOG_SUFFIX, partition_dir
from rsm.metadata import IndexType, RemoteLogSegmentMetadata, is_int, uuid_from_base64, uuid_to_base64
from rsm.names import bucket_problem, prefix_problem, topic_problem
from rsm.transform import Codec

FORMAT = "kafka-tiered-rsm/segment-manifest"
VERSION = 1


class ManifestError(ValueError):
    """A manifest that this code cannot read (unknown version, missing or inconsistent fields)."""


@dataclass(frozen=True)
class ChunkIndex:
    """Where each chunk of the `.log` object is and how to decode it."""

    size: int
    chunk_size: int
    stored_sizes: tuple[int, ...]
    codecs: tuple[Codec, ...]
    crc32c: tuple[int, ...] | None
    offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        expected = -(-self.size // self.chunk_size) if self.size else 0
        if len(self.stored_sizes) != expected or len(self.codecs) != expected:
            raise ManifestError(
                f"chunk index of a {self.size}-byte log in {self.chunk_size}-byte chunks needs {expected} "
                f"entries, has {len(self.stored_sizes)} sizes and {len(self.codecs)} codecs"
            )
        if self.crc32c is not None and len(self.crc32c) != expected:
            raise ManifestError(f"chunk index has {len(self.crc32c)} CRCs for {expected} chunks")
        object.__setattr__(self, "offsets", (0, *itertools.accumulate(self.stored_sizes)))

    @property
    def count(self) -> int:
        return len(self.stored_sizes)

    @property
    def stored_size(self) -> int:
        return self.offsets[-1]

    def original_span(self, i: int) -> tuple[int, int]:
        start = i * self.chunk_size
        return start, min(start + self.chunk_size, self.size)

    def stored_span(self, i: int) -> tuple[int, int]:
        return self.offsets[i], self.offsets[i + 1]

    def chunk_of(self, position: int) -> int:
        return position // self.chunk_size

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "stored_size": self.stored_size,
            "chunk_size": self.chunk_size,
            "stored_sizes": list(self.stored_sizes),
            "codecs": [int(c) for c in self.codecs],
            "crc32c": None if self.crc32c is None else list(self.crc32c),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ChunkIndex:
        crcs = doc.get("crc32c")
        index = cls(
            size=int(doc["size"]),
            chunk_size=int(doc["chunk_size"]),
            stored_sizes=tuple(int(x) for x in doc["stored_sizes"]),
            codecs=tuple(Codec(int(x)) for x in doc["codecs"]),
            crc32c=None if crcs is None else tuple(int(x) for x in crcs),
        )
        if "stored_size" in doc and int(doc["stored_size"]) != index.stored_size:
            raise ManifestError("log.stored_size disagrees with the sum of stored_sizes")
        return index


@dataclass(frozen=True)
class IndexEntry:
    """One index inside the `.indexes` object."""

    offset: int
    stored_size: int
    size: int
    codec: Codec
    crc32c: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "stored_size": self.stored_size,
            "size": self.size,
            "codec": int(self.codec),
            "crc32c": self.crc32c,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> IndexEntry:
        crc = doc.get("crc32c")
        return cls(int(doc["offset"]), int(doc["stored_size"]), int(doc["size"]), Codec(int(doc["codec"])),
                   None if crc is None else int(crc))  # fmt: skip


@dataclass(frozen=True)
class Encryption:
    key_id: str
    wrapped_key: bytes
    algorithm: str = "AES-256-GCM"

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "key_id": self.key_id,
            "wrapped_key": base64.b64encode(self.wrapped_key).decode("ascii"),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Encryption:
        if doc.get("algorithm", "AES-256-GCM") != "AES-256-GCM":
            raise ManifestError(f"unknown encryption algorithm {doc.get('algorithm')!r}")
        return cls(str(doc["key_id"]), base64.b64decode(doc["wrapped_key"]))


@dataclass(frozen=True)
class SegmentInfo:
    """The copy of the segment's metadata kept in the manifest."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    txn_idx_empty: bool
    segment_leader_epochs: dict[str, int]

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata, txn_idx_empty: bool) -> SegmentInfo:
        seg = metadata.remote_log_segment_id
        tip = seg.topic_id_partition
        return cls(
            topic=tip.topic,
            topic_id=uuid_to_base64(tip.topic_id),
            partition=tip.partition,
            segment_id=uuid_to_base64(seg.id),
            start_offset=metadata.start_offset,
            end_offset=metadata.end_offset,
            max_timestamp_ms=metadata.max_timestamp_ms,
            broker_id=metadata.broker_id,
            event_timestamp_ms=metadata.event_timestamp_ms,
            segment_size_in_bytes=metadata.segment_size_in_bytes,
            txn_idx_empty=txn_idx_empty,
            segment_leader_epochs={str(k): v for k, v in metadata.segment_leader_epochs.items()},
        )


@dataclass(frozen=True)
class Manifest:
    copy_id: str
    created_ms: int
    segment: SegmentInfo
    location: dict[str, str]
    encryption: Encryption | None
    log: ChunkIndex
    indexes: dict[IndexType, IndexEntry]
    integrity: dict[str, int]
    validation: dict[str, Any] | None = None
    version: int = VERSION

    @property
    def segment_uuid(self) -> uuid.UUID:
        from rsm.metadata import uuid_from_base64

        return uuid_from_base64(self.segment.segment_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "copy_id": self.copy_id,
            "created_ms": self.created_ms,
            "segment": asdict(self.segment),
            "location": dict(self.location),
            "encryption": None if self.encryption is None else self.encryption.to_json(),
            "log": self.log.to_json(),
            "indexes": {t.value: e.to_json() for t, e in self.indexes.items()},
            "integrity": dict(self.integrity),
            "validation": self.validation,
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "manifest") -> Manifest:
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ManifestError(f"{source} is not JSON: {exc}") from None
        return cls.from_json(doc, source)

    @classmethod
    def from_json(cls, doc: Any, source: str = "manifest") -> Manifest:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ManifestError(f"{source} is not a {FORMAT} document")
        if doc.get("version") != VERSION:
            raise ManifestError(f"{source} has version {doc.get('version')!r}; this reader knows {VERSION}")
        try:
            seg = doc["segment"]
            manifest = cls(
                copy_id=str(doc["copy_id"]),
                created_ms=int(doc["created_ms"]),
                segment=SegmentInfo(**{**seg, "segment_leader_epochs": dict(seg["segment_leader_epochs"])}),
                location={str(k): str(v) for k, v in doc["location"].items()},
                encryption=None if doc.get("encryption") is None else Encryption.from_json(doc["encryption"]),
                log=ChunkIndex.from_json(doc["log"]),
                indexes={IndexType(k): IndexEntry.from_json(v) for k, v in doc["indexes"].items()},
                integrity={str(k): int(v) for k, v in doc.get("integrity", {}).items()},
                validation=doc.get("validation"),
            )
        except ManifestError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{source} is malformed: {type(exc).__name__}: {exc}") from None
        _check_location(manifest.segment, manifest.location, source)
        return manifest


def _check_location(seg: SegmentInfo, location: dict[str, str], source: str) -> None:
    """Refuse a manifest whose object keys are not the segment's own (see the module docstring)."""

    def refuse(name: str, value: object, problem: str) -> ManifestError:
        return ManifestError(f"{source} has an unusable {name} {value!r}: it {problem}")

    def kafka_id(value: object) -> str | None:
        try:
            ok = isinstance(value, str) and uuid_to_base64(uuid_from_base64(value)) == value
        except ValueError:
            ok = False
        return None if ok else "is not a Kafka id (22 characters of URL-safe base64)"

    numbers = {"partition": seg.partition, "start_offset": seg.start_offset}
    checks = [
        ("segment.topic", seg.topic, topic_problem(seg.topic)),
        ("segment.topic_id", seg.topic_id, kafka_id(seg.topic_id)),
        ("segment.segment_id", seg.segment_id, kafka_id(seg.segment_id)),
        *(
            (f"segment.{name}", n, None if is_int(n) and n >= 0 else "is not a non-negative int")
            for name, n in numbers.items()
        ),
        ("location.bucket", location.get("bucket"), bucket_problem(location.get("bucket"))),
        ("location.prefix", location.get("prefix"), prefix_problem(location.get("prefix"))),
    ]
    for name, value, problem in checks:
        if problem:
            raise refuse(name, value, problem)
    stem = partition_dir(location["prefix"], seg.topic, seg.topic_id, seg.partition)
    stem += f"{seg.start_offset:020d}-{seg.segment_id}"
    for name, suffix in (("log", LOG_SUFFIX), ("indexes", INDEXES_SUFFIX)):
        if location.get(name) != stem + suffix:
            raise refuse(
                f"location.{name}", location.get(name), f"is not this segment's key {stem + suffix!r}"
            )
