"""How far the RSM's own deletes moved each partition's log start: what readers measure a hole against.

Why: a reader without a broker sees only what the store holds. When the oldest segments of a partition are
deleted behind the RSM's back (by hand, a lifecycle rule, a bucket policy) or sit in a location the reader
does not know, its history simply starts later, exactly as if Kafka's retention had deleted them, and a
query for `earliest` would silently return a shorter result. Kafka's retention deletes through the RSM
(`delete_log_segment_data`), so the RSM notes there how far the deletes reached: a history that starts
past that mark lost offsets no delete through the RSM accounts for.

The mark of a partition is one small object beside the topic id's location record
(`rsm.store.locations`), its offset in the name (the body says the same, for people and other tools):

    <record dir><topic>-<topicId base64>/_log-start-<partition>-<20-digit offset>

(its name and body: `rsm.stored.log_start`).

`offset` is one past the end offset of the segment deleted (Kafka's retention deletes from the oldest
segment up, so that is the partition's new log start). The name carries the value, so a reader learns every
partition's mark from the listing of the record it makes anyway (no GET), two brokers marking at once
never overwrite each other (each writes its own name, readers take the greatest), and a lost or late
mark can only make the mark lower. The writer removes the lower marks of the partition it lists.

Soundness. A mark never lies above where deletes through the RSM reached, so a history starting past it
has lost offsets; the reverse does not hold: a delete of a segment that is not the oldest (a copy Kafka
abandoned, a truncated leader-epoch branch, a deleted topic) raises the mark past the log start, and the
loss of the oldest segments is then no longer seen (nothing is reported wrongly, something may go
unreported). A partition whose segments were never deleted through the RSM has no mark: nothing to compare
with (with `kafka.bootstrap.servers` the reader asks the brokers' log start instead). `rsm migrate gc`
removes the marks with the rest of the topic id's record.

Cost: per delete through the RSM, one listing of the partition's marks (a handful of keys), one PUT when
the mark rises, one DELETE per lower mark; nothing per fetch or copy, and nothing more for readers.
"""

from __future__ import annotations

import logging
import time

from rsm.store.objects import ObjectStore
from rsm.stored.log_start import LOG_START, is_mark, mark_body, mark_key

log = logging.getLogger(__name__)


def raise_mark(store: ObjectStore, bucket: str, record_dir: str, partition: int, offset: int) -> bool:
    """Make the partition's mark at least `offset`; True when this call wrote one. The partition's lower
    marks are removed after the new one is in place, so a reader always sees the greatest."""
    prefix = f"{record_dir}{LOG_START}{partition}-"
    listed = [k for k in store.list(bucket, prefix) if is_mark(k[len(record_dir) :])]
    marks = {key: int(key.rsplit("-", 1)[1]) for key in listed}
    if marks and max(marks.values()) >= offset:
        return False
    body = mark_body(partition, offset, int(time.time() * 1000))
    store.put(bucket, mark_key(record_dir, partition, offset), body)
    for key in marks:  # all lower; removed once the new mark is in place
        store.delete(bucket, key)
    log.debug(
        "marked the log start of partition %d at %d in %s",
        partition,
        offset,
        store.describe(bucket, record_dir),
    )
    return True
