"""Every place a topic's segments went: the location record kept by the RSM, and the scan for old stores.

A topic's bucket and prefix can change over its life (`unchecked.rsm.bucket`, its overlay, `rsm migrate
move`), and each segment stays where it was written. Readers without a broker (the Spark reader, `rsm
migrate`, `rsm store`) must still find all of them, so the RSM records each location a topic id writes to,
once, before the first segment lands there. The record is a format other tools read (its documents, their
names and JSON: `rsm.stored.location_record`; this module lists, reads and writes them through a store):

    <broker bucket>/<broker prefix>_rsm/topic-locations/<topic>-<topicId base64>/<digest>.json
    {"version": 1, "topic": "t", "topic_id": "<22-char base64>", "bucket": "b", "prefix": "p/",
     "recorded_ms": 1700000000000[, "found_by": "fetch" | "delete" | "scan"]}

`<digest>` is the first 32 hex digits of SHA-256 over `bucket + "\\n" + prefix`, so recording a location
is an idempotent PUT of its own object: two brokers recording the same or different locations at once
never overwrite each other's entries (one document per topic would lose one of two concurrent updates).
The record lives beside the topic overlays, under the broker's default location, which every tool
configured like the brokers knows.

Who writes an entry: a copy (and `rsm migrate move`) before the first object lands at a location: no
`found_by`, and `recorded_ms` dates the topic id (a re-created topic's live id is the one written last).
An entry with `found_by` records a location where segments were found rather than written: by the RSM
fetching from or deleting in a location other than its default (`fetch`, `delete`: the location came from
Kafka's custom metadata, so after the broker's default `bucket`/`prefix` changed, the old location is
recorded in the new default's record as soon as a broker touches it), or by `rsm store locate --record`
(`scan`). Such an entry says nothing about when the topic id was written, so it never dates it.

Beside a topic id's entries, `_log-start-<partition>-<offset>`: how far the RSM's deletes moved each
partition's log start (`rsm.store.log_starts`), which readers compare with the history they find.

An entry lives as long as its topic id has anything in the store: `rsm migrate gc` removes a topic id's
entries (and log-start marks) once no recorded location holds any object of it and no unfinished
migration names it (`rsm.migrate.gc_records`).

Stores written before this record existed (or locations recorded only partly) are found by a scan: every
manifest key in the buckets that the configuration and the topic overlays name is parsed as
`<prefix><topic>-<topicId>/<partition>/<offset>-<segmentId>.manifest`. `rsm store locate --record` runs
that scan once and writes what it found plus a `_complete.json` marker for each topic id, after which
readers trust the record alone for that topic id.

Topic ids born after such a scan need none: what the scan was for (segments written without a record)
cannot exist for them, since every copy since records its location first. So a store-wide `rsm store
locate --record` also writes one marker for the whole record,

    <broker bucket>/<broker prefix>_rsm/topic-locations/_scanned.json
    {"version": 1, "scanned_ms": <when the scan began>, "buckets": ["b", ...], "by": "locate" | "copy"}

and readers trust the record alone for every topic id whose first copy entry (`recorded_ms`, no
`found_by`) is not older than `scanned_ms` (a topic id asked for by name: the names a pattern matches are
still scanned for, since a name the record lacks has no entry to vouch for it). An id with no entry of
its own, say one tiered only by an older release during a rolling upgrade, is scanned for as before.

A store the record was kept for from its first segment needs no scan at all: the RSM writes the marker
itself (`by: copy`) when it records the first entry of an empty record and none of the buckets a scan
would list (the configuration's, the overlays', the copy's own) holds a segment. Without the marker,
every plan of a topic id not marked complete lists those buckets.

In a store without it, the RSM marks a topic id complete itself (`_complete.json` with `"by": "copy"`)
when it records the id's first copy (`rsm.store.first_copy`): a copy that wrote the id's entry for its
location and whose segment starts where the leader-epoch checkpoint Kafka hands with it starts (the log's
start offset: no offset of that partition was tiered before, anywhere) has the buckets a scan would list
walked, directory names only, off the copy path; the id is marked when every directory of it found there
lies at a location its record names. A topic id an older release wrote somewhere its record does not name
is never marked; one it wrote only at recorded locations is marked, as `locate --record` would mark it.

Readers list only what a topic name needs: the keys under `<record>/<topic>-` (`topic_lookups`: every id
of the name, its entries read at once) rather than the whole record, and a catalog keeps what it read
until a registry of this process writes to the record (`writes`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.store.concurrency import map_concurrently
from rsm.store.layout import Location
from rsm.store.log_starts import raise_mark
from rsm.store.objects import ObjectInfo, ObjectNotFound, ObjectStore
from rsm.stored.layout import MANIFEST_KEY
from rsm.stored.location_record import (
    COMPLETE_MARKER,
    ENTRY_LEAF,
    REGISTRY_DIR,
    SCANNED_MARKER,
    TOPIC_DIR,
    FoundBy,
    LocationEntry,
    RecordMarker,
    entry_doc,
    entry_location,
    recorded_ms,
    scanned_ms_of,
    topic_dir,
    written_by_copy,
)
from rsm.stored.log_start import is_mark, parse_marks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FoundTopicDir:
    """A `<prefix><name>-<topicId>/` directory holding manifests, found by scanning a bucket.

    The prefix and topic name cannot be told apart from the key alone when the prefix does not end in
    '/' (prefix `x` + topic `orders` looks like topic `xorders`), so `name` is everything after the last
    '/': callers match a topic as a suffix of it and confirm with a manifest's own topic field.
    """

    bucket: str
    directory: str  # key up to and including the last '/' before the name
    name: str
    topic_id: uuid.UUID
    sample_manifest: str

    def location_for(self, topic: str) -> Location | None:
        """The location if this directory can belong to `topic` (its name ends with the topic's)."""
        if not self.name.endswith(topic):
            return None
        return Location(self.bucket, self.directory + self.name[: -len(topic)])


def scan_bucket(store: ObjectStore, bucket: str) -> list[FoundTopicDir]:
    """Every topic directory with at least one committed segment in a bucket (one listing)."""
    found: dict[tuple[str, str, str], FoundTopicDir] = {}
    for key in store.list(bucket, ""):
        m = MANIFEST_KEY.match(key)
        if m is None:
            continue
        ident = (m["dir"], m["name"], m["tid"])
        if ident not in found:
            try:
                tid = to_uuid(m["tid"])
            except ValueError:
                continue
            found[ident] = FoundTopicDir(bucket, m["dir"], m["name"], tid, key)
    return list(found.values())


def bucket_holds_segment(store: ObjectStore, bucket: str) -> bool:
    """Whether any committed segment (a manifest key of any prefix) lies in the bucket: listed only until
    the first one (on S3 a page at a time; an empty or missing bucket is one request)."""
    if not store.ranged_listing:
        return any(MANIFEST_KEY.match(key) for key in store.list(bucket, ""))
    after = ""
    while True:
        page = store.list_from(bucket, "", start_after=after, limit=1000)
        if any(MANIFEST_KEY.match(o.key) for o in page):
            return True
        if len(page) < 1000:
            return False
        after = page[-1].key


class RecordLookup(NamedTuple):
    """One topic id's record: its locations in the order first recorded, whether a scan marked it
    complete, when its first copy entry was written (None when only found entries name it), and each
    partition's log-start mark as (partition, offset) pairs (`rsm.store.log_starts`)."""

    locations: list[Location]
    complete: bool
    first_written_ms: int | None
    log_starts: tuple[tuple[int, int], ...] = ()
    last_written_ms: int | None = None  # the newest copy entry's time (dates a re-created topic's ids)


# record (as `LocationRegistry.describe` names it) -> writes this process made to it, through any registry
# of it: a reader's copy of the record is stale once the count moved (`LocationRegistry.writes`)
_WRITES: dict[str, int] = {}
_WRITES_LOCK = threading.Lock()


class LocationRegistry:
    """The per-topic location record under the broker's default location (see the module docstring)."""

    def __init__(self, store: ObjectStore, bucket: str, prefix: str) -> None:
        self.store = store
        self.bucket = bucket
        self.prefix = prefix
        self._recorded: set[tuple[uuid.UUID, Location]] = set()
        self._lock = threading.Lock()
        self._fresh_checked = False

    def _topic_dir(self, topic: str, topic_id: uuid.UUID | str) -> str:
        return topic_dir(self.prefix, topic, topic_id)

    def describe(self) -> str:
        return self.store.describe(self.bucket, self.prefix + REGISTRY_DIR)

    def writes(self) -> int:
        """How many writes this process has made to this record, through any registry of it (an entry, a
        marker, a log-start mark): what a reader caching the record compares to know its copy is current
        (`rsm migrate` records locations while its catalog plans)."""
        with _WRITES_LOCK:
            return _WRITES.get(self.describe(), 0)

    def _wrote(self) -> None:
        with _WRITES_LOCK:
            _WRITES[self.describe()] = _WRITES.get(self.describe(), 0) + 1

    def record(
        self,
        topic: str,
        topic_id: uuid.UUID | str,
        location: Location,
        *,
        found_by: FoundBy | None = None,
    ) -> bool:
        """Make sure `location` is in the topic id's record; True if this call wrote it.

        Called by every copy before its first upload, so it must cost nothing on the hot path: a location
        already recorded by this process is answered from memory, one already in the store by a HEAD.
        `found_by`: the location was found, not written to (see the module docstring).
        """
        tid = to_uuid(topic_id)
        ident = (tid, location)
        with self._lock:
            if ident in self._recorded:
                return False
        entry = LocationEntry(topic, tid, location, int(time.time() * 1000), found_by)
        key = self._topic_dir(topic, tid) + entry.leaf
        wrote = False
        if not self.store.exists(self.bucket, key):
            self.store.put(self.bucket, key, entry.to_bytes())
            self._wrote()
            how = "" if found_by is None else f" (found by a {found_by.value})"
            log.info("recorded location %s of topic %s (%s)%s", location, topic, uuid_to_base64(tid), how)
            wrote = True
        with self._lock:
            self._recorded.add(ident)
        return wrote

    def known(self, topic_id: uuid.UUID, location: Location) -> bool:
        """Whether this process recorded (or found) the entry already, so `record` would write nothing.

        One set lookup without the lock (atomic in CPython): a stale miss only costs `record` a HEAD.
        """
        return (topic_id, location) in self._recorded

    def forget(self, topic_id: uuid.UUID | str) -> None:
        """Drop this process's memory of a topic id's entries (after `rsm migrate gc` removed them)."""
        tid = to_uuid(topic_id)
        with self._lock:
            self._recorded = {ident for ident in self._recorded if ident[0] != tid}
        self._wrote()

    def topics(self) -> dict[str, dict[uuid.UUID, int]]:
        """Every (topic name -> topic id -> newest recorded_ms of a copy's entry; 0 if only found) in the
        record."""
        out: dict[str, dict[uuid.UUID, int]] = {}
        base = self.prefix + REGISTRY_DIR
        found: list[tuple[str, uuid.UUID, str]] = []
        for key in self.store.list(self.bucket, base):
            rest = key[len(base) :]
            directory, _, leaf = rest.partition("/")
            m = TOPIC_DIR.match(directory)
            if m is None or not ENTRY_LEAF.fullmatch(leaf):
                continue
            try:
                found.append((m["topic"], to_uuid(m["tid"]), key))
            except ValueError:
                continue
        docs = map_concurrently(self._read, [key for *_, key in found])
        for (topic, tid, _), entry in zip(found, docs, strict=True):
            stamp = recorded_ms(entry) if entry and written_by_copy(entry) else 0
            ids = out.setdefault(topic, {})
            ids[tid] = max(ids.get(tid, 0), stamp)
        return out

    def topic_names(self) -> list[str]:
        """Every topic name with a directory in the record: one delimited listing (names only, no entry
        read)."""
        names = self.store.list_dirs(self.bucket, self.prefix + REGISTRY_DIR)
        return sorted({m["topic"] for m in map(TOPIC_DIR.match, names) if m is not None})

    def topic_lookups(self, topic: str) -> dict[uuid.UUID, RecordLookup]:
        """`lookup` of every id the topic name has in the record, from one listing of the keys under
        `<record>/<topic>-` (on S3 that prefix alone: no other topic's keys but those of a name that
        extends this one after a '-'), the entries of all its ids read at once."""
        base = self.prefix + REGISTRY_DIR
        by_dir: dict[str, list[str]] = {}
        for obj in self.store.list_from(self.bucket, f"{base}{topic}-"):
            directory = obj.key[len(base) :].partition("/")[0]
            m = TOPIC_DIR.match(directory)
            if m is not None and m["topic"] == topic:
                by_dir.setdefault(directory, []).append(obj.key)
        ids: dict[str, uuid.UUID] = {}
        for directory in by_dir:
            try:
                ids[directory] = to_uuid(directory[len(topic) + 1 :])
            except ValueError:
                continue
        entries = [k for d in ids for k in by_dir[d] if ENTRY_LEAF.fullmatch(k.rpartition("/")[2])]
        docs = dict(zip(entries, map_concurrently(self._read, entries), strict=True))
        return {tid: self._lookup_of(f"{base}{d}/", by_dir[d], docs) for d, tid in ids.items()}

    def entries(self) -> dict[tuple[str, uuid.UUID], list[ObjectInfo]]:
        """Every topic id's record objects (its entries, its `_complete.json` marker and its log-start
        marks), from one listing;
        objects of other shapes under the record's directory are left out (nothing here owns them)."""
        out: dict[tuple[str, uuid.UUID], list[ObjectInfo]] = {}
        base = self.prefix + REGISTRY_DIR
        for obj in self.store.list_objects(self.bucket, base):
            directory, _, leaf = obj.key[len(base) :].partition("/")
            m = TOPIC_DIR.match(directory)
            if m is None or not (leaf == COMPLETE_MARKER or ENTRY_LEAF.fullmatch(leaf) or is_mark(leaf)):
                continue
            try:
                tid = to_uuid(m["tid"])
            except ValueError:
                continue
            out.setdefault((m["topic"], tid), []).append(obj)
        return out

    def locations(self, topic: str, topic_id: uuid.UUID | str) -> list[Location]:
        """The locations recorded for one topic id, in the order they were first recorded."""
        return self.lookup(topic, topic_id)[0]

    def lookup(self, topic: str, topic_id: uuid.UUID | str) -> RecordLookup:
        """`locations`, `is_complete` and the first copy's time from one listing of the topic id's record
        (its entries read at once): what a planner asks first, before anything else can start."""
        directory = self._topic_dir(topic, topic_id)
        keys = self.store.list(self.bucket, directory)
        records = [k for k in keys if k.endswith(".json") and not k.endswith(COMPLETE_MARKER)]
        docs = dict(zip(records, map_concurrently(self._read, records), strict=True))
        return self._lookup_of(directory, keys, docs)

    def _lookup_of(
        self, directory: str, keys: list[str], docs: dict[str, dict[str, object] | None]
    ) -> RecordLookup:
        """A topic id's `RecordLookup` from the listing of its record directory and its entries read."""
        found: list[tuple[int, Location]] = []
        written: list[int] = []
        complete = directory + COMPLETE_MARKER in keys
        records = [k for k in keys if k.endswith(".json") and not k.endswith(COMPLETE_MARKER)]
        for key in records:
            doc = docs.get(key)
            if doc is None:
                continue
            try:
                stamp, location = entry_location(doc)
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring malformed location record %s", self.store.describe(self.bucket, key))
                continue
            found.append((stamp, location))
            if written_by_copy(doc):
                written.append(stamp)
        locations = [loc for _, loc in sorted(found, key=lambda x: x[0])]
        starts = tuple(sorted(parse_marks(directory, keys).items()))
        first, last = (min(written), max(written)) if written else (None, None)
        return RecordLookup(locations, complete, first, starts, last)

    def note_log_start(self, topic: str, topic_id: uuid.UUID | str, partition: int, offset: int) -> bool:
        """Raise the partition's log-start mark to `offset` (a delete through the RSM reached it);
        True when a mark was written (`rsm.store.log_starts`)."""
        wrote = raise_mark(self.store, self.bucket, self._topic_dir(topic, topic_id), partition, offset)
        if wrote:
            self._wrote()
        return wrote

    def is_complete(self, topic: str, topic_id: uuid.UUID | str) -> bool:
        """Whether a scan recorded every location of this topic id (`rsm store locate --record`)."""
        return self.store.exists(self.bucket, self._topic_dir(topic, topic_id) + COMPLETE_MARKER)

    def mark_complete(
        self, topic: str, topic_id: uuid.UUID | str, scanned_buckets: Iterable[str], by: str = "locate"
    ) -> None:
        """Write the topic id's `_complete.json`: its record names every location of it (module docstring;
        `by`: `locate` after a scan, `copy` for a topic id whose first copy the RSM recorded)."""
        marker = RecordMarker(int(time.time() * 1000), tuple(scanned_buckets), by)
        key = self._topic_dir(topic, topic_id) + COMPLETE_MARKER
        self.store.put(self.bucket, key, marker.to_bytes(sort_keys=False))
        self._wrote()

    def _scanned_key(self) -> str:
        return self.prefix + REGISTRY_DIR + SCANNED_MARKER

    def scanned_since(self) -> int | None:
        """When the store-wide scan behind `_scanned.json` began (ms), or None: topic ids first written
        since are recorded whole (module docstring)."""
        try:
            return scanned_ms_of(self.store.get(self.bucket, self._scanned_key()))
        except (ObjectNotFound, FileNotFoundError):
            return None
        except (KeyError, TypeError, ValueError):
            log.warning("ignoring malformed marker %s", self.store.describe(self.bucket, self._scanned_key()))
            return None

    def mark_scanned(self, scanned_ms: int, buckets: Iterable[str], by: str) -> None:
        """Write `_scanned.json`: a scan that began at `scanned_ms` left nothing of `buckets` unrecorded."""
        marker = RecordMarker(scanned_ms, tuple(set(buckets)), by)
        self.store.put(self.bucket, self._scanned_key(), marker.to_bytes())
        self._wrote()
        log.info("marked %s: every topic id first written since is recorded whole", self.describe())

    def mark_scanned_if_fresh(self, buckets: Callable[[], Iterable[str]]) -> bool:
        """Once per process, before a copy's first entry: when the record is empty and no bucket a scan
        would list holds a segment, nothing predates the record, so mark it (`by: copy`). True if marked.

        Costs one listing request per process when the record has anything in it (the usual case)."""
        with self._lock:
            if self._fresh_checked:
                return False
            self._fresh_checked = True
        began = int(time.time() * 1000)
        if self.store.list_from(self.bucket, self.prefix + REGISTRY_DIR, limit=1):
            return False
        scanned = list(buckets())
        if any(bucket_holds_segment(self.store, b) for b in scanned):
            return False
        self.mark_scanned(began, scanned, "copy")
        return True

    def _read(self, key: str) -> dict[str, object] | None:
        try:
            return entry_doc(self.store.get(self.bucket, key))
        except ObjectNotFound:
            return None
        except ValueError:
            log.warning("ignoring malformed location record %s", self.store.describe(self.bucket, key))
            return None
