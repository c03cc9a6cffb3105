"""One history per partition: the segment copies a consumer of the final log would read, nothing twice.

A store can hold more than one copy of the same offsets:
- a copy retried under a new segment id (the broker crashed before recording the first one as finished,
  or Kafka deleted the upload but the delete did not reach the store): identical records twice;
- an unclean leader election: the old leader tiered records of epoch N that the new leader never had, and
  the new leader's epoch N+1 starts at an offset the old branch also used.

Each manifest carries its segment's leader-epoch chain (epoch -> first offset). The final log's lineage is
built from the segments of the highest epochs downward, as the new leader's epoch cache would have it: an
epoch of the lineage ends where the next one starts. A segment's records of epoch E are part of the final
log only inside the lineage's range of E, so a truncated branch (records of E past the offset where E+1
began, or of an epoch the lineage does not contain) is cut off exactly. What is left is covered greedily
by offset: each offset comes from one copy (the one reaching furthest, the newest among equals).

Compacted history. A segment's slice ends at its last batch (`StoredSegment.last_record_offset`),
not at Kafka's `endOffset`, which is the next segment's base - 1 and can lie past it in a log compacted
before it was tiered. The offsets between a used copy's last batch and its `endOffset` were compacted away
(Kafka's log has no record there either; a consumer skips them), so they are no gap: readers return no
rows for them and raise no data loss. Offsets no copy claims (between one segment's `endOffset` and the
next one's base) stay a gap: records Kafka had and the store does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rsm.catalog.segments import StoredSegment


@dataclass(frozen=True)
class SegmentSlice:
    """The offsets [first_offset, last_offset] of a segment copy that belong to the partition's history."""

    segment: StoredSegment
    first_offset: int
    last_offset: int

    @property
    def whole(self) -> bool:
        return (
            self.first_offset <= self.segment.start_offset
            and self.last_offset >= self.segment.last_record_offset
        )


@runtime_checkable
class History(Protocol):
    """What a reader asks of a partition's history, whichever it holds: the whole `PartitionHistory`
    (every manifest read) or a `rsm.catalog.ranged.RangedHistory` (only the manifests a range needs).

    The ends of what is tiered and the questions about a range of offsets; both answer them alike (the
    ranged one is tested against the whole one). Whole-history views (`slices`, `gaps`, `lineage`,
    `superseded`) are not part of it: callers that need them (migrate, `rsm store`) take a
    `PartitionHistory` from `TopicCatalog.histories`.
    """

    @property
    def partition(self) -> int: ...

    @property
    def first_offset(self) -> int | None:
        """The first offset in the store (Kafka's 'earliest' for what is tiered)."""

    @property
    def next_offset(self) -> int | None:
        """One past the last offset in the store (Kafka's 'latest' for what is tiered)."""

    @property
    def last_slice(self) -> SegmentSlice | None:
        """The slice holding the last offset in the store (its producer snapshot gives the LSO)."""

    def between(self, first: int, last: int) -> list[SegmentSlice]:
        """The slices narrowed to offsets [first, last]."""

    def gaps_between(self, first: int, last: int) -> list[tuple[int, int]]:
        """The gaps that touch offsets [first, last]."""

    def first_at_timestamp(self, timestamp: int) -> SegmentSlice | None:
        """The first slice whose segment's max timestamp reaches `timestamp` (Kafka's offsetsForTimes)."""

    def walk(self, first: int) -> Iterator[SegmentSlice]:
        """The slices holding offsets >= `first`, in order (a caller stops when it has what it needs)."""


@dataclass(frozen=True)
class PartitionHistory:
    """A partition's history in the store: ordered, non-overlapping slices of segment copies."""

    partition: int
    slices: tuple[SegmentSlice, ...]
    lineage: tuple[tuple[int, int], ...]  # (epoch, first offset), ascending
    superseded: tuple[tuple[StoredSegment, str], ...]  # copies that contribute nothing, and why
    gaps: tuple[tuple[int, int], ...]  # offset ranges inside the history that no copy holds

    @property
    def first_offset(self) -> int | None:
        return self.slices[0].first_offset if self.slices else None

    @property
    def next_offset(self) -> int | None:
        """One past the last offset in the store (Kafka's 'latest' for what is tiered)."""
        return self.slices[-1].last_offset + 1 if self.slices else None

    def between(self, first: int, last: int) -> list[SegmentSlice]:
        """The slices narrowed to offsets [first, last]."""
        out = []
        for s in self.slices:
            lo, hi = max(s.first_offset, first), min(s.last_offset, last)
            if lo <= hi:
                out.append(SegmentSlice(s.segment, lo, hi))
        return out

    # The questions a planner asks, answered the same way by `rsm.catalog.ranged.RangedHistory` from the
    # manifests of the range only: planners ask these rather than walk `slices`, whichever they were given.
    @property
    def last_slice(self) -> SegmentSlice | None:
        """The slice holding the last offset in the store (its producer snapshot gives the LSO)."""
        return self.slices[-1] if self.slices else None

    def gaps_between(self, first: int, last: int) -> list[tuple[int, int]]:
        """The gaps (whole) that touch offsets [first, last]."""
        return [(a, b) for a, b in self.gaps if a <= last and b >= first]

    def first_at_timestamp(self, timestamp: int) -> SegmentSlice | None:
        """The first slice whose segment's max timestamp reaches `timestamp` (Kafka's offsetsForTimes)."""
        return next((s for s in self.slices if s.segment.max_timestamp_ms >= timestamp), None)

    def walk(self, first: int) -> Iterator[SegmentSlice]:
        """The slices holding offsets >= `first`, in order (a caller stops when it has what it needs)."""
        return (s for s in self.slices if s.last_offset >= first)


def _lineage(segments: list[StoredSegment], epoch_cache: tuple[tuple[int, int], ...] = ()) -> dict[int, int]:
    """Epoch -> first offset of the final log, from the newest leader's chain down to the oldest.

    ``epoch_cache``: the newest leader's leader-epoch checkpoint (the whole cache up to its segment's
    end), read right after its chain: it names the epochs below, so older branches cannot add theirs."""
    ordered = sorted(segments, key=lambda s: (s.max_epoch, s.end_offset, s.manifest.created_ms), reverse=True)
    if not ordered:
        return {}
    lineage = dict(ordered[0].epochs)  # the newest leader's chain, whole
    chains = [tuple(sorted(epoch_cache, reverse=True))] if epoch_cache else []
    chains += [tuple(sorted(seg.epochs, reverse=True)) for seg in ordered[1:]]
    for chain in chains:
        # highest epoch first: an older segment's epochs each extend the lineage below the one above
        for epoch, start in chain:
            if not lineage:
                lineage[epoch] = start
                continue
            if epoch in lineage:
                lineage[epoch] = min(lineage[epoch], start)  # an epoch's start may be clamped to a segment's
            elif epoch < min(lineage) and start < lineage[min(lineage)]:
                lineage[epoch] = start  # older history, below everything seen so far
            # else: an epoch between the lineage's epochs is a branch the final log does not have
    return lineage


def _valid_ranges(seg: StoredSegment, lineage: dict[int, int]) -> list[tuple[int, int]]:
    """The offset ranges of `seg` whose records are in the final log (by their epoch)."""
    if not lineage:
        return (
            [(seg.start_offset, seg.last_record_offset)] if seg.last_record_offset >= seg.start_offset else []
        )
    epochs = sorted(lineage)
    out = []
    for epoch, lo, hi in seg.epoch_ranges():
        if epoch not in lineage:
            continue
        i = epochs.index(epoch)
        lineage_end = lineage[epochs[i + 1]] - 1 if i + 1 < len(epochs) else None
        lo = max(lo, lineage[epoch])
        hi = hi if lineage_end is None else min(hi, lineage_end)
        if lo <= hi:
            if out and out[-1][1] + 1 == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def unclaimed(gap: tuple[int, int], claimed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces of `gap` outside every claimed range (`claimed` sorted by start; `gap` not empty)."""
    a, b = gap
    out = []
    for lo, hi in claimed:
        if hi < a or lo > b:
            continue
        if lo > a:
            out.append((a, lo - 1))
        a = max(a, hi + 1)
        if a > b:
            return out
    out.append((a, b))
    return out


def resolve_history(
    partition: int,
    segments: Iterable[StoredSegment],
    *,
    lineage_from: Iterable[StoredSegment] = (),
    epoch_cache: tuple[tuple[int, int], ...] = (),
) -> PartitionHistory:
    """The partition's history from all its committed copies (see the module docstring).

    ``lineage_from``: more copies whose leader-epoch chains count for the lineage only (none of their
    offsets is served): a history resolved over a range of offsets (`rsm.catalog.ranged`) passes the
    newest leader's copy there, and its leader-epoch checkpoint as ``epoch_cache``, so its lineage is the
    one the whole partition's would be.
    """
    segs = [s for s in segments if s.partition == partition and s.end_offset >= s.start_offset]
    extra = [s for s in lineage_from if s.partition == partition and all(s is not t for t in segs)]
    lineage = _lineage(segs + extra, epoch_cache)
    candidates: list[tuple[int, int, StoredSegment]] = []
    superseded: list[tuple[StoredSegment, str]] = []
    empty: list[StoredSegment] = []
    for seg in segs:
        if seg.last_record_offset < seg.start_offset:
            # the cleaner left no batch: its offsets were all compacted away, which is no loss
            empty.append(seg)
            superseded.append((seg, "it holds no batch (every offset compacted away)"))
            continue
        ranges = _valid_ranges(seg, lineage)
        if not ranges:
            superseded.append((seg, "its records are on a truncated leader-epoch branch"))
        candidates.extend((lo, hi, seg) for lo, hi in ranges)
    # by start; among equal starts the one reaching furthest, then the newest copy
    candidates.sort(key=lambda c: (c[0], -c[1], -c[2].manifest.created_ms))
    slices: list[SegmentSlice] = []
    gaps: list[tuple[int, int]] = []
    used: set[int] = set()
    next_needed: int | None = None
    for lo, hi, seg in candidates:
        if next_needed is not None and hi < next_needed:
            continue
        if next_needed is not None and lo > next_needed:
            gaps.append((next_needed, lo - 1))
        first = lo if next_needed is None else max(lo, next_needed)
        slices.append(SegmentSlice(seg, first, hi))
        used.add(id(seg))
        next_needed = hi + 1
    # offsets a used copy claims but holds no batch for (a compacted tail; every offset of a copy the
    # cleaner emptied) are no loss: only what is left of a gap once their [start_offset, end_offset] is out
    claimed = sorted({(s.start_offset, s.end_offset) for s in [*(x.segment for x in slices), *empty]})
    gaps = [piece for gap in gaps for piece in unclaimed(gap, claimed)]
    for seg in segs:
        if id(seg) not in used and not any(s is seg for s, _ in superseded):
            superseded.append((seg, "its offsets are all held by another copy"))
    return PartitionHistory(
        partition=partition,
        slices=tuple(slices),
        lineage=tuple(sorted(lineage.items())),
        superseded=tuple(superseded),
        gaps=tuple(gaps),
    )
