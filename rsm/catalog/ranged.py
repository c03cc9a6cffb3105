"""A partition's history answered for a range of offsets from that range's manifests only.

Why: `resolve_history` over every copy costs one manifest GET per segment, on every query, however narrow
(a year of segments took minutes to plan). Keys carry base offsets (`rsm.catalog.keys`), so a
listing tells which copies can hold a range; `RangedHistory` reads those manifests only and resolves them
with the same rules (`rsm.catalog.history`), answering what planners ask:

- `first_offset` / `next_offset`: from the copies of the first (last) base offsets, going on to the next
  (previous) ones only while they hold nothing of the final log;
- `between(lo, hi)` / `gaps_between`: the copies with a base in [the greatest base <= lo, hi], one more base
  further back, and, while some offset of [lo, hi] is held by no copy, one base further back again (an
  earlier-based copy can reach into the range: a retried copy of a longer segment, another leader's
  segment boundaries), up to `MAX_BACK` bases; what is left uncovered then is a gap as in the full history;
- `first_at_timestamp`: bisection over base offsets (segments' max timestamps ordered, as Kafka's
  `offsetsForTimes` assumes): O(log n) manifests; with probes (S3), a bisection over offsets whose every
  step lists a few keys from an offset on, so a timestamp never lists the partition whole;
- `walk(lo)`: slices from `lo` on, a window of bases at a time (aborted transactions stop when bounded).

The lineage (epoch -> first offset) is the newest leader's, as in the full history: the newest copy is the
one of highest (epoch, end offset, creation) among the copies at the last bases and the copies committed
last (listing times: an unclean election's new leader commits after the old one stopped), and its
leader-epoch checkpoint (Kafka writes the whole epoch cache up to the segment's end into it) names the
epochs below it, so a truncated branch inside a range is cut off without reading the history before it.

`slices`, `gaps`, `lineage` and `superseded` are the whole partition's (every manifest, read once on first
use), so callers that need the whole history (migrate, `rsm store ls`, tests) get exactly what
`resolve_history` gives.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator

from rsm.api.metadata import uuid_to_base64
from rsm.catalog.history import PartitionHistory, SegmentSlice, resolve_history, unclaimed
from rsm.catalog.keys import UNPLACED, SegmentKey
from rsm.catalog.listing import INF, PartitionListing, Probe
from rsm.catalog.segments import StoredSegment, load_segment, map_concurrently
from rsm.store.objects import ObjectStore

log = logging.getLogger(__name__)

MAX_BACK = 8  # distinct base offsets a range looks back for a copy reaching into it
NEWEST_BY_TIME = 4  # copies committed last, read to find the newest leader's copy
TOP_BASES = 2  # the last base offsets' copies, read for the same
WALK_BASES = 16  # the most base offsets `walk` resolves at a time

EpochCache = Callable[[StoredSegment], tuple[tuple[int, int], ...]]


class RangedHistory:
    """`PartitionHistory`'s questions answered from the manifests a range needs (module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        topic: str,
        topic_id: uuid.UUID,
        partition: int,
        keys: Iterable[SegmentKey],
        *,
        epoch_cache: EpochCache | None = None,
        head: Iterable[SegmentKey] | None = None,
        relist: Callable[[], list[SegmentKey]] | None = None,
        probe: Probe | None = None,
        near: int | None = None,
    ) -> None:
        """`keys`: the partition's committed copies as listed. When the listing started past the
        partition's first copy (a stream's trigger, from its previous end), `head` holds the first copies
        and `relist` lists the whole partition, used only if a range reaches before `keys`.
        `epoch_cache` reads a copy's leader-epoch checkpoint (the planner's, which holds the keyring).
        `probe` (with `relist`, `keys` empty): nothing is listed up front; `probe(base, limit)` lists the
        copies from a base offset on (at most `limit` objects) and the planner lists only where its ranges,
        the first and the last copies are (`rsm.catalog.listing`); `near`: a base offset the
        caller's ranges start at or after (a stream's previous end), where the search for the last copies
        starts."""
        self.store = store
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self._tid = uuid_to_base64(topic_id)
        self._epoch_cache = epoch_cache
        self._segs: dict[tuple[str, str], StoredSegment | None] = {}
        self._full: PartitionHistory | None = None
        self._windows: dict[tuple[int, int], PartitionHistory] = {}
        self._newest: tuple[list[StoredSegment], tuple[tuple[int, int], ...]] | None = None
        self._first: tuple[int | None] | None = None
        self._last: tuple[SegmentSlice | None] | None = None
        self._listing = PartitionListing(
            topic,
            partition,
            keys,
            head=head,
            relist=relist,
            probe=probe,
            near=near,
            on_unplaced=self._unplaced_listed,
        )
        if any(k.base == UNPLACED for k in self.keys):
            self._unplaced()

    # -- the listing (`rsm.catalog.listing`) ---------------------------------------------------------
    @property
    def keys(self) -> list[SegmentKey]:
        """The partition's copies listed so far, in order."""
        return self._listing.keys

    @property
    def _probe(self) -> Probe | None:
        return self._listing.probe

    @_probe.setter
    def _probe(self, probe: Probe | None) -> None:
        self._listing.probe = probe

    def _unplaced(self) -> None:
        log.warning(
            "%s-%d: some manifests' names carry no base offset; this partition is planned from every manifest",
            self.topic,
            self.partition,
        )
        self.full()

    def _unplaced_listed(self) -> None:
        """A probe listed a manifest whose name carries no base offset: the partition is listed whole."""
        self._list_all("some manifests' names carry no base offset")
        self._unplaced()

    def base_before(self, offset: int, back: int = 1) -> int | None:
        """A base offset of a listed copy at or before `offset`, `back` more bases before the greatest
        one (a range from `offset` reads from there: see `window`); None when none is listed there."""
        self._listing.ensure_back(offset, back + 1)
        bases = self._listing.bases
        i = bisect.bisect_right(bases, offset) - 1 - back
        return bases[i] if i >= 0 else None

    @property
    def listed_from_start(self) -> bool:
        return self._listing.relist is None

    def _list_all(self, why: str) -> None:
        if self._listing.list_all(why):
            self._windows.clear()
            self._newest = None

    # -- manifests -----------------------------------------------------------------------------------
    def _load(self, keys: Iterable[SegmentKey]) -> list[StoredSegment]:
        """The copies' manifests (each read once), those deleted since the listing left out."""
        keys = list(dict.fromkeys(keys))
        todo = [k for k in keys if (k.location.bucket, k.manifest_key) not in self._segs]

        def load(k: SegmentKey) -> StoredSegment | None:
            return load_segment(self.store, self.topic, self._tid, k.location, k.manifest_key)

        for k, seg in zip(todo, map_concurrently(load, todo), strict=True):
            self._segs[(k.location.bucket, k.manifest_key)] = seg
        out = [self._segs[(k.location.bucket, k.manifest_key)] for k in keys]
        return [s for s in out if s is not None]

    def _keys_of(self, bases: Iterable[int]) -> list[SegmentKey]:
        return [k for b in bases for k in self._listing.by_base.get(b, [])]

    def newest(self) -> tuple[list[StoredSegment], tuple[tuple[int, int], ...]]:
        """The newest leader's copy (as a list of none or one) and its leader-epoch checkpoint."""
        if self._newest is None:
            candidates = self._keys_of(self._listing.tail_bases(TOP_BASES))
            candidates += sorted(self.keys, key=lambda k: (k.modified, k.order))[-NEWEST_BY_TIME:]
            segs = self._load(candidates)
            best = max(segs, key=lambda s: (s.max_epoch, s.end_offset, s.manifest.created_ms), default=None)
            cache: tuple[tuple[int, int], ...] = ()
            if best is not None and self._epoch_cache is not None:
                cache = self._epoch_cache(best)
            self._newest = ([best] if best is not None else [], cache)
        return self._newest

    def _resolve(self, bases: Iterable[int]) -> PartitionHistory:
        """The history of the copies at these base offsets, with the newest leader's lineage."""
        top, cache = self.newest()
        return resolve_history(
            self.partition, self._load(self._keys_of(bases)), lineage_from=top, epoch_cache=cache
        )

    # -- the whole history ---------------------------------------------------------------------------
    def full(self) -> PartitionHistory:
        """The whole partition's history: every manifest (what `TopicCatalog.histories` gives)."""
        if self._full is None:
            self._list_all("the whole history was asked for")
            self._full = resolve_history(self.partition, self._load(self.keys))
        return self._full

    @property
    def slices(self) -> tuple[SegmentSlice, ...]:
        return self.full().slices

    @property
    def gaps(self) -> tuple[tuple[int, int], ...]:
        return self.full().gaps

    @property
    def lineage(self) -> tuple[tuple[int, int], ...]:
        return self.full().lineage

    @property
    def superseded(self) -> tuple[tuple[StoredSegment, str], ...]:
        return self.full().superseded

    # -- ends ----------------------------------------------------------------------------------------
    @property
    def first_offset(self) -> int | None:
        """The first offset in the store (Kafka's 'earliest' for what is tiered)."""
        if self._full is not None:
            return self._full.first_offset
        if self._first is None:
            self._first = (self._find_first(),)
        return self._first[0]

    def _find_first(self) -> int | None:
        self._listing.ensure_head()
        keys = self._listing.head if self._listing.head is not None else self.keys
        by_base: dict[int, list[SegmentKey]] = {}
        for k in keys:
            by_base.setdefault(k.base, []).append(k)
        bases = sorted(by_base)
        top, cache = self.newest()
        for i in range(len(bases)):
            segs = self._load(k for b in bases[: i + 1] for k in by_base[b])
            first = resolve_history(self.partition, segs, lineage_from=top, epoch_cache=cache).first_offset
            if first is None or (i + 1 < len(bases) and first > bases[i + 1]):
                continue  # cut short (a truncated branch, all compacted): a later base may hold earlier
            if i + 1 == len(bases) and self._listing.head is not None:
                break  # the head listing ends here: what lies after it is not known
            return first
        if self._listing.head is not None:
            self._list_all("the first listed copies hold nothing of the final log")
            return self._find_first()
        return None

    @property
    def last_slice(self) -> SegmentSlice | None:
        """The slice holding the last offset in the store."""
        if self._full is not None:
            return self._full.last_slice
        if self._last is None:
            self._last = (self._find_last(),)
        return self._last[0]

    def _find_last(self) -> SegmentSlice | None:
        n = 1
        while True:
            bases = self._listing.tail_bases(n)
            h = self._resolve(bases)
            if h.slices:
                return h.slices[-1]
            if len(bases) < n:
                break
            n += 1
        if self._listing.relist is not None:
            self._list_all("the listed copies hold nothing of the final log")
            return self._find_last()
        return None

    @property
    def next_offset(self) -> int | None:
        """One past the last offset in the store (Kafka's 'latest' for what is tiered)."""
        last = self.last_slice
        return None if last is None else last.last_offset + 1

    # -- ranges --------------------------------------------------------------------------------------
    def window(self, first: int, last: int) -> PartitionHistory:
        """The history of offsets [first, last]: its slices narrowed to them, the gaps touching them."""
        if self._full is not None:
            h = self._full
            return PartitionHistory(
                h.partition, tuple(h.between(first, last)), h.lineage, (), tuple(h.gaps_between(first, last))
            )
        found = self._windows.get((first, last))
        if found is None:
            found = self._windows[(first, last)] = self._window(first, last)
        return found

    def _window(self, first: int, last: int) -> PartitionHistory:
        if (
            self._listing.bases
            and first < self._listing.bases[0]
            and self._listing.relist is not None
            and self._listing.probe is None
        ):
            self._list_all(f"offset {first} lies before the copies listed")
        # the bases up to `last` and the next one (where a hole at the range's end ends, as in the full
        # history), from the base holding `first` and one more before it
        need, back = 2, 0
        while True:
            if self._listing.probe is not None:
                self._listing.ensure_back(first, need)
                nxt = next((b for b in self._listing.bases if b > last), INF)
                if not self._listing.covered(first, nxt):
                    self._listing.list_span(first, last)
            hi = bisect.bisect_right(self._listing.bases, last) + 1
            lo = max(0, bisect.bisect_right(self._listing.bases, first) - need)
            h = self._resolve(self._listing.bases[lo:hi])
            missing = _uncovered(h, first, last)
            if not missing:
                break
            if lo == 0:
                if self._listing.relist is not None and self._listing.probe is None:
                    self._list_all(
                        f"offsets {missing[0][0]}..{missing[0][1]} may lie before the copies listed"
                    )
                    return self._window(first, last)
                break
            if back >= MAX_BACK:
                break
            need += 1
            back += 1
        return PartitionHistory(
            self.partition,
            tuple(h.between(first, last)),
            h.lineage,
            h.superseded,
            tuple(h.gaps_between(first, last)),
        )

    def between(self, first: int, last: int) -> list[SegmentSlice]:
        """The slices narrowed to offsets [first, last] (only the manifests that can hold them read)."""
        return list(self.window(first, last).slices)

    def gaps_between(self, first: int, last: int) -> list[tuple[int, int]]:
        """The gaps touching offsets [first, last]."""
        return list(self.window(first, last).gaps)

    def walk(self, first: int, step: int = 2) -> Iterator[SegmentSlice]:
        """The slices holding offsets >= `first`, in order (the first one narrowed to start there):
        `step` base offsets resolved first, twice as many each time after (up to `WALK_BASES`), so a
        caller that stops early read little."""
        if self._full is not None:
            yield from self._full.walk(first)
            return
        end = self.next_offset
        cur = first
        pending: SegmentSlice | None = None  # a slice cut by a window's end goes on in the next window
        while end is not None and cur < end:
            if self._listing.probe is not None:  # bases past `cur` are not all listed: a guess in offsets
                upto = min(end - 1, cur + self._listing.spacing() * step)
            else:
                i = bisect.bisect_right(self._listing.bases, cur)
                upto = end - 1 if i + step >= len(self._listing.bases) else self._listing.bases[i + step] - 1
            upto = max(upto, cur)
            for s in self.between(cur, upto):
                if (
                    pending is not None
                    and s.segment is pending.segment
                    and s.first_offset == pending.last_offset + 1
                ):
                    pending = SegmentSlice(s.segment, pending.first_offset, s.last_offset)
                    continue
                if pending is not None:
                    yield pending
                pending = s
            cur = upto + 1
            step = min(2 * step, WALK_BASES)
        if pending is not None:
            yield pending

    def first_at_timestamp(self, timestamp: int) -> SegmentSlice | None:
        """The first slice whose segment's max timestamp reaches `timestamp`, by bisection over bases."""
        if self._full is not None:
            return self._full.first_at_timestamp(timestamp)
        start = self._probed_timestamp_base(timestamp) if self._listing.probe is not None else None
        if start is None:
            if self._listing.relist is not None:
                self._list_all("a timestamp is looked up")  # then bisected: O(log n) manifests
            lo, hi = 0, len(self._listing.bases)
            while lo < hi:  # the first base whose copies' max timestamp reaches it
                mid = (lo + hi) // 2
                if self._reaches(self._listing.bases[mid], timestamp):
                    hi = mid
                else:
                    lo = mid + 1
            start = self._listing.bases[max(lo - 1, 0)] if self._listing.bases else 0
        for s in self.walk(start):  # the slice it is (a copy cut off or superseded: the next one)
            if s.segment.max_timestamp_ms >= timestamp:
                return s
        return None

    def _reaches(self, base: int, timestamp: int) -> bool:
        """Whether the copies at a base offset hold a record with a timestamp >= `timestamp`."""
        segs = self._load(self._listing.by_base[base])
        return bool(segs) and max(s.max_timestamp_ms for s in segs) >= timestamp

    def _probed_timestamp_base(self, timestamp: int) -> int | None:
        """Where a walk for `timestamp` starts (the base before the first whose copies reach it), bisecting
        offsets between the first and last copies: each step finds the first base from an offset on (a probe
        of a few keys) and reads its manifests. None when the partition was listed whole meanwhile (the
        caller bisects that listing)."""
        self._listing.ensure_tail()
        if self._listing.probe is None or not self._listing.bases:
            return None
        lo, last = self._listing.bases[0], self._listing.bases[-1]
        if self._reaches(lo, timestamp):
            return lo
        if not self._reaches(last, timestamp):
            return last
        # lo's copies do not reach it and no base in [hi, the first base that does) is left unread: the
        # answer (that base's predecessor) is in [lo, hi)
        hi = last
        while hi - lo > 1:
            mid = (lo + hi) // 2
            base = self._listing.next_base(mid)
            if self._listing.probe is None:
                return None
            if base is None or base >= hi:
                hi = mid
            elif self._reaches(base, timestamp):
                hi = base
            else:
                lo = base
        return lo


def _uncovered(h: PartitionHistory, first: int, last: int) -> list[tuple[int, int]]:
    """Offsets of [first, last] that no slice holds and no used copy claims (a compacted tail)."""
    claimed = sorted(
        [(s.first_offset, s.last_offset) for s in h.slices]
        + [
            (s.last_offset + 1, s.segment.end_offset)
            for s in h.slices
            if s.last_offset == s.segment.last_record_offset
        ]
        + [(g.start_offset, g.end_offset) for g, _ in h.superseded if g.last_record_offset < g.start_offset]
    )
    return unclaimed((first, last), claimed) if first <= last else []
