"""Forwards: the small object a move leaves at a segment's old location, naming where it went.

Kafka keeps, with each tiered segment, the custom metadata its copy returned: the location (bucket,
prefix) the segment was written to (`rsm.stored.custom_metadata`). `rsm migrate move` relocates segments
without a broker, so brokers keep handing the RSM the old location. For fetch and delete to keep
working, a move leaves a forward beside the segment's old objects before it commits the new copy:

    <old prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segment id>.forward

The document (its JSON and its checks) is part of the stored format, `rsm.stored.forward`; this module
reads, writes and follows it. Readers follow it only when the segment's manifest is absent at the location
they were given: a manifest always wins, so a forward left behind by an interrupted move, or one at a location
a later move brought the segment back to, is never followed past a committed copy. The target may itself
hold a forward (a segment moved twice), so forwards form a chain; it is followed at most `MAX_HOPS`
locations and never twice through one location (a move back and forth leaves a cycle, broken by the
manifest at its end).

What a forward may name is checked when it is parsed (`rsm.stored.forward`), so a forward can only lead
to this segment's objects. A reader still checks the manifest it finds there (the RSM: its segment id against Kafka's metadata, and its seal).

The forward is not a manifest: the catalog (`rsm.catalog`), which lists manifests only, never reads a
segment twice because of it, and the new location is in the topic's location record (the move records it
before committing there). Deleting the segment through the old location (`RemoteStorageManager.delete_
log_segment_data`) deletes the segment's objects at every location of the chain, then the forwards, so a
delete cut short and retried still finds whatever the first attempt left.
"""

from __future__ import annotations

from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.forward import Forward, SegmentRef

MAX_HOPS = 8


def read_forward(store: ObjectStore, location: Location, segment: SegmentRef) -> Forward | None:
    """The forward at `location` for `segment`, or None when there is none."""
    key = segment.forward_key(location)
    try:
        raw = store.get(location.bucket, key)
    except ObjectNotFound:
        return None
    return Forward.from_bytes(raw, store.describe(location.bucket, key), segment)


def write_forward(store: ObjectStore, source: Location, segment: SegmentRef, to: Location) -> None:
    store.put(source.bucket, segment.forward_key(source), Forward.new(segment, to).to_bytes())


def chain(store: ObjectStore, location: Location, segment: SegmentRef) -> list[Location]:
    """The locations forwards lead to from `location` (not including it), in order; [] when none.

    Stops at a location without a forward, at one already visited (a cycle) and after `MAX_HOPS`.
    """
    seen = {location}
    out: list[Location] = []
    here = location
    for _ in range(MAX_HOPS):
        fwd = read_forward(store, here, segment)
        if fwd is None or fwd.to in seen:
            break
        out.append(fwd.to)
        seen.add(fwd.to)
        here = fwd.to
    return out
