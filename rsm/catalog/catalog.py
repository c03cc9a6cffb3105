"""`TopicCatalog`: a topic's ids, locations, segments and histories in a configured store, no broker.

Which topic id a name means: a topic deleted and re-created keeps its name and gets a new id, and both
ids' segments may still be in the store. Without a broker the live one is the id written most recently
(its newest location record, else its newest manifest); callers can name another id.

Where a topic id's segments are: the broker's default location, the location its overlay names, every
location in its record (`rsm.store.locations`), and, unless a scan has recorded them all, every topic
directory found by listing the buckets the configuration and the overlays name (once per catalog).

What a catalog reads of a topic name it keeps: the record's entries of every id of the name (the keys under
`<record>/<topic>-` only, `LocationRegistry.topic_lookups`) and the name's overlays are read once, however
often a plan asks (`topic_ids`, `live_topic_id`, `locations`), and read again only after this process wrote
to the record (`LocationRegistry.writes`: `rsm migrate` records new locations while its catalog plans). A
plan of one topic lists nothing of another's.

What a plan must not pass over in silence (`rsm.catalog.holes`, `rsm.catalog.unreadable`): a location the
record or the overlay names that cannot be read (`unreadable`), and the holes of a partition's history,
measured against the log-start marks the RSM's deletes left in the record (`recorded_starts`, `holes`),
each naming where the catalog looked (`looked_in`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from rsm.api.metadata import uuid_to_base64
from rsm.catalog.history import PartitionHistory, resolve_history
from rsm.catalog.holes import Hole, before_start, between_segments, recorded_start_why
from rsm.catalog.keys import partitions_at
from rsm.catalog.ranged import EpochCache, RangedHistory
from rsm.catalog.segments import CatalogError, StoredSegment, list_segments, map_concurrently, read_manifest
from rsm.catalog.topic_listing import TopicLister
from rsm.catalog.unreadable import OVERLAY, RECORD, UnreadableLocation, location_problem
from rsm.config.settings import RsmConfig
from rsm.store.home import CatalogHome, catalog_home, data_default
from rsm.store.layout import Location
from rsm.store.locations import FoundTopicDir, LocationRegistry, RecordLookup, scan_bucket
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.store.overlays import TopicOverlayStore, named_buckets
from rsm.stored.overlay import TopicOverlay

log = logging.getLogger(__name__)

__all__ = ["CatalogError", "TopicCatalog", "TopicNotFound"]


T = TypeVar("T")

# topic ids whose incomplete location record was reported (once per process: a stream plans every trigger)
_SCAN_NOTED: set[tuple[str, uuid.UUID]] = set()
_UNREAD = object()


def _missing_ok(call: Callable[[], T], default: T) -> T:
    """An earlier default's bucket may be gone: it then holds nothing."""
    try:
        return call()
    except (FileNotFoundError, ObjectNotFound):
        return default


class TopicNotFound(CatalogError):
    """No committed segment of the topic anywhere the catalog looked (the message lists where)."""


class _Seen:
    """What the catalog learned of one topic id while listing it: where it looked, which locations the
    record or overlay named (and how), which held something, and why some could not be listed."""

    def __init__(self) -> None:
        self.where: list[Location] = []
        self.named: dict[Location, str] = {}
        self.holding: set[Location] = set()
        self.failed: dict[Location, str] = {}
        self.record: RecordLookup | None = None
        self.unreadable: list[UnreadableLocation] | None = None


class TopicCatalog:
    """Read-only questions about what a store holds (see the module docstring)."""

    def __init__(
        self,
        config: RsmConfig,
        store: ObjectStore | None = None,
        *,
        scan: bool = True,
        also: Sequence[Location] = (),
        trust_record: bool = True,
    ) -> None:
        self.config = config
        self.store = store or ObjectStore.from_config(config)
        self.default = data_default(config)  # where new segments go
        self.home = catalog_home(config)  # where the overlays and the location record live (rsm.store.home)
        CatalogHome(self.store, self.home, ttl_ms=0).check()  # a moved (or half-moved) catalog is refused
        self.registry = LocationRegistry(self.store, self.home.bucket, self.home.prefix)
        self.also = [loc for loc in dict.fromkeys(also) if loc != self.default]
        self._older = [LocationRegistry(self.store, loc.bucket, loc.prefix) for loc in self.also]
        self.overlays = TopicOverlayStore(self.store, self.home.bucket, self.home.prefix)
        self._scan_enabled = scan
        # whether a complete record stands in for a scan; False for `rsm store locate`, which writes them
        self._trust_record = trust_record and not self.also
        self._scanned: list[FoundTopicDir] | None = None
        self._scanned_buckets: list[str] = []
        self._lock = threading.Lock()
        self._overlay_list: list[TopicOverlay] | None = None
        self._since: int | None | object = _UNREAD
        # topic -> (the record's write count when read, every id of the name's record): `_record_of`
        self._records: dict[str, tuple[int, dict[uuid.UUID, RecordLookup]]] = {}
        self._name_overlays: dict[str, list[TopicOverlay]] = {}
        self._seen: dict[tuple[str, uuid.UUID], _Seen] = {}

    # -- discovery -----------------------------------------------------------------------------------
    def _all_overlays(self) -> list[TopicOverlay]:
        if self._overlay_list is None:
            try:
                self._overlay_list = self.overlays.list()
            except Exception as exc:  # noqa: BLE001 - an unreadable overlay must not hide the data
                log.warning("cannot list topic overlays: %s", exc)
                self._overlay_list = []
        return self._overlay_list

    def _overlays_of(self, topic: str) -> list[TopicOverlay]:
        """The overlays stored under a topic name: its own keys listed, once per catalog (every overlay,
        when a scan has listed them all)."""
        if self._overlay_list is not None:
            return [o for o in self._overlay_list if o.topic == topic]
        with self._lock:
            hit = self._name_overlays.get(topic)
        if hit is None:
            try:
                hit = self.overlays.for_topic(topic)
            except Exception as exc:  # noqa: BLE001 - an unreadable overlay must not hide the data
                log.warning("cannot list the topic overlays of %s: %s", topic, exc)
                hit = []
            with self._lock:
                self._name_overlays[topic] = hit
        return hit

    def _record_of(self, topic: str) -> dict[uuid.UUID, RecordLookup]:
        """Every id of the topic name in the location record (`LocationRegistry.topic_lookups`): read once
        per catalog, and again once this process wrote to the record since (module docstring)."""
        writes = self.registry.writes()
        with self._lock:
            hit = self._records.get(topic)
        if hit is not None and hit[0] == writes:
            return hit[1]
        found = self.registry.topic_lookups(topic)
        with self._lock:
            self._records[topic] = (writes, found)
        return found

    def scan_buckets(self) -> list[str]:
        """The buckets a scan lists: the configuration's, the earlier defaults' and every overlay's."""
        return named_buckets(self.default, self._all_overlays(), *(loc.bucket for loc in self.also))

    def _scan(self) -> list[FoundTopicDir]:
        with self._lock:
            if self._scanned is None:
                found: list[FoundTopicDir] = []
                self._scanned_buckets = self.scan_buckets()
                for bucket in self._scanned_buckets:
                    try:
                        found += scan_bucket(self.store, bucket)
                    except (FileNotFoundError, ObjectNotFound):
                        continue
                log.info("scanned %d bucket(s), %d topic directories", len(self._scanned_buckets), len(found))
                self._scanned = found
            return self._scanned

    def scanned_dirs(self) -> list[FoundTopicDir]:
        """Every topic directory the scan found (listing the buckets once per catalog)."""
        return list(self._scan())

    def _scanned_for(self, topic: str, topic_id: uuid.UUID | None = None) -> list[tuple[uuid.UUID, Location]]:
        """(topic id, location) of scanned directories that hold this topic (confirmed by a manifest)."""
        out = []
        for found in self._scan():
            location = found.location_for(topic)
            if location is None or (topic_id is not None and found.topic_id != topic_id):
                continue
            # a prefix without '/' runs into the topic name (`tenant-` + `orders`): a manifest says whose it is
            try:
                manifest = read_manifest(self.store, found.bucket, found.sample_manifest)
            except (CatalogError, ObjectNotFound):
                continue
            if manifest.segment.topic != topic:
                continue
            out.append((found.topic_id, location))
        return out

    def topic_names(self) -> list[str]:
        """Every topic name with a location record, an overlay or (by scan) a committed segment."""
        names = set(self.registry.topic_names()) | {o.topic for o in self._all_overlays()}
        for older in self._older:
            names.update(_missing_ok(older.topic_names, []))
        # always scanned, marker or not: a name the record lacks (an entry `rsm migrate gc` removed while a
        # broker still remembers writing it, a topic an older release tiers during a rolling upgrade) has
        # no topic id to vouch for
        if self._scan_enabled:
            for found in self._scan():
                try:
                    manifest = read_manifest(self.store, found.bucket, found.sample_manifest)
                except (CatalogError, ObjectNotFound):
                    continue
                names.add(manifest.segment.topic)
        return sorted(names)

    def topic_ids(self, topic: str) -> dict[uuid.UUID, int]:
        """Every id the topic name has had in the store -> when it was last written (ms; 0 if unknown)."""
        ids: dict[uuid.UUID, int] = {}
        records = [self._record_of(topic)]
        records += [_missing_ok(lambda r=older: r.topic_lookups(topic), {}) for older in self._older]
        for record in records:
            for tid, found in record.items():
                if found.locations:
                    ids[tid] = max(ids.get(tid, 0), found.last_written_ms or 0)
        for overlay in self._overlays_of(topic):
            ids[overlay.topic_id] = max(ids.get(overlay.topic_id, 0), overlay.updated_ms)
        # a scan finds ids no record names (stores older than the record); once `rsm store locate --record`
        # marked every recorded id of the topic complete, the record names them all (a later id is
        # recorded by the copy that writes it), and the buckets are not listed whole on every plan
        if self._scan_enabled and not (ids and all(self._complete(self._lookup(topic, t)) for t in ids)):
            for tid, _ in self._scanned_for(topic):
                ids.setdefault(tid, 0)
        return ids

    def _lookup(self, topic: str, topic_id: uuid.UUID) -> RecordLookup:
        return self._record_of(topic).get(topic_id) or RecordLookup([], False, None)

    def _scanned_since(self) -> int | None:
        """The record's `_scanned.json` time (read once per catalog; None: no store-wide scan)."""
        with self._lock:
            if self._since is _UNREAD:
                self._since = _missing_ok(self.registry.scanned_since, None)
            return self._since  # type: ignore[return-value]

    def _complete(self, record: RecordLookup) -> bool:
        """Whether the record names every location of the topic id, so no bucket is listed for it: a scan
        marked the id, or the id was first written after a store-wide scan (`rsm.store.locations`).
        Never with earlier defaults (`also`, whose buckets the caller asked to scan) nor for `rsm store
        locate`, which writes these markers."""
        if not self._trust_record:
            return False
        if record.complete:
            return True
        since = self._scanned_since()
        return since is not None and record.first_written_ms is not None and record.first_written_ms >= since

    def live_topic_id(self, topic: str) -> uuid.UUID:
        """The topic id written most recently under this name (the live topic, for a re-created one)."""
        ids = self.topic_ids(topic)
        if not ids:
            raise TopicNotFound(f"topic {topic!r} has no tiered data in {self.searched()}")
        if len(ids) == 1:
            return next(iter(ids))

        # stamps from the record; ids known only from a scan are dated by their newest manifest
        def newest(tid: uuid.UUID) -> int:
            stamp = ids[tid]
            for seg in self.segments(topic, tid):
                stamp = max(stamp, seg.manifest.created_ms)
            return stamp

        return max(ids, key=newest)

    def locations(self, topic: str, topic_id: uuid.UUID) -> list[Location]:
        """Every location that may hold segments of this topic id (see the module docstring)."""
        found = [self.default]
        # the name's overlays and record read at once, once per catalog (usually `topic_ids` read them)
        map_concurrently(
            lambda read: read(), [lambda: self._overlays_of(topic), lambda: self._record_of(topic)]
        )
        overlays, record = self._overlays_of(topic), self._lookup(topic, topic_id)
        recorded, complete = record.locations, self._complete(record)
        seen = self._seen_of(topic, topic_id)
        seen.record = record
        for overlay in overlays:
            if overlay.topic_id == topic_id:
                found.append(overlay.location(self.default))
                seen.named.setdefault(found[-1], OVERLAY)
        found += recorded
        seen.named.update({loc: RECORD for loc in recorded})
        for older in self._older:
            found += _missing_ok(lambda r=older: r.lookup(topic, topic_id)[0], [])
        if self._scan_enabled and not complete:
            if not self.also and (topic, topic_id) not in _SCAN_NOTED:
                _SCAN_NOTED.add((topic, topic_id))
                log.info(
                    "%s (topic id %s): its location record is not marked complete, so every plan lists "
                    "the bucket(s) whole to find its segments; `rsm store locate --record` marks it and "
                    "every topic first tiered after it (plans then list only the topics' own directories)",
                    topic,
                    uuid_to_base64(topic_id),
                )
            found += [loc for tid, loc in self._scanned_for(topic, topic_id) if tid == topic_id]
        seen.where = list(dict.fromkeys(found))
        return list(seen.where)

    def searched(self) -> str:
        """Where the catalog looked, for 'not found' messages."""
        buckets = self._scanned_buckets or [self.default.bucket]
        where = f"the location record {self.registry.describe()}"
        if self._scan_enabled:
            where += " and a scan of bucket(s) " + ", ".join(self.store.describe(b, "") for b in buckets)
        return where

    # -- segments and histories ----------------------------------------------------------------------
    def segments(
        self, topic: str, topic_id: uuid.UUID, partitions: Iterable[int] | None = None
    ) -> list[StoredSegment]:
        """Committed segments of the topic id at all its locations, sorted by partition and offset."""
        found = list_segments(self.store, topic, topic_id, self.locations(topic, topic_id), partitions)
        self._seen_of(topic, topic_id).holding.update(seg.location for seg in found)
        return found

    def histories(
        self, topic: str, topic_id: uuid.UUID, partitions: Iterable[int] | None = None
    ) -> dict[int, PartitionHistory]:
        """One history per partition that has tiered data."""
        by_partition: dict[int, list[StoredSegment]] = {}
        for seg in self.segments(topic, topic_id, partitions):
            by_partition.setdefault(seg.partition, []).append(seg)
        out = {}
        for partition, segs in sorted(by_partition.items()):
            history = resolve_history(partition, segs)
            for seg, why in history.superseded:
                log.debug("%s-%d: %s not read: %s", topic, partition, seg.manifest_key, why)
            if history.gaps:
                log.warning(
                    "%s-%d (topic id %s): offsets %s are missing from the store",
                    topic,
                    partition,
                    uuid_to_base64(topic_id),
                    ", ".join(f"{a}..{b}" for a, b in history.gaps),
                )
            out[partition] = history
        return out

    # -- ranged histories ------------------------------------------------------------------------------
    def ranged_histories(
        self,
        topic: str,
        topic_id: uuid.UUID,
        partitions: Iterable[int] | None = None,
        *,
        after: Mapping[int, int] | None = None,
        epoch_cache: EpochCache | None = None,
        probe: bool | None = None,
    ) -> dict[int, RangedHistory]:
        """One `RangedHistory` per partition with committed copies: listings only, no manifest read yet.

        ``after``: partition -> a base offset at or before where the caller's range starts (a stream's
        previous end): those partitions are listed from there on (and their first copies, for 'earliest'),
        so the listing does not grow with the history behind it; other partitions are listed whole.
        ``probe`` (default: on S3, where a listing pages 1,000 keys a request and planners would page
        through the whole history): nothing is listed up front but the partitions; each one lists where its
        ranges, its first and its last copies are (`RangedHistory`'s probes), its last copies looked for
        from ``after`` on when given: so neither a restarted stream (which remembers no base) nor a stream
        far behind its topic's end (a listing from ``after`` to the end would grow with the backlog) lists
        more than its ranges. The file store lists each partition whole, once (a local directory listing).
        """
        lister = TopicLister(
            self.store,
            topic,
            topic_id,
            self.locations(topic, topic_id),
            lambda loc: self._partitions_at(topic, topic_id, loc),
        )
        return lister.histories(
            None if partitions is None else set(partitions),
            after=after,
            epoch_cache=epoch_cache,
            probe=self.store.ranged_listing if probe is None else probe,
        )

    # -- what a plan must not pass over (rsm.catalog.holes, rsm.catalog.unreadable) ----------------------
    def _seen_of(self, topic: str, topic_id: uuid.UUID) -> _Seen:
        with self._lock:
            return self._seen.setdefault((topic, topic_id), _Seen())

    def _partitions_at(self, topic: str, topic_id: uuid.UUID, location: Location) -> list[int]:
        """The partitions at one location (`partitions_at`), noting whether it held any; a bucket that is
        gone holds nothing here, and one the store refuses to list is noted as unreadable."""
        seen = self._seen_of(topic, topic_id)
        try:
            found = _missing_ok(lambda: partitions_at(self.store, location, topic, topic_id), [])
        except PermissionError as exc:
            seen.failed[location] = f"access denied: {exc}"
            return []
        if found:
            seen.holding.add(location)
        return found

    def looked_in(self, topic: str, topic_id: uuid.UUID) -> str:
        """Where the catalog looked for the topic id's segments, for messages about what it did not find."""
        where = self._seen_of(topic, topic_id).where or self.locations(topic, topic_id)
        return ", ".join(self.store.describe(loc.bucket, loc.prefix) for loc in where)

    def recorded_starts(self, topic: str, topic_id: uuid.UUID) -> dict[int, int]:
        """partition -> the log start the RSM's deletes reached (`rsm.store.log_starts`), from the record
        listing the plan made already (`locations`)."""
        seen = self._seen_of(topic, topic_id)
        record = seen.record if seen.record is not None else self._lookup(topic, topic_id)
        return dict(record.log_starts)

    def unreadable(
        self, topic: str, topic_id: uuid.UUID, holding: Iterable[Location] = ()
    ) -> list[UnreadableLocation]:
        """The locations the record or the overlay names for the topic id that cannot be read: those
        whose listing failed, and, of those that held nothing in this catalog's listings (nor are in
        ``holding``), the ones whose bucket is missing or refuses access (`rsm.catalog.unreadable`)."""
        seen = self._seen_of(topic, topic_id)
        if seen.unreadable is not None:
            return list(seen.unreadable)
        if not seen.where:
            self.locations(topic, topic_id)
        tid = uuid_to_base64(topic_id)
        readable = seen.holding | set(holding)
        out = []
        for location, named_by in seen.named.items():
            why = seen.failed.get(location)
            if why is None and location not in readable:
                why = location_problem(self.store, location, f"{location.prefix}{topic}-{tid}/")
            if why is not None:
                where = self.store.describe(location.bucket, location.prefix)
                out.append(UnreadableLocation(topic, topic_id, location, where, named_by, why))
        seen.unreadable = out
        return list(out)

    def holes(self, topic: str, topic_id: uuid.UUID, history: PartitionHistory) -> list[Hole]:
        """The holes of a whole partition history (`histories`): before its first offset, measured
        against the partition's log-start mark, and between its segments."""
        where = self.looked_in(topic, topic_id)
        start = self.recorded_starts(topic, topic_id).get(history.partition)
        first = before_start(
            topic, history.partition, history.first_offset, start, recorded_start_why(start or 0), where
        )
        return ([first] if first is not None else []) + between_segments(
            topic, history.partition, history.gaps, where
        )
