"""`spark.readStream.format("kafka-tiered")`: micro-batches over what the RSM keeps tiering.

Offsets are Kafka source's checkpoint JSON (`{"topic": {"partition": next offset}}`), so a query's
checkpoint reads like one of Spark's own Kafka source. Each trigger lists the store afresh: segments tiered
since the last one are picked up, new partitions start at their earliest tiered offset, and a start that
retention has since removed from the store is data loss (failOnDataLoss), and so is a hole: offsets
between two segments, or, for a partition read from its start (`earliest`, a partition new to the query),
between where its log starts and the store's first offset (`Planner.start_hole`). `maxOffsetsPerTrigger`
caps a micro-batch as Spark's Kafka source does, spread over partitions in proportion to their backlog.

With `kafka.bootstrap.servers` (`spark_reader.hybrid`) the latest offset is the brokers' and a
micro-batch reads what the store holds of its range from the store, the rest from the brokers: a query
catches up at store speed, then follows the topic live, and segments tiered meanwhile are read from the
store by later micro-batches.

`Trigger.AvailableNow` (PySpark 4.2+, `SupportsTriggerAvailableNow`): the query's end is each partition's
latest offset when it starts (the brokers' with `kafka.bootstrap.servers`), reached in micro-batches of
`maxOffsetsPerTrigger`; records that arrive meanwhile are left to the next run. An older PySpark runs it
as one micro-batch, without a limit (`spark_reader.streaming_api` says what each line lacks).

A trigger plans from the previous batch's end: the reader remembers, per partition, a base
offset at or before the offset it planned up to, and the next trigger lists that partition's keys from
there on (plus its first copies, for 'earliest') and reads only the manifests of what follows; so its
requests do not grow with the history behind it. On S3 a trigger lists nothing whole: each partition's
keys are probed from that base on (its last copies) and around the trigger's range, so neither a query
restarted from its checkpoint (it remembers no base: it probes from the partition's first copies, then
remembers) nor one far behind its topic's end lists more than its ranges (`TopicCatalog.ranged_histories`).
On the file store a reader that remembers nothing lists each partition's directory once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from spark_reader.errors import one_line_errors
from spark_reader.filters import PushedFilters
from spark_reader.offset_resolver import OffsetResolver, StoreFacts
from spark_reader.offsets import Kind, Position, from_stream_offset, starting_spec, to_stream_offset
from spark_reader.options import SourceOptions
from spark_reader.partition_reader import read_partition
from spark_reader.planning import Planner
from spark_reader.streaming_api import (
    AVAILABLE_NOW_BASES,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    note_missing,
)
from spark_reader.topics import SelectedPartition

log = logging.getLogger(__name__)

Offsets = dict[tuple[str, int], int]


class TieredStreamReader(DataSourceStreamReader, *AVAILABLE_NOW_BASES):
    """The stream reader; with PySpark 4.2+ also `SupportsTriggerAvailableNow` (`spark_reader.streaming_api`)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        # Trigger.AvailableNow: each partition's latest offset when the query started (none: follow the topic)
        self._target: Offsets | None = None
        # the end of the last micro-batch planned: the start when Spark asks latestOffset() without one
        self._last_end: Offsets = {}
        # (topic, partition) -> (a listed base offset, the offset it is at or before): where the next
        # trigger's listing of the partition may start (see the module docstring)
        self._listed_from: dict[tuple[str, int], tuple[int, int]] = {}
        self.last_planner: Planner | None = None  # the planner of the last call (its store's counters)

    def _planner(self) -> Planner:
        """A fresh planner per call (a fresh catalog: segments tiered since), kept for its counters."""
        self.last_planner = Planner(self.opts)
        return self.last_planner

    def _partitions(
        self, begin: Offsets | None = None
    ) -> tuple[Planner, dict[tuple[str, int], SelectedPartition]]:
        planner = self._planner()
        return planner, {sp.key: sp for sp in planner.select(PushedFilters(), after=self._after(begin))}

    def _after(self, begin: Offsets | None) -> dict[tuple[str, int], int] | None:
        """Per partition, a base offset this trigger's listing may start from (see the module docstring)."""
        after = {
            key: base
            for key, (base, offset) in self._listed_from.items()
            if begin is not None and key in begin and offset <= begin[key]
        }
        return after or None

    def _remember(self, current: dict[tuple[str, int], SelectedPartition], offsets: Offsets) -> None:
        """Where the next trigger may list each partition from: ranges from `offsets` on need no key
        before the base this returns (`RangedHistory.base_before`)."""
        for key, offset in offsets.items():
            sp = current.get(key)
            base_before = getattr(sp.history, "base_before", None) if sp is not None else None
            base = base_before(offset) if base_before is not None else None
            if base is not None:
                self._listed_from[key] = (base, offset)

    @one_line_errors
    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        spec = starting_spec(self.opts, streaming=True)
        if self.opts.bootstrap_servers:  # the brokers' latest, the store's earliest (spark_reader.hybrid)
            from spark_reader.hybrid import stream_initial

            return to_stream_offset(stream_initial(Planner(self.opts), spec))
        planner, current = self._partitions()
        resolver = OffsetResolver(planner)  # the rules of every read (`spark_reader.offset_resolver`)
        facts = StoreFacts(current.values()).gather()
        offsets: Offsets = {key: resolver.resolve_start(f, spec.position(*key)) for key, f in facts.items()}
        self._remember(current, offsets)
        self._last_end = dict(offsets)
        return to_stream_offset(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    @one_line_errors
    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:  # noqa: N802
        """The end of the next micro-batch. PySpark before 4.2 calls this without a start or a limit
        (`spark_reader.streaming_api`): the start is then where the last micro-batch planned ended."""
        if start is None:  # Spark's streaming worker, once per query (Spark plans elsewhere too)
            note_missing(bool(self.opts.max_offsets_per_trigger))
        begin = from_stream_offset(start) if start else dict(self._last_end)
        latest, begin, current = self._latest(begin)
        if self._target is not None:  # Trigger.AvailableNow: nothing past the end when the query started
            latest = {k: max(begin[k], min(v, self._target.get(k, begin[k]))) for k, v in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        # partitions that left the store keep their last offset (nothing more to read there)
        for key, offset in begin.items():
            latest.setdefault(key, offset)
        self._remember(current, begin)
        return to_stream_offset(latest)

    def _latest(self, begin: Offsets) -> tuple[Offsets, Offsets, dict[tuple[str, int], SelectedPartition]]:
        """(each partition's latest offset, `begin` completed with new partitions' earliest, the store's
        partitions): the brokers' latest with `kafka.bootstrap.servers`, else the store's."""
        if self.opts.bootstrap_servers:
            from spark_reader.hybrid import stream_latest

            return stream_latest(self._planner(), begin, self._after(begin))
        planner, current = self._partitions(begin)
        # earliest and latest as every read has them (`OffsetResolver`; latest stops at an open
        # transaction for read_committed): no range to check for gaps here, none to read
        resolver = OffsetResolver(planner)
        begin, latest = dict(begin), {}
        for key, f in StoreFacts(current.values()).gather().items():
            earliest = resolver.earliest(f)
            latest[key] = max(resolver.latest(f), begin.get(key, earliest))
            begin.setdefault(key, earliest)
        return latest, begin, current

    @one_line_errors
    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name (PySpark 4.2+)
        """Trigger.AvailableNow: fix the query's end, each partition's latest offset now. latestOffset never
        goes past it (a partition that appears later stays at its start), so the query runs micro-batches
        of maxOffsetsPerTrigger up to it and stops there, as Spark's Kafka source does."""
        if self.opts.bootstrap_servers:
            from spark_reader.hybrid import stream_target

            self._target = stream_target(self._planner())
        else:
            planner, current = self._partitions()
            resolver = OffsetResolver(planner)
            self._target = {k: resolver.latest(f) for k, f in StoreFacts(current.values()).gather().items()}
        log.info("kafka-tiered: Trigger.AvailableNow reads up to %s", to_stream_offset(self._target))

    @one_line_errors
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = from_stream_offset(start), from_stream_offset(end)
        if self.opts.bootstrap_servers:  # the store's part from the store, the rest from the brokers
            from spark_reader.hybrid import stream_partitions

            planner = self._planner()
            parts, current = stream_partitions(planner, begin, finish, self._after(begin))
            self._remember(current, finish)
            self._last_end = dict(finish)
            return parts
        planner, current = self._partitions(begin)
        ranges = []
        for key, stop in finish.items():
            sp = current.get(key)
            if sp is None:
                if stop > begin.get(key, stop):
                    planner.data_loss(f"{key[0]}-{key[1]}: the partition is no longer in the store")
                continue
            # a partition new to the query is read from its start (a hole before it: data loss)
            first = Position(Kind.OFFSET, begin[key]) if key in begin else Position(Kind.EARLIEST)
            pr = planner.partition_range(sp, first, Position(Kind.OFFSET, stop))
            if pr is not None:
                ranges.append(pr)
        parts = planner.plan(ranges, PushedFilters())
        self._remember(current, finish)  # the next batch starts where this one ends
        self._last_end = dict(finish)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        log.debug("kafka-tiered stream committed %s", end)


def rate_limit(begin: Offsets, latest: Offsets, limit: int) -> Offsets:
    """At most `limit` offsets in all, shared in proportion to each partition's backlog (as Spark's
    Kafka source does: a share below one offset rounds up, others down)."""
    lags = {k: max(0, latest[k] - begin.get(k, latest[k])) for k in latest}
    total = sum(lags.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for key, end in latest.items():
        start = begin.get(key, end)
        share = limit * (lags[key] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[key] = min(end, start + step)
    return out
