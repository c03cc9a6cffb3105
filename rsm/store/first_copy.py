"""A topic id whose first copy the RSM records vouches for its own location record (`_complete.json`).

Why: in a store whose older segments predate the location record (no `_scanned.json`), readers list the
buckets whole on every plan of a topic id not marked complete, to find what an older release wrote without
recording it. A topic id born after the record existed has nothing of the kind, but nothing said so until
`rsm store locate --record` ran: every plan of a new topic paid the scan. The rule (also in
`rsm.store.locations`):

1. cheaply, at copy time, with no request: the copy wrote the topic id's entry for its location (the first
   copy of the id there, as far as this broker knows), and the segment starts where the leader-epoch
   checkpoint Kafka hands with it starts. Kafka writes its whole epoch cache up to the segment's end into
   that checkpoint, and the cache's first entry starts at the log's start offset: a segment starting there
   is the partition's first, so no offset of this partition was tiered before it, at any location;
2. then, off the copy path (`LocationNotes`' thread) and only for such copies: the other partitions may
   have been tiered by an older release (during a rolling upgrade, or before the default bucket or prefix
   changed) at a location nobody recorded. So the directories of every bucket a scan would list are walked
   (delimited listings: the names of directories, never a key below a topic's directory, the store's own
   `_rsm/` documents left out) for a directory named `<anything>-<topic id>`; the id is marked complete only
   when each one found lies at a location its record names, read after the walk (a recording copy records
   before it writes, so a directory the walk saw has its entry by then). A walk that needs more than
   `WALK_LISTINGS` listings (a store with very many prefixes) marks nothing: readers scan as before.

So a topic id an older release also wrote is marked only where everything it wrote lies at a recorded
location (as `rsm store locate --record` would mark it), and never when its segments sit anywhere else.
What no marker can rule out is the same as for `locate --record`: an older release writing the topic id
somewhere new after the mark.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable

from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.store.layout import Location
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectStore
from segment_format.errors import CorruptRecordError
from segment_format.leader_epoch import LeaderEpochCheckpoint

log = logging.getLogger(__name__)

WALK_LISTINGS = 32  # listing requests (pages of 1,000 names) a walk of one bucket may take
STORE_DIR = "_rsm"  # the store's own documents (records, overlays, journals) at any prefix
_TOPIC_DIR = re.compile(r"^(?P<name>.+)-(?P<tid>[A-Za-z0-9_-]{22})$")


def starts_the_log(start_offset: int, leader_epoch_checkpoint: bytes) -> bool:
    """Whether a segment starting at `start_offset` is its partition's first: the checkpoint Kafka hands
    with the copy starts at the log's start offset (an unreadable or empty checkpoint says nothing)."""
    try:
        entries = LeaderEpochCheckpoint.from_bytes(leader_epoch_checkpoint).entries
    except (CorruptRecordError, ValueError):
        return False
    return bool(entries) and entries[0].start_offset == start_offset


def topic_id_dirs(
    store: ObjectStore, bucket: str, topic_id: uuid.UUID, budget: int = WALK_LISTINGS
) -> list[str] | None:
    """Every directory named `<anything>-<topic id>` in the bucket (its key, ending in '/'), by walking
    directory names; None when the walk would take more than `budget` listing requests."""
    tid = uuid_to_base64(topic_id)
    found: list[str] = []
    todo, spent = [""], 0
    while todo:
        prefix = todo.pop()
        names = store.list_dirs(bucket, prefix)
        spent += max(1, -(-len(names) // 1000))
        if spent > budget:
            return None
        for name in names:
            m = _TOPIC_DIR.match(name)
            if m is not None:  # a topic's directory (its partitions below): another id's is not entered
                if m["tid"] == tid:
                    found.append(f"{prefix}{name}/")
            elif name != STORE_DIR:
                todo.append(f"{prefix}{name}/")
    return found


def vouch_for_first_copy(
    registry: LocationRegistry, topic: str, topic_id: uuid.UUID | str, buckets: Iterable[str]
) -> bool:
    """Step 2 of the module docstring for a copy that passed step 1: mark the topic id complete when every
    directory of it in `buckets` lies at a location its record names. True if marked."""
    tid = to_uuid(topic_id)
    if registry.scanned_since() is not None:
        return False  # the store-wide marker vouches for every topic id first written since
    scanned = sorted(set(buckets))
    found: list[Location] = []
    for bucket in scanned:
        dirs = topic_id_dirs(registry.store, bucket, tid)
        if dirs is None:
            log.info("%s (topic id %s): too many directories in bucket %s to tell whether an older release "
                     "wrote it; readers scan for it until `rsm store locate --record`", topic,
                     uuid_to_base64(tid), bucket)  # fmt: skip
            return False
        for directory in dirs:
            name = directory.rstrip("/").rpartition("/")[2][: -len(uuid_to_base64(tid)) - 1]
            if not name.endswith(topic):
                return False  # another name under this id: not a directory this topic's readers know
            found.append(Location(bucket, directory[: len(directory) - len(topic) - 24]))
    record = registry.lookup(topic, tid)  # after the walk: a directory it saw was recorded before
    if record.complete:
        return False
    unrecorded = [loc for loc in found if loc not in record.locations]
    if unrecorded:
        log.info("%s (topic id %s) has segments at %s, which its record does not name: not marked complete",
                 topic, uuid_to_base64(tid), ", ".join(map(str, unrecorded)))  # fmt: skip
        return False
    registry.mark_complete(topic, tid, scanned, by="copy")
    log.info("marked the location record of %s (topic id %s) complete: its first copy recorded it",
             topic, uuid_to_base64(tid))  # fmt: skip
    return True
