"""`rsm migrate gc`: the location records of topic ids that have nothing left in the store.

A topic's location record (`rsm.store.locations`) is kept under the default location, one entry per
(topic id, location), and nothing in Kafka tells the RSM that a topic was deleted: its segments go one
delete at a time, the entries stay. A cluster that creates and deletes topics all day would accumulate
them, and every reader lists them. `gc` removes a topic id's entries (and its `_complete.json` marker)
when all of these hold:

- no location the topic id may use holds any object of it: every recorded location, the default one and
  its overlay's, listed under `<prefix><topic>-<topicId>/` with temporary files, and on S3 its incomplete
  multipart uploads too. So a segment, a forward (a move's), an orphan (removed by the same `gc` first: the
  record goes on a later run) or a copy under way all keep it;
- no unfinished migration names the topic id (a `job.json` under `_rsm/migrate/` that is not `complete`:
  a move or re-encryption cut short is resumed from the record);
- every object of the record is older than the grace period (a copy records its location before its first
  upload: a record younger than that may belong to a copy in flight).

Records are the only way readers find a topic's locations other than the default and its overlay's, so
the removal is careful: the record is read and checked again just before, the marker goes first (a marker
without entries would tell readers the record is complete), and after the removal the locations are listed
once more: an object that appeared meanwhile (a copy that had recorded the location earlier in its process
and uploaded since) gets the entries written back, byte for byte, and the record is reported as kept. The
topic id's encryption memory (`rsm.store.topic_encryption`) goes with its record: a topic id never comes
back, so nothing can need it. Only keys of the record's own shape and that memory are removed; nothing
else under `_rsm/` is touched.

Cost per run: one listing of the record, then one listing per topic id at the default location (a live
topic usually stops there); a topic id with nothing there costs its record's entries (a listing and a GET
each), its overlay (a GET), a listing per location (and one ListMultipartUploads on S3), and the run lists
the migration jobs once.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass

from rsm.api.metadata import uuid_to_base64
from rsm.migrate.gc import Orphan
from rsm.migrate.journal import JOURNAL_DIR
from rsm.store.layout import Location
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectInfo, ObjectNotFound, ObjectStore
from rsm.store.overlays import TopicOverlayStore
from rsm.store.topic_encryption import EncryptionMemory
from rsm.stored.location_record import COMPLETE_MARKER

log = logging.getLogger(__name__)

KIND = "location record"


@dataclass(frozen=True)
class _Candidate:
    topic: str
    topic_id: uuid.UUID
    objects: tuple[ObjectInfo, ...]


class StaleRecords:
    """Finds and removes the location records of topic ids with nothing left (see the module docstring)."""

    def __init__(self, store: ObjectStore, default: Location, home: Location | None = None) -> None:
        self.store = store
        self.default = default  # where new segments go
        self.home = home if home is not None else default  # where the records live (rsm.store.home)
        self.registry = LocationRegistry(store, self.home.bucket, self.home.prefix)
        self.overlays = TopicOverlayStore(store, self.home.bucket, self.home.prefix)
        self.memory = EncryptionMemory(store, self.home, ttl_ms=0)
        self._candidates: dict[tuple[str, ...], _Candidate] = {}
        self._jobs: list[dict[str, object]] | None = None

    # -- finding -----------------------------------------------------------------------------------------
    def scan(self, only: Collection[tuple[str, uuid.UUID]] | None = None) -> list[Orphan]:
        """The records gc may remove (of the given topic ids only, when given), as orphans to report."""
        found: list[Orphan] = []
        try:
            entries = self.registry.entries()
        except (FileNotFoundError, ObjectNotFound):
            return []
        for (topic, tid), objects in sorted(entries.items(), key=lambda e: (e[0][0], str(e[0][1]))):
            if only is not None and (topic, tid) not in only:
                continue
            if self._anything_at(topic, tid, [self.default]):
                continue  # the common case, a live topic, in one listing (before reading its record)
            locations = self._locations(topic, tid)
            if locations is None or self._anything_at(topic, tid, locations) or self._unfinished_job(tid):
                continue
            # the marker first: removed in this order (see the module docstring); the memory last
            ordered = sorted(objects, key=lambda o: (not o.key.endswith(COMPLETE_MARKER), o.key))
            ordered += self._memory(topic, tid)
            orphan = Orphan(
                KIND,
                self.home.bucket,
                tuple(o.key for o in ordered),
                sum(o.size for o in ordered),
                max(o.modified for o in ordered),
                f"topic {topic} (id {uuid_to_base64(tid)}) has no segment, forward or migration left in its "
                f"{len(locations)} location(s): " + ", ".join(str(loc) for loc in locations),
            )
            self._candidates[orphan.keys] = _Candidate(topic, tid, tuple(ordered))
            found.append(orphan)
        return found

    def _locations(self, topic: str, tid: uuid.UUID) -> list[Location] | None:
        """Every location the topic id may hold objects in (recorded, default, its overlay's); None when
        that cannot be told (an unreadable overlay): the record is then kept."""
        try:
            overlay = self.overlays.read(topic, tid)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("cannot read the overlay of topic %s (%s): %s", topic, uuid_to_base64(tid), exc)
            return None
        found = [self.default, *self.registry.locations(topic, tid)]
        if overlay is not None:
            found.append(overlay.location(self.default))
        return list(dict.fromkeys(found))

    def _memory(self, topic: str, tid: uuid.UUID) -> list[ObjectInfo]:
        """The topic id's encryption memory, if it has one (one listing of exactly its key)."""
        key = self.memory.key(topic, tid)
        return [o for o in self.store.list_objects(self.home.bucket, key) if o.key == key]

    def _anything_at(self, topic: str, tid: uuid.UUID, locations: list[Location]) -> bool:
        """Whether any object of the topic id (a temporary file, an incomplete upload too) is at any of
        the locations. A location that cannot be listed counts as holding something."""
        for location in locations:
            directory = f"{location.prefix}{topic}-{uuid_to_base64(tid)}/"
            try:
                if self.store.list(location.bucket, directory, include_temporary=True):
                    return True
                if self.store.uploads_under(location.bucket, directory, limit=1):
                    return True
            except (FileNotFoundError, ObjectNotFound):
                continue  # no such bucket: nothing there
            except Exception as exc:  # noqa: BLE001 - cannot tell: keep the record
                log.warning("cannot list %s: %s", self.store.describe(location.bucket, directory), exc)
                return True
        return False

    def _unfinished_job(self, tid: uuid.UUID) -> bool:
        """Whether a migration journal that is not complete names the topic id."""
        if self._jobs is None:
            self._jobs = []
            base = self.home.prefix + JOURNAL_DIR
            for key in self.store.list(self.home.bucket, base):
                if not re.fullmatch(re.escape(base) + r"[^/]+/job\.json", key):
                    continue
                try:
                    doc = json.loads(self.store.get(self.home.bucket, key))
                except (ObjectNotFound, ValueError):
                    continue
                if isinstance(doc, dict):
                    self._jobs.append(doc)
        b64 = uuid_to_base64(tid)
        return any(j.get("topic_id") == b64 and j.get("status") != "complete" for j in self._jobs)

    # -- removing ----------------------------------------------------------------------------------------
    def remove(self, orphan: Orphan) -> bool:
        """Remove one record found by `scan`; False when it turned out to be needed (kept, or restored)."""
        candidate = self._candidates[orphan.keys]
        topic, tid = candidate.topic, candidate.topic_id
        locations = self._locations(topic, tid)
        if locations is None or self._anything_at(topic, tid, locations) or self._unfinished_job(tid):
            return False
        saved: list[tuple[str, bytes]] = []
        for obj in candidate.objects:
            try:
                saved.append((obj.key, self.store.get(self.home.bucket, obj.key)))
            except ObjectNotFound:
                continue
        for key, _ in saved:  # the marker first
            self.store.delete(self.home.bucket, key)
        self.registry.forget(tid)
        if self._anything_at(topic, tid, locations):
            for key, raw in saved:
                if not key.endswith(COMPLETE_MARKER):  # without the marker readers scan, which is safe
                    self.store.put(self.home.bucket, key, raw)
            log.info("kept the location record of topic %s (%s): it was written to meanwhile", topic,
                     uuid_to_base64(tid))  # fmt: skip
            return False
        log.info("removed the location record of topic %s (%s), %d object(s)", topic, uuid_to_base64(tid),
                 len(saved))  # fmt: skip
        return True
