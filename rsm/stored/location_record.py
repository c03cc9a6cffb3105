"""The location record's documents: one entry per place a topic id's segments went, and its two markers.

Why in the stored format: the RSM writes these documents, and every reader without a broker (the Spark
reader, `rsm migrate`, `rsm store`) and other tools read them to find a topic's segments, so their shape
belongs to none of those. Listing, reading, writing and caching the record through a store is
`rsm.store.locations`' job (the rules of who writes which entry when are told there); this module is their
names and JSON:

    <home>_rsm/topic-locations/<topic>-<topicId base64>/<digest>.json
    {"version": 1, "topic": "t", "topic_id": "<22-char base64>", "bucket": "b", "prefix": "p/",
     "recorded_ms": 1700000000000[, "found_by": "fetch" | "delete" | "scan"]}
    <home>_rsm/topic-locations/<topic>-<topicId base64>/_complete.json
    {"version": 1, "scanned_ms": ..., "buckets": ["b", ...], "by": "locate" | "copy"}
    <home>_rsm/topic-locations/_scanned.json
    {"version": 1, "scanned_ms": ..., "buckets": ["b", ...], "by": "locate" | "copy"}

`<digest>` is the first 32 hex digits of SHA-256 over `bucket + "\\n" + prefix`, so recording a location is
an idempotent PUT of its own object (two writers never overwrite each other's entries). An entry without
`found_by` was written by a copy and dates the topic id; one with it records where segments were found.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum

from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.stored.layout import Location

REGISTRY_DIR = "_rsm/topic-locations/"
RECORD_VERSION = 1
COMPLETE_MARKER = "_complete.json"
SCANNED_MARKER = "_scanned.json"  # at the record's root
ENTRY_LEAF = re.compile(r"[0-9a-f]{32}\.json")
TOPIC_DIR = re.compile(r"^(?P<topic>.+)-(?P<tid>[A-Za-z0-9_-]{22})$")

__all__ = [
    "COMPLETE_MARKER",
    "ENTRY_LEAF",
    "RECORD_VERSION",
    "REGISTRY_DIR",
    "SCANNED_MARKER",
    "TOPIC_DIR",
    "FoundBy",
    "LocationEntry",
    "RecordMarker",
    "entry_doc",
    "entry_location",
    "location_digest",
    "recorded_ms",
    "scanned_ms_of",
    "topic_dir",
    "written_by_copy",
]


class FoundBy(StrEnum):
    """How an entry that was not written by a copy came to be (its `found_by` field)."""

    FETCH = "fetch"
    DELETE = "delete"
    SCAN = "scan"


def location_digest(location: Location) -> str:
    """The stable name of a location's record entry (idempotent PUTs, no shared document)."""
    return hashlib.sha256(f"{location.bucket}\n{location.prefix}".encode()).hexdigest()[:32]


def topic_dir(prefix: str, topic: str, topic_id: uuid.UUID | str) -> str:
    """The key prefix (ending in '/') of a topic id's record under the home prefix `prefix`."""
    return f"{prefix}{REGISTRY_DIR}{topic}-{uuid_to_base64(to_uuid(topic_id))}/"


@dataclass(frozen=True)
class LocationEntry:
    """One entry: a location of a topic id, when it was recorded, and how it was found (None: a copy)."""

    topic: str
    topic_id: uuid.UUID
    location: Location
    recorded_ms: int
    found_by: FoundBy | None = None

    @property
    def leaf(self) -> str:
        """The entry's object name inside its topic id's directory."""
        return location_digest(self.location) + ".json"

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {
            "version": RECORD_VERSION,
            "topic": self.topic,
            "topic_id": uuid_to_base64(self.topic_id),
            "bucket": self.location.bucket,
            "prefix": self.location.prefix,
            "recorded_ms": self.recorded_ms,
        }
        if self.found_by is not None:
            doc["found_by"] = self.found_by.value
        return json.dumps(doc, sort_keys=True).encode() + b"\n"


def entry_doc(raw: bytes) -> dict[str, object] | None:
    """A stored entry as its JSON object, None when it is not a version 1 entry; ValueError if not JSON."""
    doc = json.loads(raw)
    return doc if isinstance(doc, dict) and doc.get("version") == RECORD_VERSION else None


def recorded_ms(doc: dict[str, object]) -> int:
    """An entry's `recorded_ms` (0 when absent); TypeError or ValueError when it is not a number."""
    return int(doc.get("recorded_ms", 0))  # type: ignore[call-overload]


def entry_location(doc: dict[str, object]) -> tuple[int, Location]:
    """An entry's `recorded_ms` and location; KeyError, TypeError or ValueError when it is malformed."""
    return recorded_ms(doc), Location(str(doc["bucket"]), str(doc["prefix"]))


def written_by_copy(doc: dict[str, object]) -> bool:
    """Whether the entry was written by a copy (no `found_by`): only those date a topic id."""
    return "found_by" not in doc


@dataclass(frozen=True)
class RecordMarker:
    """A `_complete.json` (one topic id) or `_scanned.json` (the whole record): a scan that began at
    `scanned_ms` left nothing of `buckets` unrecorded; `by`: `locate` or `copy`."""

    scanned_ms: int
    buckets: tuple[str, ...]
    by: str

    def to_bytes(self, *, sort_keys: bool = True) -> bytes:
        """The marker's JSON (`_complete.json` is written with its keys in this order, not sorted)."""
        doc = {"version": RECORD_VERSION, "scanned_ms": self.scanned_ms, "buckets": sorted(self.buckets),
               "by": self.by}  # fmt: skip
        return json.dumps(doc, sort_keys=sort_keys).encode() + b"\n"


def scanned_ms_of(raw: bytes) -> int:
    """The `scanned_ms` of a stored marker; ValueError, KeyError or TypeError when it is not a version 1
    marker."""
    doc = json.loads(raw)
    if not isinstance(doc, dict) or doc.get("version") != RECORD_VERSION:
        raise ValueError("not a version 1 marker")
    return int(doc["scanned_ms"])
