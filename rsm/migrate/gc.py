"""`rsm migrate gc`: find what interrupted work left in the store, and remove it once it is old enough.

Orphans are objects of this product's shape that no reader can reach:

- segment objects without a manifest: `<prefix><topic>-<topicId>/<partition>/<offset>-<segment id>.log` or
  `.indexes` whose stem has no `.manifest` (a copy the broker gave up on, a move or delete cut short);
- temporary files of the file store's writers: `.<name>.tmp-<12 hex>` beside such objects or under
  `_rsm/` (a process killed while writing);
- incomplete S3 multipart uploads of such keys (a process killed while uploading; they are invisible to
  listings of objects but are billed);
- dangling forwards: a `.forward` (`rsm.store.forward`) whose own stem has no manifest and whose chain of
  forwards reaches no location holding the segment's manifest (the segment was deleted by other means).
  A forward whose stem still has a manifest belongs to a move under way and is never an orphan.

Only objects matching these shapes are looked at: nothing else in a bucket is ever deleted. An orphan is
removed only when every object of it is older than the grace period (default 1 hour, `--grace`), so an
upload or move in flight is never touched: a copy writes its objects within one call, far shorter. Just
before removing a stem's objects the manifest is looked for again, so a copy committed between the scan and
the removal keeps its objects. `gc` is a dry run unless `--apply`.

The scan lists each location once (the whole of every bucket the configuration, the overlays and the
location records name, or one topic's locations with `--topic`), plus one listing of multipart uploads per
bucket on S3. Its plan is recomputed from the store on every run and each removal is idempotent, so `gc`
keeps no per-item journal: a killed run is resumed by running it again.
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rsm.store.forward import chain
from rsm.store.layout import INDEXES_SUFFIX, LOG_SUFFIX, MANIFEST_SUFFIX, Location
from rsm.store.objects import ObjectInfo, ObjectNotFound, ObjectStore, UnfinishedWrite
from rsm.stored.forward import FORWARD_SUFFIX, Forward, ForwardError

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 3600.0
_ID = r"[A-Za-z0-9_-]{22}"
SEGMENT_KEY = re.compile(
    rf"^(?P<dir>(?:.*/)?)(?P<name>[^/]+)-(?P<tid>{_ID})/(?P<partition>\d+)/"
    rf"(?P<offset>\d{{20}})-(?P<sid>{_ID})(?P<suffix>\.log|\.indexes|\.manifest|\.forward)$"
)
TEMP_KEY = re.compile(r"^(?P<parent>(?:.*/)?)\.(?P<name>[^/]+)\.tmp-[0-9a-f]{12}$")
_PARTITION_DIR = re.compile(rf"(?:^|/)[^/]+-{_ID}/\d+/$")


@dataclass(frozen=True)
class Orphan:
    """One thing to remove: a stem's objects, a temporary file, a multipart upload or a forward."""

    kind: str  # "segment objects" | "temporary file" | "multipart upload" | "dangling forward"
    bucket: str
    keys: tuple[str, ...]
    size: int
    modified: float  # the newest modification of its objects (upload: when it was initiated)
    why: str
    upload_id: str | None = None

    def age(self, now: float) -> float:
        return max(0.0, now - self.modified)

    def to_json(self, store: ObjectStore, now: float, grace: float) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "objects": [store.describe(self.bucket, k) for k in self.keys],
            "bytes": self.size,
            "age_s": round(self.age(now), 1),
            "removable": self.age(now) >= grace,
            "why": self.why,
            **({"upload_id": self.upload_id} if self.upload_id else {}),
        }


def _ours_temp(parent: str) -> bool:
    return bool(_PARTITION_DIR.search(parent)) or "_rsm/" in parent or parent.startswith("_rsm")


def scan(store: ObjectStore, units: Iterable[tuple[str, str]]) -> list[Orphan]:
    """Orphans under each (bucket, key prefix) (see the module docstring)."""
    found: list[Orphan] = []
    for bucket, prefix in dict.fromkeys(units):
        objects = store.list_objects(bucket, prefix, include_temporary=True)
        found += _classify(store, bucket, objects)
        found += _uploads(store, bucket, prefix)  # none on the file store: its leftovers are listed above
    return found


def _classify(store: ObjectStore, bucket: str, objects: list[ObjectInfo]) -> list[Orphan]:
    stems: dict[str, dict[str, ObjectInfo]] = defaultdict(dict)
    out: list[Orphan] = []
    for obj in objects:
        m = SEGMENT_KEY.match(obj.key)
        if m is not None:
            stems[obj.key[: -len(m["suffix"])]][m["suffix"]] = obj
            continue
        t = TEMP_KEY.match(obj.key)
        if t is not None and _ours_temp(t["parent"]):
            out.append(Orphan("temporary file", bucket, (obj.key,), obj.size, obj.modified,
                              "a write that never finished (its process was killed)"))  # fmt: skip
    for _stem, parts in sorted(stems.items()):
        if MANIFEST_SUFFIX in parts:
            continue
        data = [parts[s] for s in (LOG_SUFFIX, INDEXES_SUFFIX) if s in parts]
        if data:
            out.append(Orphan("segment objects", bucket, tuple(o.key for o in data), sum(o.size for o in data),
                              max(o.modified for o in data),
                              "no manifest (an interrupted copy or move, or a delete cut short)"))  # fmt: skip
        fwd = parts.get(FORWARD_SUFFIX)
        if fwd is not None and _dangling(store, bucket, fwd.key):
            out.append(Orphan("dangling forward", bucket, (fwd.key,), fwd.size, fwd.modified,
                              "its chain of forwards reaches no copy of the segment"))  # fmt: skip
    return out


def _dangling(store: ObjectStore, bucket: str, key: str) -> bool:
    """Whether the forward at `key` (whose stem has no manifest) leads to no committed copy."""
    m = SEGMENT_KEY.match(key)
    assert m is not None
    try:
        doc = Forward.from_bytes(store.get(bucket, key), store.describe(bucket, key))
    except (ForwardError, ObjectNotFound, OSError) as exc:  # unreadable or gone: left alone
        log.warning("forward %s cannot be read: %s", store.describe(bucket, key), exc)
        return False
    ref = doc.segment
    here = Location(bucket, key[: -len(ref.forward_key(Location(bucket, "")))])
    if ref.forward_key(here) != key:
        return False  # not where its own fields say it is: leave it alone
    if store.exists(bucket, ref.stem(here) + MANIFEST_SUFFIX):
        return False  # a move under way (its source still committed)
    return not any(
        store.exists(location.bucket, ref.stem(location) + MANIFEST_SUFFIX)
        for location in chain(store, here, ref)
    )


def _uploads(store: ObjectStore, bucket: str, prefix: str) -> list[Orphan]:
    return [
        Orphan("multipart upload", bucket, (w.key,), 0, w.started or 0.0,
               "an upload that was never completed (its process was killed)", w.upload_id)
        for w in store.uploads_under(bucket, prefix)
        if SEGMENT_KEY.match(w.key) is not None or "_rsm/" in w.key
    ]  # fmt: skip


def remove(store: ObjectStore, orphan: Orphan) -> bool:
    """Remove one orphan; False when it turned out not to be one any more (a copy committed meanwhile)."""
    if orphan.kind == "multipart upload":
        store.discard(UnfinishedWrite(orphan.bucket, orphan.keys[0], upload_id=orphan.upload_id))
        return True
    if orphan.kind == "segment objects":
        m = SEGMENT_KEY.match(orphan.keys[0])
        assert m is not None
        if store.exists(orphan.bucket, orphan.keys[0][: -len(m["suffix"])] + MANIFEST_SUFFIX):
            return False
    if orphan.kind == "dangling forward" and not _dangling(store, orphan.bucket, orphan.keys[0]):
        return False
    for key in orphan.keys:
        store.delete(orphan.bucket, key)
    return True


def removable(orphans: Iterable[Orphan], grace: float, now: float | None = None) -> list[Orphan]:
    now = time.time() if now is None else now
    return [o for o in orphans if o.age(now) >= grace]
