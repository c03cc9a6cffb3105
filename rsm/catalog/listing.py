"""Which copies of a partition are listed, and listing more of them where a range needs it.

`RangedHistory` (`rsm.catalog.ranged`) answers from manifests; this is the listing it reads them by: the
keys listed so far by base offset, and how more are listed. Up front (a whole listing, or one from a
stream's previous end with the partition's first copies, `head`), or, with a `probe` (S3), nothing up front:
the base offsets a question needs are listed then, a page from a base offset at a time, and the intervals
listed whole are remembered (`known`), so a range, the partition's first and its last copies each cost a
few small listings, never the whole partition (unless a question needs it: `list_all`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable

from rsm.catalog.keys import UNPLACED, SegmentKey

log = logging.getLogger("rsm.catalog.ranged")  # the planner's log lines keep their logger

# lists a partition's copies from a base offset on (None: from the first), about `limit` objects; returns
# them and the base offset up to which every copy is among them (`INF`: the partition's end was reached)
Probe = Callable[[int | None, int], tuple[list[SegmentKey], int]]

INF = 1 << 63
LIST_PAGE = 1000  # objects a listing asks for at a time (an S3 page)
HEAD_OBJECTS = 30  # objects listed from a partition's start for its earliest offset (ten copies)
TAIL_OBJECTS = 60  # objects a probe for the partition's end asks for
RECORDS_GUESS = 1000  # offsets between base offsets assumed before any is listed


class PartitionListing:
    """A partition's copies as listed (`keys`, `by_base`, `bases`), listed further as questions need.

    ``on_unplaced`` is called when a probe finds a manifest whose name carries no base offset (the
    partition must then be planned from every manifest).
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        keys: Iterable[SegmentKey],
        *,
        head: Iterable[SegmentKey] | None,
        relist: Callable[[], list[SegmentKey]] | None,
        probe: Probe | None,
        near: int | None,
        on_unplaced: Callable[[], None],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.relist = relist
        self.head = sorted(head, key=lambda k: k.order) if head is not None else None
        self.probe = probe
        self.near = near
        self.known: list[tuple[int, int]] = []  # base offset intervals listed whole (`probe` only)
        self.tail_known = False
        self._on_unplaced = on_unplaced
        self.set_keys(keys)
        if self.head is not None and self.keys and self.head[-1].base >= self.keys[0].base:
            # the first copies reach the listed ones: together they are the whole partition
            self.set_keys({*self.head, *self.keys})
            self.head, self.relist = None, None

    def set_keys(self, keys: Iterable[SegmentKey]) -> None:
        """The listed copies replaced by `keys`."""
        self.keys = sorted(keys, key=lambda k: k.order)
        self.by_base: dict[int, list[SegmentKey]] = {}
        for k in self.keys:
            self.by_base.setdefault(k.base, []).append(k)
        self.bases = sorted(self.by_base)

    def add(self, keys: Iterable[SegmentKey]) -> None:
        self.set_keys({*self.keys, *keys})
        if self.probe is not None and self.bases and self.bases[0] == UNPLACED:
            self._on_unplaced()

    def cover(self, a: int, b: int) -> None:
        if a > b:
            return
        merged: list[tuple[int, int]] = []
        for x, y in sorted([*self.known, (a, b)]):
            if merged and x <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], y))
            else:
                merged.append((x, y))
        self.known = merged

    def covered(self, a: int, b: int) -> bool:
        return self.probe is None or any(x <= a and b <= y for x, y in self.known)

    def spacing(self) -> int:
        """Offsets between base offsets, as far as listed (for a first guess of where to list)."""
        if len(self.bases) < 2:
            return RECORDS_GUESS
        return max(1, (self.bases[-1] - self.bases[0]) // (len(self.bases) - 1))

    def list_span(self, a: int, b: int) -> None:
        """List the copies with a base in [a, b] and those of the next base after b (paged from a)."""
        start, limit = a, LIST_PAGE
        while self.probe is not None:
            got, upto = self.probe(start, limit)
            self.add(got)
            self.cover(start, upto)
            if upto >= INF or any(b < x <= upto for x in self.bases):
                return
            if upto < start:
                limit *= 4  # one base's objects filled the page
                continue
            start = upto + 1

    def ensure_head(self) -> None:
        """The first copies listed (for the earliest offset), and an idea of the offsets between bases."""
        if self.probe is None or self.head is not None:
            return
        got, upto = self.probe(None, HEAD_OBJECTS)
        self.head = sorted(got, key=lambda k: k.order)
        self.add(got)
        self.cover(0, upto)
        if upto >= INF and self.probe is not None:  # the whole partition fitted
            self.head, self.relist, self.probe = None, None, None

    def ensure_back(self, x: int, n: int) -> None:
        """At least `n` base offsets <= x listed with everything between them and x (or all from 0)."""
        if self.probe is None:
            return
        d = self.spacing() * (n + 1)
        while self.probe is not None:
            a = max(0, x - d)
            if not self.covered(a, x):
                self.list_span(a, x)
            if a == 0 or sum(1 for b in self.bases if a <= b <= x) >= n:
                return
            d *= 4

    def ensure_tail(self) -> None:
        """The last copies listed (to the end): galloping, then bisecting, probes of a few keys each."""
        self.ensure_head()
        if self.probe is None or self.tail_known:
            return
        self.tail_known = True
        lo = self.bases[-1] if self.bases else 0  # copies exist at or after it
        step, none_at = self.spacing() * 64, None
        # listed first from a stream's previous end, else from the head's end: a short partition (most of
        # a store's) ends within that one probe, where galloping past it would bisect back for its end
        near: int | None = self.near if self.near is not None and self.near > lo else lo
        while self.probe is not None:
            at = near if near is not None else lo + step if none_at is None else (lo + none_at) // 2
            near = None
            # the end lies in [lo, none_at): listed from lo once a page or so covers that (bisecting on to
            # a single offset would cost a probe per halving)
            if none_at is not None and (at <= lo or none_at - lo <= self.spacing() * LIST_PAGE // 6):
                self.list_span(lo, INF)
                return
            got, upto = self.probe(at, TAIL_OBJECTS)
            self.add(got)
            self.cover(at, upto)
            if got and upto >= INF:
                return
            if not got:
                none_at = at
                continue
            lo = max(lo, max(k.base for k in got))
            if none_at is None:
                step *= 4

    def tail_bases(self, n: int) -> list[int]:
        """The last `n` base offsets (fewer in a shorter partition), listed whole."""
        if self.probe is not None:
            self.ensure_tail()
            if self.bases:
                self.ensure_back(self.bases[-1], n)
        return self.bases[-n:]

    def next_base(self, at: int) -> int | None:
        """The least base offset >= `at`, with all its copies listed (probing from where the listed
        intervals end); None when no copy lies at or after it."""
        limit = TAIL_OBJECTS
        while True:
            i = bisect.bisect_left(self.bases, at)
            nxt = self.bases[i] if i < len(self.bases) else None
            if self.probe is None or self.covered(at, INF if nxt is None else nxt):
                return nxt
            start = at
            for x, y in self.known:  # merged intervals, in order: skip what is listed already
                if x <= start <= y:
                    start = y + 1
            got, upto = self.probe(start, limit)
            self.add(got)
            self.cover(start, upto)
            if upto < start:
                limit *= 4  # one base's objects filled the page

    def list_all(self, why: str) -> bool:
        """The whole partition listed (when it was not): True when it was listed now."""
        if self.relist is None:
            return False
        if self.probe is None:
            log.info("%s-%d: listing the whole partition (%s)", self.topic, self.partition, why)
        self.set_keys(self.relist())
        self.relist = None
        self.probe = None
        self.head = None
        return True
