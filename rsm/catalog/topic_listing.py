"""A topic id's partitions listed for `RangedHistory`s: what `TopicCatalog.ranged_histories` lists, and how.

Apart from the catalog because it is one job with three ways of doing it, chosen by the store and the
caller (`TopicLister.histories`): probing (S3: nothing listed up front but the partitions, each history
lists where its ranges are), a whole listing of every partition (the file store, a batch query), and a
listing from a base offset on plus the first copies (a stream that remembers where it ended).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from rsm.catalog.keys import SegmentKey, list_partition, parse_listing, topic_dir
from rsm.catalog.listing import HEAD_OBJECTS, INF, Probe
from rsm.catalog.ranged import EpochCache, RangedHistory
from rsm.catalog.segments import map_concurrently
from rsm.store.layout import OBJECT_NAME, Location
from rsm.store.objects import ObjectNotFound, ObjectStore

__all__ = ["TopicLister"]


class TopicLister:
    """Lists one topic id's partitions at its locations ``where`` and builds their `RangedHistory`s.

    ``partitions_at(location)``: the partitions at one location (the catalog's, which notes what it saw).
    """

    def __init__(
        self,
        store: ObjectStore,
        topic: str,
        topic_id: uuid.UUID,
        where: list[Location],
        partitions_at: Callable[[Location], list[int]],
    ) -> None:
        self.store = store
        self.topic = topic
        self.topic_id = topic_id
        self.where = where
        self._partitions_at = partitions_at

    def histories(
        self,
        wanted: set[int] | None,
        *,
        after: Mapping[int, int] | None,
        epoch_cache: EpochCache | None,
        probe: bool,
    ) -> dict[int, RangedHistory]:
        """One history per partition with committed copies (`TopicCatalog.ranged_histories`)."""
        if probe:
            return self._probed(wanted, after, epoch_cache)
        if not after:
            keys, heads = self._listed_whole(wanted), {}
        else:
            keys, heads = self._listed_after(wanted, after)
        out = {}
        for partition, found in sorted(keys.items()):
            if (wanted is not None and partition not in wanted) or not (found or heads.get(partition)):
                continue
            suffix = partition in heads
            out[partition] = RangedHistory(
                self.store,
                self.topic,
                self.topic_id,
                partition,
                found,
                epoch_cache=epoch_cache,
                head=heads.get(partition) if suffix else None,
                relist=self.whole(partition) if suffix else None,
            )
        return out

    def _every_partition(self) -> list[list[int]]:
        """The partitions at each location, listed at once."""
        return map_concurrently(self._partitions_at, self.where)

    def _probed(
        self, wanted: set[int] | None, after: Mapping[int, int] | None, epoch_cache: EpochCache | None
    ) -> dict[int, RangedHistory]:
        """S3: nothing listed up front; each partition lists where its ranges are (`RangedHistory`)."""
        every = sorted({p for parts in self._every_partition() for p in parts})
        return {
            p: RangedHistory(
                self.store,
                self.topic,
                self.topic_id,
                p,
                [],
                epoch_cache=epoch_cache,
                relist=self.whole(p),
                probe=self.prober(p),
                near=(after or {}).get(p),
            )
            for p in every
            if wanted is None or p in wanted
        }

    def _listed_whole(self, wanted: set[int] | None) -> dict[int, list[SegmentKey]]:
        """Each partition's directory listed on its own, at once: S3 pages a listing one after another."""
        jobs = [
            (loc, p) for loc, parts in zip(self.where, self._every_partition(), strict=True) for p in parts
            if wanted is None or p in wanted
        ]  # fmt: skip
        listed = map_concurrently(
            lambda j: list_partition(self.store, j[0], self.topic, self.topic_id, j[1]), jobs
        )
        keys: dict[int, list[SegmentKey]] = {}
        for (_, partition), found in zip(jobs, listed, strict=True):
            keys.setdefault(partition, []).extend(found)
        return keys

    def _listed_after(
        self, wanted: set[int] | None, after: Mapping[int, int]
    ) -> tuple[dict[int, list[SegmentKey]], dict[int, list[SegmentKey]]]:
        """The partitions in ``after`` listed from their base offset on, with their first copies (heads);
        the others listed whole."""
        keys: dict[int, list[SegmentKey]] = {}
        heads: dict[int, list[SegmentKey]] = {}
        every = sorted({p for parts in self._every_partition() for p in parts})
        for partition in every:
            if wanted is not None and partition not in wanted:
                continue
            if partition not in after:
                keys[partition] = self.whole(partition)()
                continue
            keys[partition] = self._listed(partition, from_base=after[partition])
            heads[partition] = self._listed(partition, limit=HEAD_OBJECTS)
        return keys, heads

    def _listed(self, partition: int, **kwargs: int) -> list[SegmentKey]:
        """One partition's copies at every location (`list_partition` with ``kwargs``), listed at once."""
        listed = map_concurrently(
            lambda loc: list_partition(self.store, loc, self.topic, self.topic_id, partition, **kwargs),
            self.where,
        )
        return [k for keys in listed for k in keys]

    def whole(self, partition: int) -> Callable[[], list[SegmentKey]]:
        """A partition's whole listing, for a history to list again when it must."""

        def relist() -> list[SegmentKey]:
            return self._listed(partition)

        return relist

    def prober(self, partition: int) -> Probe:
        """`RangedHistory`'s probe: a partition's copies from a base offset on at every location, and the
        base up to which all of them are listed (the least of the locations')."""

        def probe(from_base: int | None, limit: int) -> tuple[list[SegmentKey], int]:
            keys: list[SegmentKey] = []
            upto = INF
            for loc in self.where:
                base = topic_dir(loc, self.topic, self.topic_id)
                pdir = f"{base}{partition}/"
                start = "" if from_base is None else f"{pdir}{from_base:020d}"
                try:
                    objs = self.store.list_from(loc.bucket, pdir, start_after=start, limit=limit)
                except (FileNotFoundError, ObjectNotFound):  # an earlier default's bucket may be gone
                    objs = []
                keys += parse_listing(loc, base, objs).get(partition, [])
                if len(objs) >= limit:
                    m = OBJECT_NAME.match(objs[-1].key.rsplit("/", 1)[-1])
                    last = int(m.group(1)) if m else (from_base or 0)
                    upto = min(upto, last - 1)  # the last base's copies may go on past the limit
            return [k for k in keys if k.base <= upto], upto

        return probe
