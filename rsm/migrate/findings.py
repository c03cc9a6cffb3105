"""What `rsm migrate verify` finds wrong with a topic beyond its segments: holes and unreadable locations.

Why: verify checks each committed segment against its manifest, so a segment that is simply gone (deleted
behind the RSM's back, or in a location that cannot be read) is never one of its items, and a run over
fewer segments than the topic has would end "everything checks". So the verify plan also measures the
histories its segments make (`rsm.catalog.holes`: offsets no segment holds between two segments, or before
the first one down to the log start the RSM's deletes recorded) and asks the catalog for the locations the
topic's record or overlay names that it cannot read (`rsm.catalog.unreadable`). Each is one of verify's
problems (`kind` `hole` or `unreadable-location`, with the offsets or the location as fields of their
own), so the run reports `ok: false` and exits with status 3. So is a manifest the listing cannot read or
match to its key (`corrupt`, `damaged_manifests`): the other segments are verified all the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog, resolve_history
from rsm.catalog.segments import DamagedManifest, StoredSegment

HOLE = "hole"
UNREADABLE = "unreadable-location"
CORRUPT = "corrupt"


def damaged_manifests(damaged: Iterable[DamagedManifest]) -> list[dict[str, Any]]:
    """Verify's problem rows (`corrupt`) for the manifests the plan's listing could not read or match to
    their keys (`rsm.catalog.segments.reporting_damage`): each is one problem, and the run goes on to
    verify the other segments."""
    return [
        {"kind": CORRUPT, "segment": d.object.rpartition("/")[2], "object": d.object, "detail": d.problem}
        for d in damaged
    ]


def store_problems(
    catalog: TopicCatalog, topic: str, topic_id: uuid.UUID, segments: Iterable[StoredSegment]
) -> list[dict[str, Any]]:
    """Verify's problem rows for the holes of the histories these copies make (each partition's, as
    readers resolve it) and the topic id's known locations that cannot be read (those holding one of the
    copies can)."""
    by_partition: dict[int, list[StoredSegment]] = {}
    for seg in segments:
        by_partition.setdefault(seg.partition, []).append(seg)
    out: list[dict[str, Any]] = []
    for partition, segs in sorted(by_partition.items()):
        for hole in catalog.holes(topic, topic_id, resolve_history(partition, segs)):
            looked = f"; looked in {hole.looked_in}" if hole.looked_in else ""
            out.append({
                "kind": HOLE, "segment": f"{topic}-{partition}",
                "object": f"offsets {hole.first_offset}..{hole.last_offset}", "detail": hole.why + looked,
                **hole.to_json(), "topic_id": uuid_to_base64(topic_id),
            })  # fmt: skip
    holding = {seg.location for segs in by_partition.values() for seg in segs}
    for lost in catalog.unreadable(topic, topic_id, holding):
        out.append({
            "kind": UNREADABLE, "segment": f"topic {topic} (id {uuid_to_base64(topic_id)})",
            "object": lost.where, "detail": f"named by {lost.named_by}: {lost.why}", **lost.to_json(),
        })  # fmt: skip
    return out
