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

import uuid
from dataclasses import dataclass
from typing import Any

from rsm.api.metadata import uuid_to_base64
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

    ``directory``: the topic id's directory there (`<prefix><topic>-<topicId>/`), which the file store
    checks too: a directory without read permission is skipped silently by its listings
    (`ObjectStore.access_problem`)."""
    return store.access_problem(location.bucket, directory)
