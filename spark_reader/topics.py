"""Which topics and partitions a query reads: `subscribe`, `subscribePattern` or `assign`, as in Spark.

Topic names are looked up in the store's catalog (location records, overlays, and a scan of the
configured buckets for stores that keep no record). A re-created topic is read under its live (newest) id
unless the `topicId` option names another one.

A location the topic id's record or overlay names that cannot be read (a bucket that is gone, access
denied) is data loss (`failOnDataLoss`): the query would otherwise return the rest of the topic as if it
were all (`rsm.catalog.unreadable`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.catalog import History, TopicCatalog, TopicNotFound
from rsm.catalog.ranged import EpochCache
from rsm.catalog.segments import CatalogError, map_concurrently
from spark_reader.errors import ReaderError
from spark_reader.filters import Bound
from spark_reader.options import OptionError, SourceOptions


@dataclass(frozen=True)
class SelectedPartition:
    """A topic partition the query reads, with its history in the store: a `RangedHistory` from
    `select_partitions` (manifests read as ranges ask for them), or a whole `PartitionHistory`."""

    topic: str
    topic_id: uuid.UUID
    history: History
    recorded_start: int | None = None  # the log start the RSM's deletes reached (`rsm.store.log_starts`)
    looked_in: str = ""  # where the catalog looked, for messages about holes

    @property
    def partition(self) -> int:
        return self.history.partition

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def _topic_id(catalog: TopicCatalog, topic: str, wanted: str | None) -> uuid.UUID:
    ids = catalog.topic_ids(topic)
    if not ids:
        raise TopicNotFound(f"topic {topic!r} has no tiered data in {catalog.searched()}")
    if wanted is None:
        return catalog.live_topic_id(topic)
    try:
        tid = to_uuid(wanted)
    except ValueError:
        raise OptionError(
            f"option topicId must be a Kafka topic id (22 base64 characters), got {wanted!r}"
        ) from None
    if tid not in ids:
        known = ", ".join(uuid_to_base64(i) for i in ids)
        raise TopicNotFound(
            f"topic {topic!r} has no tiered data under topic id {wanted} (ids in the store: {known})"
        )
    return tid


def select_partitions(
    catalog: TopicCatalog,
    opts: SourceOptions,
    partitions: Bound,
    *,
    after: Mapping[tuple[str, int], int] | None = None,
    epoch_cache: EpochCache | None = None,
    data_loss: Callable[[str], None] | None = None,
) -> list[SelectedPartition]:
    """The partitions with tiered data that the options (and a pushed `partition` filter) select.

    Their histories are listings until a range is asked of them (`rsm.catalog.ranged`); ``after`` maps a
    partition to a base offset its ranges start at or after (a stream's previous end): only keys from
    there on are listed for it. ``data_loss`` is told of each known location that cannot be read (the
    planner's failOnDataLoss; without it that is a `ReaderError`)."""
    assigned: dict[str, tuple[int, ...]] | None = opts.assign
    if opts.subscribe is not None:
        topics = list(opts.subscribe)
    elif opts.assign is not None:
        topics = list(opts.assign)
    else:
        try:
            pattern = re.compile(opts.subscribe_pattern or "")
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a regular expression: {exc}") from None
        topics = [t for t in catalog.topic_names() if pattern.fullmatch(t)]
    if opts.topic_id is not None and len(topics) != 1:
        raise OptionError("option topicId needs exactly one topic (subscribe or assign)")
    selected: list[SelectedPartition] = []
    try:
        for topic in topics:
            tid = _topic_id(catalog, topic, opts.topic_id)
            wanted = None if assigned is None else assigned[topic]
            hints = {p: base for (t, p), base in (after or {}).items() if t == topic}
            histories = catalog.ranged_histories(topic, tid, wanted, after=hints, epoch_cache=epoch_cache)
            missing = sorted(set(wanted or ()) - set(histories))
            if missing and not opts.bootstrap_servers:  # with brokers, a partition may be theirs alone
                raise ReaderError(
                    f"assign: {', '.join(f'{topic}-{p}' for p in missing)} has no tiered data (the store "
                    f"holds partitions {sorted(histories) or 'none'} of {topic})"
                )
            for lost in catalog.unreadable(topic, tid):
                if data_loss is None:
                    raise ReaderError(lost.message())
                data_loss(lost.message())
            starts, looked_in = catalog.recorded_starts(topic, tid), catalog.looked_in(topic, tid)
            chosen = [h for p, h in sorted(histories.items()) if partitions.contains(p)]
            # each partition's first and last copies (what every plan asks first), the partitions at once
            ends = map_concurrently(lambda h: (h.first_offset, h.next_offset), chosen)
            selected += [
                SelectedPartition(topic, tid, h, starts.get(h.partition), looked_in)
                for h, (_, end) in zip(chosen, ends, strict=True)
                if end is not None
            ]
    except CatalogError as exc:
        raise ReaderError(str(exc)) from None
    return selected
