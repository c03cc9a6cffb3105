"""What interrupted writes of a segment leave behind, found and removed in one place.

A copy killed with `kill -9` (a broker or bridge crash, an OOM kill) runs no cleanup: on the file store its
temporary files (`.<stem>.log.tmp-<hex>`, hidden from listings) stay forever, on S3 its multipart upload
stays incomplete and billed until a lifecycle rule reaps it, if any (20 such kills left 28.6 MB
behind). Kafka gives every copy attempt a new segment id and, later, deletes the ids whose copy never
finished (`delete_log_segment_data`); so a segment's leftovers are found by its stem, and removed:

- by `delete_log_segment_data`, after the segment's objects;
- by a copy when it ends, failed or not: what its own failed writes left, what an earlier killed attempt
  with the same segment id left, and uploads a botocore retry of CreateMultipartUpload started behind our
  back (the first request succeeded, its answer was lost);
- by `rsm migrate gc` (to come), for stems Kafka no longer knows: `segment_leftovers` is its entry point.

Why it is safe to remove everything found: the keys are the segment's own (its stem holds the segment id),
and Kafka never runs two copies of one segment id at once, so when a copy or a delete of a segment runs,
no other write of its keys can be under way.
"""

from __future__ import annotations

import logging

from rsm.store.layout import SEGMENT_SUFFIXES
from rsm.store.objects import ObjectStore, UnfinishedWrite

log = logging.getLogger(__name__)


def segment_object_keys(stem: str) -> tuple[str, ...]:
    """Every object key a segment with this stem (`<prefix><topic>-<id>/<partition>/<offset>-<id>`) has."""
    return tuple(stem + suffix for suffix in SEGMENT_SUFFIXES)


def segment_leftovers(store: ObjectStore, bucket: str, stem: str) -> list[UnfinishedWrite]:
    """The temporary files and incomplete multipart uploads that writes of one segment's objects left.

    Nothing else is answered: not the segment's objects themselves, not another segment's leftovers.
    """
    return store.unfinished_writes(bucket, segment_object_keys(stem))


def remove_segment_leftovers(store: ObjectStore, bucket: str, stem: str) -> list[UnfinishedWrite]:
    """Remove what `segment_leftovers` finds; returns what was removed. A store failure is raised (the
    caller decides whether it fails its operation)."""
    removed: list[UnfinishedWrite] = []
    for write in segment_leftovers(store, bucket, stem):
        if store.discard(write):
            log.info("removed %s", write)
            removed.append(write)
    return removed
