"""What a migration will do, planned from the catalog (`rsm.catalog`) before anything is written.

A plan is a list of `PlanItem`s, one per segment copy to work on: which segment (topic, topic id,
partition, offsets, segment id), where it is (`source`), where it goes (`destination`, for a move), how
many stored bytes it moves, and its current key id. Items are plain data (JSON and pickle round-trip),
so the journal keeps them and the Spark engine ships them to executors.

Items of one segment id (copies of a segment at several locations, say after an interrupted move) form one
`unit`: a unit's items run one after another in one task, never at once, so two items never write the
same destination objects concurrently.

Where a topic's segments go (`move`): `--to-bucket` / `--to-prefix` when given, else the topic's current
configuration: its overlay (`rsm topic-config`) over the configuration file's `bucket` / `prefix`, as the
RSM resolves them for a new copy. Which key id a re-key wraps under: `--key-id`, else the topic's
`encryption.key.id` resolved the same way.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.catalog.segments import StoredSegment, list_segments, reporting_damage
from rsm.config.settings import RsmConfig, TopicSettings
from rsm.migrate.findings import damaged_manifests, store_problems
from rsm.store.layout import Location
from rsm.stored.forward import FORWARD_SUFFIX, SegmentRef

STAGING_PREFIX = "_rsm-staging/"


def location_tag(location: Location) -> str:
    """A short stable name of a location (journal keys, staging prefixes)."""
    return hashlib.sha256(f"{location.bucket}\n{location.prefix}".encode()).hexdigest()[:12]


def staging_location(location: Location) -> Location:
    """Where an in-place re-encryption stages a segment: the same bucket, a prefix of its own per source."""
    return Location(location.bucket, f"{STAGING_PREFIX}{location_tag(location)}/")


@dataclass(frozen=True)
class PlanItem:
    """One segment copy to work on (see the module docstring)."""

    kind: str
    topic: str
    topic_id: str  # Kafka base64
    partition: int
    start_offset: int
    end_offset: int
    segment_id: str  # Kafka base64
    source: Location
    destination: Location | None = None
    bytes: int = 0
    key_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ref(self) -> SegmentRef:
        return SegmentRef(self.topic, self.topic_id, self.partition, self.start_offset, self.segment_id)

    @property
    def ident(self) -> str:
        """Unique within a job: the segment and the location it is taken from."""
        return f"{self.partition}/{self.start_offset:020d}-{self.segment_id}-{location_tag(self.source)}"

    @property
    def unit(self) -> tuple[int, str]:
        return (self.partition, self.segment_id)

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["source"] = {"bucket": self.source.bucket, "prefix": self.source.prefix}
        doc["destination"] = (
            None
            if self.destination is None
            else {"bucket": self.destination.bucket, "prefix": self.destination.prefix}
        )
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PlanItem:
        d = dict(doc)
        d["source"] = Location(d["source"]["bucket"], d["source"]["prefix"])
        dest = d.get("destination")
        d["destination"] = None if dest is None else Location(dest["bucket"], dest["prefix"])
        d["extra"] = dict(d.get("extra") or {})
        return cls(**d)

    def describe(self) -> str:
        end = self.end_offset if self.end_offset >= self.start_offset else ""  # an import's: not read yet
        return f"{self.topic}-{self.partition} offsets {self.start_offset}..{end} ({self.segment_id})"


def item_for(kind: str, seg: StoredSegment, topic: str, **kwargs: Any) -> PlanItem:
    m = seg.manifest
    return PlanItem(
        kind=kind,
        topic=topic,
        topic_id=m.segment.topic_id,
        partition=seg.partition,
        start_offset=seg.start_offset,
        end_offset=seg.end_offset,
        segment_id=seg.segment_id,
        source=seg.location,
        bytes=m.stored_bytes,
        key_id=None if m.encryption is None else m.encryption.key_id,
        **kwargs,
    )


@dataclass
class Plan:
    """The items of one run, and what the planner left out (already done) with the reason."""

    command: str
    topic: str | None
    topic_id: str | None
    items: list[PlanItem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    params: dict[str, Any] = field(default_factory=dict)
    # problems of the store itself the planner found (verify: holes, unreadable locations)
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    def units(self) -> list[list[PlanItem]]:
        """Items grouped by segment (see the module docstring), in plan order."""
        groups: dict[tuple[int, str], list[PlanItem]] = {}
        for item in self.items:
            groups.setdefault(item.unit, []).append(item)
        return list(groups.values())

    def merge_pending(self, pending: Iterable[PlanItem]) -> None:
        """Add items a killed run left unfinished (from the journal) that the store no longer shows."""
        known = {i.ident for i in self.items}
        for item in pending:
            if item.ident not in known:
                self.items.append(item)
                known.add(item.ident)
        self.items.sort(key=lambda i: (i.partition, i.start_offset, i.segment_id, i.ident))

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "params": self.params,
            "items": [i.to_json() for i in self.items],
            "segments": len(self.items),
            "bytes": self.bytes,
            "skipped": [{"what": w, "why": y} for w, y in self.skipped],
            **({"findings": self.findings} if self.findings else {}),
        }


# -- settings ---------------------------------------------------------------------------------------------
def topic_settings(catalog: TopicCatalog, topic: str, topic_id: uuid.UUID) -> TopicSettings:
    """The topic's settings as the RSM resolves them for a new copy (overlay over the configuration)."""
    overlay = catalog.overlays.read(topic, topic_id)
    config: RsmConfig = catalog.config
    return config.resolve(None, dict(overlay.configs) if overlay else None)


def segments(
    catalog: TopicCatalog, topic: str, topic_id: uuid.UUID, partitions: Iterable[int] | None
) -> list[StoredSegment]:
    return catalog.segments(topic, topic_id, None if partitions is None else list(partitions))


def _segments_and_forwards(
    catalog: TopicCatalog, topic: str, topic_id: uuid.UUID, partitions: Iterable[int] | None
) -> tuple[list[StoredSegment], dict[str, list[dict[str, str]]]]:
    """The committed segments and where forwards are, from the same listings (one round trip per
    location, the locations found once)."""
    tid = uuid_to_base64(topic_id)
    forwards: dict[str, list[dict[str, str]]] = {}

    def seen(loc: Location, key: str) -> None:
        if key.endswith(FORWARD_SUFFIX):
            rel = key[len(f"{loc.prefix}{topic}-{tid}/") : -len(FORWARD_SUFFIX)]
            forwards.setdefault(rel, []).append({"bucket": loc.bucket, "prefix": loc.prefix})

    wanted = None if partitions is None else list(partitions)
    segs = list_segments(catalog.store, topic, topic_id, catalog.locations(topic, topic_id), wanted, seen)
    return segs, forwards


def _forwards_of(forwards: dict[str, list[dict[str, str]]], seg: StoredSegment) -> list[dict[str, str]]:
    return forwards.get(f"{seg.partition}/{seg.start_offset:020d}-{seg.segment_id}", [])


# -- planners ---------------------------------------------------------------------------------------------
def plan_move(
    catalog: TopicCatalog,
    topic: str,
    topic_id: uuid.UUID,
    partitions: Iterable[int] | None,
    destination: Location,
) -> Plan:
    """Every committed copy not at `destination` moves there."""
    plan = Plan("move", topic, uuid_to_base64(topic_id), params={"destination": str(destination)})
    segs, forwards = _segments_and_forwards(catalog, topic, topic_id, partitions)
    there = {(s.partition, s.segment_id) for s in segs if s.location == destination}
    for seg in segs:
        if seg.location == destination:
            plan.skipped.append((seg.manifest_key, "already at the destination"))
            continue
        at_destination = (seg.partition, seg.segment_id) in there
        extra = {"forwards": _forwards_of(forwards, seg), "at_destination": at_destination}
        plan.items.append(item_for("move", seg, topic, destination=destination, extra=extra))
    return plan


def plan_rekey(
    catalog: TopicCatalog,
    topic: str,
    topic_id: uuid.UUID,
    partitions: Iterable[int] | None,
    key_id: str,
) -> Plan:
    """Every encrypted copy whose data key is not wrapped under `key_id` (or whose manifest is version 1)."""
    plan = Plan("rekey", topic, uuid_to_base64(topic_id), params={"key_id": key_id})
    for seg in segments(catalog, topic, topic_id, partitions):
        m = seg.manifest
        if m.encryption is None:
            plan.skipped.append((seg.manifest_key, "not encrypted (--reencrypt --encryption on encrypts it)"))
        elif m.encryption.key_id == key_id and m.version >= 2:
            plan.skipped.append((seg.manifest_key, f"already under key id {key_id}"))
        else:
            plan.items.append(item_for("rekey", seg, topic, extra={"to_key_id": key_id}))
    return plan


def plan_reencrypt(
    catalog: TopicCatalog,
    topic: str,
    topic_id: uuid.UUID,
    partitions: Iterable[int] | None,
    key_id: str | None,
    only_changing: bool,
) -> Plan:
    """Every copy rewritten under a fresh data key wrapped by `key_id` (None: written unencrypted).

    ``only_changing`` (`--encryption on|off`): leave alone the copies already as asked (plain ones when
    decrypting, encrypted ones when encrypting: `rekey` re-wraps those); else every copy gets a fresh key.
    """
    plan = Plan(
        "reencrypt",
        topic,
        uuid_to_base64(topic_id),
        params={"key_id": key_id, "only_changing": only_changing},
    )
    segs, forwards = _segments_and_forwards(catalog, topic, topic_id, partitions)
    for seg in segs:
        m = seg.manifest
        current = None if m.encryption is None else m.encryption.key_id
        if seg.location.prefix.startswith(STAGING_PREFIX):
            plan.skipped.append((seg.manifest_key, "a staging copy of a re-encryption under way"))
            continue
        if only_changing and (current is None) == (key_id is None):
            why = "already unencrypted" if key_id is None else f"already encrypted (under {current})"
            plan.skipped.append((seg.manifest_key, why))
            continue
        plan.items.append(
            item_for(
                "reencrypt",
                seg,
                topic,
                destination=staging_location(seg.location),
                extra={"to_key_id": key_id, "forwards": _forwards_of(forwards, seg), "at_destination": False},
            )
        )
    return plan


def plan_verify(
    catalog: TopicCatalog,
    topic: str,
    topic_id: uuid.UUID,
    partitions: Iterable[int] | None,
    deep: bool,
    findings: list[dict[str, Any]] | None = None,
) -> Plan:
    """One item per committed segment copy. The holes of the histories they make and the topic's known
    locations that cannot be read go to the plan's `findings`, and to ``findings`` when given (the
    caller's plan of several topics: `rsm.migrate.findings`)."""
    plan = Plan("verify", topic, uuid_to_base64(topic_id), params={"deep": deep})
    with reporting_damage() as damaged:  # a damaged manifest is one problem, not the end of the run
        listed = segments(catalog, topic, topic_id, partitions)
    plan.findings = damaged_manifests(damaged) + store_problems(catalog, topic, topic_id, listed)
    if findings is not None:
        findings += plan.findings
    for seg in listed:
        plan.items.append(
            item_for("verify", seg, topic, extra={"deep": deep, "manifest_key": seg.manifest_key})
        )
    return plan


def with_kind(item: PlanItem, kind: str, **changes: Any) -> PlanItem:
    return replace(item, kind=kind, **changes)
