"""Where a read starts and ends, per partition: the one place a position becomes an offset.

Batch queries, a stream's offsets (its first ones, each trigger's latest, a new partition's earliest,
Trigger.AvailableNow's end) and hybrid reads (store and brokers) all turn a position
(`spark_reader.offsets`: earliest, latest, an offset, a timestamp) into offsets of a partition. They do
it in two steps:

1. a facts source (`FactsSource`) gathers, once per plan, what each partition's sides say: the store's
   history (`first_offset`, `next_offset`, the history itself for timestamp and transaction lookups)
   and, with `kafka.bootstrap.servers`, the brokers' latest offset (high watermark, or last stable offset
   under read_committed), their log start where a hole before the store's history may lie, and their
   offsetsForTimes answers for the timestamps the store cannot answer (`StoreFacts` here, the hybrid
   variant in `spark_reader.hybrid`, each asking the brokers one request per kind of question);
2. `OffsetResolver` applies the rules to those facts, the only copy of them:

   - earliest: the store's first offset, else the brokers' log start (a partition the store lacks);
   - latest: the brokers' latest, else the store's next offset stopped, under read_committed, at the
     oldest transaction still open at the end of the tiered data (a consumer stops at the LSO);
   - a timestamp: the store's first segment whose records reach it (the exact offset is found by the
     task reading that segment, or here by reading it for a stream's first offset), else the brokers'
     offsetsForTimes; none: `startingOffsetsByTimestampStrategy` (error, or latest);
   - a read from the partition's start (earliest, a timestamp the store's first segment answers) carries
     the hole between where the log starts and the store's first offset (`Planner.start_hole`): data
     loss where the read lies (failOnDataLoss); a starting offset below the store's first one is data
     loss at once, and the read starts at the store's first offset.

The callers then only cut what was resolved: the store's part planned into segment splits
(`Planner.store_range`, `Planner.plan`), the rest a tail read from the brokers (`spark_reader.hybrid`).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rsm.catalog import SegmentSlice
from rsm.catalog.holes import Hole, clipped
from spark_reader.errors import ReaderError
from spark_reader.filters import PushedFilters
from spark_reader.offsets import Kind, Position
from spark_reader.options import SourceOptions
from spark_reader.partition_reader import read_partition
from spark_reader.topics import SelectedPartition

Key = tuple[str, int]


class StorePlanner(Protocol):
    """What the resolver asks of the store's planner (`spark_reader.planning.Planner`): its options, the
    store's facts it cannot know alone (stable end, holes), where data loss goes, and planning the store's
    part of a resolved range. A protocol, so the planner can build on the resolver without a circle."""

    opts: SourceOptions

    def stable_end(self, sp: SelectedPartition, hi: int) -> int: ...

    def start_hole(self, sp: SelectedPartition, log_start: int | None = None) -> Hole | None: ...

    def data_loss(self, message: str) -> None: ...

    def store_range(self, resolved: Resolved, stop: int | None = None) -> Any: ...

    def plan(self, ranges: Iterable[Any], filters: PushedFilters) -> list[Any]: ...


@dataclass(frozen=True)
class PartitionFacts:
    """What a plan knows of one partition before resolving its positions (gathered once per plan)."""

    key: Key
    store: SelectedPartition | None = None  # the store's history; None: the store holds nothing of it
    first_offset: int | None = None  # the store's first offset
    next_offset: int | None = None  # one past the store's last offset
    on_brokers: bool = False
    log_start: int | None = None  # the brokers' log start offset, when asked
    latest: int | None = None  # the brokers' latest offset (high watermark, or LSO under read_committed)
    times: Mapping[int, int | None] = field(default_factory=dict)  # the brokers' offsetsForTimes answers

    @classmethod
    def of(
        cls,
        key: Key,
        sp: SelectedPartition | None,
        *,
        on_brokers: bool = False,
        log_start: int | None = None,
        latest: int | None = None,
        times: Mapping[int, int | None] | None = None,
    ) -> PartitionFacts:
        """The facts of a partition: the store's history `sp` (None: the store lacks it), and what the
        brokers said of it, if asked."""
        first, end = (None, None) if sp is None else (sp.history.first_offset, sp.history.next_offset)
        return cls(key, sp, first, end, on_brokers, log_start, latest, dict(times or {}))

    @property
    def name(self) -> str:
        return f"{self.key[0]}-{self.key[1]}"


class FactsSource(abc.ABC):
    """Gathers the facts of a plan's partitions, asking each side once for all of them."""

    @abc.abstractmethod
    def gather(
        self,
        starts: Mapping[Key, Position],
        ends: Mapping[Key, Position] | None = None,
        *,
        offsets_read: bool = True,
    ) -> dict[Key, PartitionFacts]:
        """Facts for resolving `starts` (and `ends`); ``offsets_read``: starting offsets are read now (a
        batch, a micro-batch), so one below the store's first is measured against the log start."""


class StoreFacts(FactsSource):
    """The store alone: its histories say everything (the log start is the RSM's mark, `start_hole`)."""

    def __init__(self, selected: Iterable[SelectedPartition]) -> None:
        self.selected = list(selected)

    def gather(
        self,
        starts: Mapping[Key, Position] | None = None,
        ends: Mapping[Key, Position] | None = None,
        *,
        offsets_read: bool = True,
    ) -> dict[Key, PartitionFacts]:
        return {sp.key: PartitionFacts.of(sp.key, sp) for sp in self.selected}


@dataclass(frozen=True)
class Resolved:
    """Offsets [start, end) of a partition to read (empty when start >= end), and the cuts inside them:
    a timestamp the task reading `start_slice` (`end_slice`) finds the exact offset of; `hole_before`:
    offsets before `start` the read asked for and the store lacks (data loss where the plan reads)."""

    facts: PartitionFacts
    start: int
    end: int
    start_timestamp: int | None = None
    start_slice: SegmentSlice | None = None
    end_timestamp: int | None = None
    end_slice: SegmentSlice | None = None
    hole_before: Hole | None = None


@dataclass(frozen=True)
class _Bound:
    offset: int
    timestamp: int | None = None
    slice: SegmentSlice | None = None
    hole: Hole | None = None


class OffsetResolver:
    """The rules turning positions into offsets (see the module docstring), over a plan's facts."""

    def __init__(self, planner: StorePlanner) -> None:
        self.planner = planner
        self._store_ends: dict[Key, int] = {}

    # -- what the sides say ----------------------------------------------------------------------------
    def store_end(self, f: PartitionFacts) -> int | None:
        """One past the store's last offset, stopped at an open transaction under read_committed (at
        least its first offset); None when the store holds nothing."""
        if f.store is None or f.first_offset is None or f.next_offset is None:
            return None
        found = self._store_ends.get(f.key)
        if found is None:
            found = max(f.first_offset, self.planner.stable_end(f.store, f.next_offset))
            self._store_ends[f.key] = found
        return found

    def known_latest(self, f: PartitionFacts) -> int | None:
        """The brokers' latest, else the store's end; None when neither side says anything."""
        return f.latest if f.latest is not None else self.store_end(f)

    def latest(self, f: PartitionFacts) -> int:
        """The brokers' latest, else the store's end (0 when neither side says anything)."""
        found = self.known_latest(f)
        return 0 if found is None else found

    def earliest(self, f: PartitionFacts) -> int:
        """The store's first offset, else the brokers' log start, else latest (nothing to read)."""
        if f.first_offset is not None:
            return f.first_offset
        return f.log_start if f.log_start is not None else self.latest(f)

    def _hole(self, f: PartitionFacts) -> Hole | None:
        return None if f.store is None else self.planner.start_hole(f.store, f.log_start)

    # -- the rules -------------------------------------------------------------------------------------
    def _start(self, f: PartitionFacts, pos: Position) -> _Bound:
        if pos.kind is Kind.EARLIEST:
            return _Bound(self.earliest(f), hole=self._hole(f))
        if pos.kind is Kind.LATEST:
            return _Bound(self.latest(f))
        assert pos.value is not None
        if pos.kind is Kind.OFFSET:
            return _Bound(pos.value)
        found = None if f.store is None else f.store.history.first_at_timestamp(pos.value)
        if found is not None:  # the offset for the timestamp may lie before the store's history
            hole = self._hole(f) if found.first_offset == f.first_offset else None
            return _Bound(found.first_offset, pos.value, found, hole)
        hit = f.times.get(pos.value)
        if hit is not None:
            return _Bound(hit)
        if self.planner.opts.starting_by_timestamp_strategy == "error":
            which = "record" if pos.value in f.times else "tiered record"  # the brokers were asked, or not
            raise ReaderError(
                f"{f.name}: no {which} has a timestamp >= {pos.value} (startingOffsetsByTimestampStrategy=error)"
            )
        return _Bound(self.latest(f))

    def _end(self, f: PartitionFacts, pos: Position) -> _Bound:
        latest = self.latest(f)
        if pos.kind is Kind.LATEST:
            return _Bound(latest)
        assert pos.value is not None
        if pos.kind is Kind.OFFSET:
            return _Bound(min(pos.value, latest))
        found = None if f.store is None else f.store.history.first_at_timestamp(pos.value)
        if found is not None:  # the store cuts there (its end: at most the store's)
            end = self.store_end(f)
            assert end is not None
            return _Bound(min(found.last_offset + 1, end), pos.value, found)
        hit = f.times.get(pos.value)
        return _Bound(latest if hit is None else min(latest, hit))

    def range(self, f: PartitionFacts, start: Position, end: Position) -> Resolved:
        """Offsets [start, end) for these positions. A starting offset below the store's first one is
        data loss now (the read starts at the store's first offset); a hole before it is carried."""
        lo = self._start(f, start)
        offset = lo.offset
        if start.kind is Kind.OFFSET and f.first_offset is not None and offset < f.first_offset:
            self._below_earliest(f, offset)
            offset = f.first_offset
        hi = self._end(f, end)
        return Resolved(f, offset, hi.offset, lo.timestamp, lo.slice, hi.timestamp, hi.slice, lo.hole)

    def resolve_start(self, f: PartitionFacts, pos: Position) -> int:
        """Where a stream starts reading: a hole before a read from the partition's start is data loss
        now, an offset is taken as given (checked when a micro-batch reads it), and a timestamp the store
        answers is found exactly by reading the one segment it is in."""
        lo = self._start(f, pos)
        if lo.hole is not None:
            self.planner.data_loss(lo.hole.message())
        if lo.timestamp is None:
            return lo.offset
        return self._exact(f, lo)

    def _exact(self, f: PartitionFacts, lo: _Bound) -> int:
        end = self.store_end(f)
        assert end is not None
        fallback = self.latest(f)
        pr = self.planner.store_range(Resolved(f, lo.offset, end, lo.timestamp, lo.slice))
        if pr is None:
            return fallback
        for part in self.planner.plan([pr], PushedFilters()):
            for batch in read_partition(part):
                if batch.num_rows:
                    return int(batch.column("offset")[0].as_py())
        return pr.end

    def _below_earliest(self, f: PartitionFacts, lo: int) -> None:
        """A start offset below the store's first one: data loss, the offsets the log still has (a hole)
        named apart from those retention removed."""
        assert f.first_offset is not None
        hole = self._hole(f)
        hole = None if hole is None else clipped(hole, lo, None)
        if hole is not None:
            self.planner.data_loss(hole.message())
        gone = f.first_offset - 1 if hole is None else hole.first_offset - 1
        if lo <= gone:
            self.planner.data_loss(
                f"{f.name}: offsets {lo}..{gone} are no longer in the store (earliest {f.first_offset})"
            )
