"""The whole topic in one query: history from the store, the live tail from the brokers.

With `kafka.bootstrap.servers`, each partition is split at the store's end. Offsets the store holds are
read from the store (planned by `Planner` as without a broker), so the brokers serve no remote read; the
offsets past the store's last one, up to the query's end, become one `BrokerTailPartition` read in a
task through the brokers' fetch layer (`spark_reader.tail`: the same columnar decoder as the store's). `latest` (and a stream's latest offset) is the brokers' own: the high watermark,
or the last stable offset under read_committed, as in Spark's Kafka source. `earliest` is the store's
first offset (the brokers' when the store holds nothing of a partition yet). The brokers are asked once
per plan for what positions need (`BrokerFacts`), and `spark_reader.offset_resolver` applies the same
rules as a read of the store alone.

A transaction that starts in the store and ends in the tail: the store alone cannot know how it ended
(its marker is not tiered yet), so under read_committed the store's part stops where the planner stops
it without a broker, at the first offset of a transaction still open at the store's end, and the tail
starts there. The tail then reads the whole transaction with its marker and keeps or drops it as a
Kafka consumer does; transactions that ended inside the store keep being dropped by the store's own
transaction indexes. The offsets between that transaction's start and the store's end are the only ones
read from the brokers although the store holds them: they are normally still on the brokers' local disk
(a segment is tiered once it is below the last stable offset, long before local retention deletes it).

A topic the store holds but the brokers do not (deleted, or re-created: its partition there ends before
the store's history does) is read from the store alone, with one warning. A partition the brokers have
and the store does not is read from the brokers alone, from their log start for `earliest`. Offsets the
brokers no longer hold past the store's end are data loss (failOnDataLoss), found by the tail's task.

A hole before the store's history (`rsm.catalog.holes`): for a partition read from its start (earliest,
a timestamp the store's first segment answers, an offset below the store's first one) whose history does
not begin at offset 0, the brokers' log start offset is asked (one ListOffsets request for all such
partitions, with the partitions the store lacks), and offsets from it up to the store's first one are
data loss: the log still has them and the store does not (segments deleted behind the RSM's back, or in a
location the catalog does not know). A history starting at 0 needs no question. What lies between the
store's last offset and the brokers' local log start is not asked (Kafka's earliest-local ListOffsets
spec would tell it); such offsets are read by the tail's task, which the brokers serve from their remote
tier: the rows are all there, at the cost of remote reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from pyspark.sql.datasource import InputPartition

from spark_reader.broker import BrokerView, warn_once
from spark_reader.brokerwire.settings import WireSettings
from spark_reader.filters import PushedFilters
from spark_reader.offset_resolver import FactsSource, OffsetResolver, PartitionFacts, Resolved
from spark_reader.offsets import EARLIEST, LATEST, Kind, OffsetSpec, Position
from spark_reader.options import SourceOptions
from spark_reader.planning import PartitionRange, Planner
from spark_reader.tail import BrokerTailPartition, TailSettings
from spark_reader.topics import SelectedPartition

log = logging.getLogger(__name__)

After = Mapping[tuple[str, int], int] | None  # a stream's listing starts (`Planner.select`)

Key = tuple[str, int]


def tail_settings(opts: SourceOptions, wire: WireSettings | None = None) -> TailSettings:
    """What the query's tail tasks share (`wire`: the driver's translation of the kafka.* options)."""
    return TailSettings.of(opts, wire)


def _store_selection(
    planner: Planner, filters: PushedFilters, topics: Sequence[str], after: After = None
) -> list[SelectedPartition]:
    """The store's partitions of the query; a topic with nothing tiered yet is the brokers' alone.
    ``after``: a stream's previous end per partition, where its listing may start (`Planner.select`)."""
    opts = planner.opts
    if opts.subscribe_pattern is not None:
        return planner.select(filters, after=after)
    present = [t for t in topics if planner.catalog.topic_ids(t)]
    if len(present) == len(topics):
        return planner.select(filters, after=after)
    out: list[SelectedPartition] = []
    for topic in present:  # one topic at a time, skipping those the store lacks
        if opts.assign is not None:
            narrowed = replace(opts, assign={topic: opts.assign[topic]})
        else:
            narrowed = replace(opts, subscribe=(topic,))
        out += planner.select(filters, after=after, opts=narrowed)
    return out


@dataclass
class Split:
    """One partition of a hybrid query: store history, brokers' state, and what each side reads."""

    key: Key
    store: SelectedPartition | None
    on_brokers: bool


class HybridQuery:
    """One query's (or micro-batch's) view of both sides: the store's partitions and the brokers'."""

    def __init__(self, planner: Planner, filters: PushedFilters, after: After = None) -> None:
        self.planner, self.opts, self.filters = planner, planner.opts, filters
        self.view = BrokerView(self.opts)
        self.splits: dict[Key, Split] = {}
        try:
            self._split(planner, filters, after)
        except BaseException:
            self.view.close()
            raise

    def _split(self, planner: Planner, filters: PushedFilters, after: After) -> None:
        broker = self.view.topics()
        topics = sorted(set(broker) | set(self._store_topic_names()))
        store = {sp.key: sp for sp in _store_selection(planner, filters, topics, after)}
        for key, sp in store.items():
            bt = broker.get(key[0])
            if bt is None:
                self._store_only(key[0], "does not exist on")
            self.splits[key] = Split(key, sp, bt is not None and key[1] in bt.partitions)
        for name, bt in broker.items():
            for p in bt.partitions:
                if (name, p) not in self.splits and filters.partition.contains(p):
                    self.splits[(name, p)] = Split((name, p), None, True)

    def _store_only(self, topic: str, why: str) -> None:
        warn_once(
            f"{topic}@{self.view.servers}",
            f"kafka-tiered: topic {topic} {why} the Kafka brokers {self.view.servers}: "
            "reading its history from the store only",
        )

    def close(self) -> None:
        self.view.close()

    def _store_topic_names(self) -> list[str]:
        if self.opts.subscribe_pattern is None:
            return list(self.opts.subscribe or self.opts.assign or ())
        return []  # a pattern's store topics come with the store's selection

    def latest(self) -> dict[Key, int]:
        """The brokers' latest offset of every partition they have (one ListOffsets request)."""
        found = self.view.offsets({k: LATEST for k, s in self.splits.items() if s.on_brokers})
        out = {}
        for k, v in found.items():
            sp = self.splits[k].store
            if v is not None and sp is not None and (sp.history.next_offset or 0) > v:
                # the brokers' partition ends before the store's: another topic of the same name (re-created)
                # (Kafka tiers only below the last stable offset, so its own log never ends before the store)
                self._store_only(k[0], "was re-created (it ends before the store's history) on")
                self.splits[k].on_brokers = False
            elif v is not None:
                out[k] = v
        return out

    def earliest_of_broker_only(self, also: Iterable[Key] = ()) -> dict[Key, int]:
        """The brokers' log start of the partitions the store holds nothing of, and of those in ``also``
        on the brokers (`needs_log_start`), in one request (asked only if any: `BrokerView.offsets` sends
        no request for none)."""
        wanted = {k for k, s in self.splits.items() if s.store is None}
        wanted |= {k for k in also if k in self.splits and self.splits[k].on_brokers}
        found = self.view.offsets(dict.fromkeys(sorted(wanted), EARLIEST))
        return {k: v for k, v in found.items() if v is not None}

    def lookup_times(self, wanted: dict[Key, int]) -> dict[Key, int | None]:
        return self.view.offsets(wanted)


def needs_log_start(split: Split, position: Position, lo: int | None = None) -> bool:
    """Whether the brokers' log start tells about a hole before the store's history for this read: it
    starts at the partition's start (earliest, a timestamp, or offset `lo` below the store's first one),
    the store's history of it does not begin at 0, and the brokers have the partition."""
    sp = split.store
    first = None if sp is None else sp.history.first_offset
    if not split.on_brokers or first is None or first <= 0:
        return False
    if position.kind is Kind.OFFSET:
        return lo is not None and lo < first
    return position.kind in (Kind.EARLIEST, Kind.TIMESTAMP)


def store_holds_time(sp: SelectedPartition | None, timestamp: int) -> bool:
    """Whether the store has a record at or after `timestamp` (then the store answers the lookup)."""
    return sp is not None and sp.history.first_at_timestamp(timestamp) is not None


def split_range(
    planner: Planner,
    split: Split,
    start: Position,
    lo: int,
    hi: int,
    end: Position | None,
    settings: TailSettings,
    filters: PushedFilters,
    log_start: int | None = None,
) -> tuple[PartitionRange | None, list[BrokerTailPartition]]:
    """A partition's range up to `hi` (the latest offset there is), resolved (`OffsetResolver`) and cut
    between the store and the brokers (`cut_range`): from offset `lo` for an offset `start`, else from
    `start` (earliest, a timestamp); up to `end`, a timestamp end, else `hi`. `log_start`: the brokers'
    log start offset, when asked (`needs_log_start`)."""
    facts = PartitionFacts.of(
        split.key, split.store, on_brokers=split.on_brokers, log_start=log_start, latest=hi
    )
    pos = Position(Kind.OFFSET, lo) if start.kind is Kind.OFFSET else start
    resolver = OffsetResolver(planner)
    return cut_range(
        resolver, resolver.range(facts, pos, end or Position(Kind.OFFSET, hi)), settings, filters
    )


def cut_range(
    resolver: OffsetResolver, resolved: Resolved, settings: TailSettings, filters: PushedFilters
) -> tuple[PartitionRange | None, list[BrokerTailPartition]]:
    """The store's part of a resolved range (planned by `Planner` as without a broker) and the brokers'
    part after it (see the module docstring): one tail partition, or several of `maxRecordsPerPartition`
    offsets each. A timestamp end the store answers ends the read in the store: nothing from the brokers."""
    f, planner, pr = resolved.facts, resolver.planner, None
    tail_start, hi = resolved.start, resolved.end
    if f.store is not None and f.next_offset is not None and resolved.start < f.next_offset:
        store_end = resolver.store_end(f) if resolved.end_slice is None else None
        pr = planner.store_range(resolved, None if store_end is None else min(hi, store_end))
        if resolved.end_slice is not None:
            return pr, []
        if pr is not None:
            tail_start = pr.end
    if not f.on_brokers or tail_start >= hi:
        return pr, []
    offset_lo, offset_hi = filters.offset.span()
    a = tail_start if offset_lo is None else max(tail_start, offset_lo)
    b = hi if offset_hi is None else min(hi, offset_hi + 1)
    if a >= b:
        return pr, []
    step = planner.opts.max_records_per_partition or (b - a)
    topic, partition = f.key
    return pr, [
        BrokerTailPartition(topic, partition, x, min(b, x + step), settings, filters)
        for x in range(a, b, step)
    ]


def _lookups(query: HybridQuery, positions: dict[Key, Position]) -> dict[Key, int | None]:
    """offsetsForTimes on the brokers for the timestamp positions the store cannot answer (one request)."""
    wanted = {
        k: pos.value or 0
        for k, pos in positions.items()
        if pos.kind is Kind.TIMESTAMP
        and query.splits[k].on_brokers
        and not store_holds_time(query.splits[k].store, pos.value or 0)
    }
    return query.lookup_times(wanted)  # no request when nothing is wanted


class BrokerFacts(FactsSource):
    """The store and the brokers: the brokers' latest offsets, the log starts a hole before the store's
    history needs and the timestamps the store cannot answer, one request each (none when not needed)."""

    def __init__(self, query: HybridQuery) -> None:
        self.query = query

    def gather(
        self,
        starts: Mapping[Key, Position],
        ends: Mapping[Key, Position] | None = None,
        *,
        offsets_read: bool = True,
    ) -> dict[Key, PartitionFacts]:
        query = self.query
        latest = query.latest()  # first: a re-created topic is the store's alone from here on
        start_hits, end_hits = _lookups(query, dict(starts)), _lookups(query, dict(ends or {}))
        # no request when the store holds every partition and every history read from its start begins at 0
        first = query.earliest_of_broker_only(
            k
            for k, split in query.splits.items()
            if k not in start_hits
            and (offsets_read or starts[k].kind is not Kind.OFFSET)
            and needs_log_start(split, starts[k], starts[k].value)
        )
        out = {}
        for k, split in query.splits.items():
            times = {}
            if k in end_hits:
                times[(ends or {})[k].value or 0] = end_hits[k]
            if k in start_hits:
                times[starts[k].value or 0] = start_hits[k]
            out[k] = PartitionFacts.of(
                k, split.store, on_brokers=split.on_brokers, log_start=first.get(k), latest=latest.get(k),
                times=times,
            )  # fmt: skip
        return out


def plan_batch(
    planner: Planner, filters: PushedFilters, start: OffsetSpec, end: OffsetSpec
) -> list[InputPartition]:
    """A batch query's input partitions: the store's (planned as without a broker) and the tails."""
    query = HybridQuery(planner, filters)
    try:
        return _plan_batch(query, planner, filters, start, end)
    finally:
        query.close()


def _plan_batch(
    query: HybridQuery, planner: Planner, filters: PushedFilters, start: OffsetSpec, end: OffsetSpec
) -> list[InputPartition]:
    settings = tail_settings(planner.opts, query.view.settings)
    starts = {k: start.position(*k) for k in query.splits}
    ends = {k: end.position(*k) for k in query.splits}
    facts = BrokerFacts(query).gather(starts, ends)
    resolver = OffsetResolver(planner)
    ranges, tails = [], []
    for k, f in sorted(facts.items()):
        pr, tail = cut_range(resolver, resolver.range(f, starts[k], ends[k]), settings, filters)
        if pr is not None:
            ranges.append(pr)
        tails += tail
    parts: list[InputPartition] = list(planner.plan(ranges, filters))
    log.info(
        "kafka-tiered: %d store partition(s) and %d tail(s) from the brokers over %d topic partition(s)",
        len(parts), len(tails), len(query.splits),
    )  # fmt: skip
    return tails + parts  # the tails first: they start at once and overlap the store's tasks


# -- streams ---------------------------------------------------------------------------------------------
def stream_initial(planner: Planner, spec: OffsetSpec) -> dict[Key, int]:
    """A stream's first offsets (`OffsetResolver.resolve_start`): earliest the store's first (the
    brokers' where the store has nothing), latest the brokers', a timestamp from the store or, past it,
    the brokers' offsetsForTimes."""
    query = HybridQuery(planner, PushedFilters())
    try:
        positions = {k: spec.position(*k) for k in query.splits}
        facts = BrokerFacts(query).gather(positions, offsets_read=False)
        resolver = OffsetResolver(planner)
        return {k: resolver.resolve_start(f, positions[k]) for k, f in facts.items()}
    finally:
        query.close()


def stream_latest(
    planner: Planner, begin: dict[Key, int], after: After = None
) -> tuple[dict[Key, int], dict[Key, int], dict[Key, SelectedPartition]]:
    """(latest, begin completed, the store's partitions) for a trigger: the brokers' latest; a partition
    new to the query starts at its earliest (the store's first offset, else the brokers' log start)."""
    query = HybridQuery(planner, PushedFilters(), after)
    try:
        latest, begin = _stream_latest(query, planner, begin)
        return latest, begin, {k: s.store for k, s in query.splits.items() if s.store is not None}
    finally:
        query.close()


def _stream_latest(
    query: HybridQuery, planner: Planner, begin: dict[Key, int]
) -> tuple[dict[Key, int], dict[Key, int]]:
    latest = query.latest()
    new_broker_only = any(s.store is None and k not in begin for k, s in query.splits.items())
    # partitions new to the query are read from their start: a history not beginning at 0 is measured
    # against the brokers' log start (asked with the brokers-only partitions' in one request)
    new_in_store = [
        k for k, s in query.splits.items() if k not in begin and needs_log_start(s, Position(Kind.EARLIEST))
    ]
    first = query.earliest_of_broker_only(new_in_store) if new_broker_only or new_in_store else {}
    resolver = OffsetResolver(planner)
    begin = dict(begin)
    out: dict[Key, int] = {}
    for k, split in query.splits.items():
        f = PartitionFacts.of(
            k, split.store, on_brokers=split.on_brokers, log_start=first.get(k), latest=latest.get(k)
        )
        if k not in begin:  # from its earliest: a hole before the store's history is data loss now
            begin[k] = resolver.resolve_start(f, Position(Kind.EARLIEST))
        # the brokers' latest, else the store's end (reads its last copies only, as the plain stream's)
        out[k] = max(resolver.latest(f), begin[k])
    return out, begin


def stream_partitions(
    planner: Planner, begin: dict[Key, int], finish: dict[Key, int], after: After = None
) -> tuple[list[InputPartition], dict[Key, SelectedPartition]]:
    """A micro-batch [begin, finish): what the store holds from the store, the rest from the brokers;
    and the store's partitions (where the next trigger's listings may start).

    No broker request: `finish` came from the brokers' latest at latestOffset, and a partition's offsets
    past the store's end can only be on the brokers."""
    settings = tail_settings(planner.opts)
    topics = sorted({t for t, _ in finish})
    current = {sp.key: sp for sp in _store_selection(planner, PushedFilters(), topics, after)}
    ranges, tails = [], []
    for key, stop in sorted(finish.items()):
        sp = current.get(key)
        first = begin.get(key, (sp.history.first_offset or 0) if sp is not None else stop)
        if first >= stop:
            continue
        split = Split(key, sp, True)
        pr, tail = split_range(
            planner, split, Position(Kind.OFFSET, first), first, stop, None, settings, PushedFilters()
        )
        if pr is not None:
            ranges.append(pr)
        tails += tail
    return tails + list(planner.plan(ranges, PushedFilters())), current


def stream_target(planner: Planner) -> dict[Key, int]:
    """Trigger.AvailableNow's end (`TieredStreamReader.prepareForTriggerAvailableNow`): the brokers' latest
    of every partition they have, the store's end of those only the store holds. No data-loss check here:
    the micro-batches that read up to it check what they read."""
    query = HybridQuery(planner, PushedFilters())
    try:
        latest, resolver = query.latest(), OffsetResolver(planner)
        out: dict[Key, int] = {}
        for k, split in query.splits.items():
            f = PartitionFacts.of(k, split.store, on_brokers=split.on_brokers, latest=latest.get(k))
            if (end := resolver.known_latest(f)) is not None:
                out[k] = end
        return out
    finally:
        query.close()
