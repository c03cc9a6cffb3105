"""Locations the catalog knows a topic's segments may be in, but cannot read.

Why: a listing of a bucket that does not exist answers "nothing here" on every backend (the file store's
missing directory, S3's NoSuchBucket), and a local directory the process may not read is skipped by the
walk, so a reader would plan from the other locations and return part of the topic without a word. A
location is known when the topic id's location record or its overlay names it (`TopicCatalog.locations`);
one of them that held nothing in a plan's listings is checked here, once: it is unreadable when its bucket
does not exist or access to it is denied. Checking only the locations that held nothing keeps the cost of
a plan where it was (a stat on the file store, one HEAD of a bucket on a cloud, only for those).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

from rsm.api.metadata import uuid_to_base64
from rsm.config.settings import Backend
from rsm.store.layout import Location
from rsm.store.objects import ObjectStore

RECORD = "its location record"
OVERLAY = "its overlay"


@dataclass(frozen=True)
class UnreadableLocation:
    """A known location of a topic id that cannot be read, and why."""

    topic: str
    topic_id: uuid.UUID
    location: Location
    where: str  # the location as messages name it (`file:bucket/prefix`, `s3://bucket/prefix`)
    named_by: str
    why: str

    def message(self) -> str:
        """One line naming the topic, the location, what named it and why it cannot be read."""
        return (
            f"topic {self.topic} (id {uuid_to_base64(self.topic_id)}): {self.where}, named by "
            f"{self.named_by}, cannot be read: {self.why}; its segments are not read"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "topic_id": uuid_to_base64(self.topic_id),
            "location": str(self.location),
            "bucket": self.location.bucket,
            "prefix": self.location.prefix,
            "named_by": self.named_by,
            "why": self.why,
        }


def location_problem(store: ObjectStore, location: Location, directory: str) -> str | None:
    """Why `location` cannot be read (its bucket is missing, access is denied), or None when it can.

    ``directory``: the topic id's directory there (`<prefix><topic>-<topicId>/`), checked too on the file
    store, where a directory without read permission is skipped silently by listings."""
    if store.backend is Backend.FILE:
        return _file_problem(store, location, directory)
    try:
        exists = store.bucket_exists(location.bucket)
    except PermissionError as exc:
        return f"access denied to bucket {location.bucket!r}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the reason is the message
        return f"bucket {location.bucket!r} cannot be reached: {type(exc).__name__}: {exc}"
    if exists is False:
        return f"bucket {location.bucket!r} does not exist in {store.backend.value} at {store.where}"
    if exists is None:
        return f"access denied: the store would not say whether bucket {location.bucket!r} exists"
    return None


def _file_problem(store: ObjectStore, location: Location, directory: str) -> str | None:
    assert store.root is not None
    bucket = store.root / location.bucket
    if not bucket.is_dir():
        what = "is not a directory" if bucket.exists() else "does not exist"
        return f"bucket {location.bucket!r} {what} (no directory {bucket})"
    path = bucket
    for part in [p for p in directory.split("/") if p]:
        if not os.access(path, os.R_OK | os.X_OK):
            return f"permission denied on {path}"
        path = path / part
        if not path.exists():
            return None
    if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):
        return f"permission denied on {path}"
    return None
