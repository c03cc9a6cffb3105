"""How many fetches the bridge works on at once, whatever the number of connections.

Why: Kafka holds up to ten remote reads open (one bridge connection and thread each), but the bridge has
one GIL and a few cores. With every connection thread runnable, each system call hands the GIL to another
thread and back (measured: ~28 futex calls per 1 MiB fetch with ten readers, and the bridge's CPU per GiB
up by a fifth over three readers). A permit bounds the streams doing work at once to about the number of
cores; a stream that waits (on its client, or on the network) lends its permit meanwhile, so waiting never
holds back another stream's work.

The permits are tokens in a ``queue.SimpleQueue`` (C code: taking and giving back a token is one call, and
a blocked taker waits with the GIL released), and the context managers are plain classes: a stream takes
and gives back a permit on every fetch, and ``threading.Semaphore`` (a Python-level Condition) plus
generator-based context managers cost a tenth of the bridge's own per-fetch work under ten readers.
"""

from __future__ import annotations

import os
import queue
import threading
from types import TracebackType


def default_permits() -> int:
    """One more than the cores this process may run on: the extra keeps a core busy across hand-offs."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores + 1


class WorkPermits:
    """At most ``limit`` threads at work at once (0: no limit); ``waiting()`` lends a held permit."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"work permits: expected 0 (no limit) or more, got {limit}")
        self.limit = limit
        self._tokens: queue.SimpleQueue[None] | None = queue.SimpleQueue() if limit else None
        for _ in range(limit):
            self._tokens.put(None)  # type: ignore[union-attr]
        self._held = threading.local()
        self._working = _Working(self)
        self._waiting = _Waiting(self)

    def working(self) -> _Working:
        """Hold a permit for the ``with`` block (blocks while ``limit`` other threads hold one)."""
        return self._working

    def waiting(self) -> _Waiting:
        """Lend this thread's permit (if it holds one) for the ``with`` block, and take one back after it."""
        return self._waiting

    def available(self) -> int | None:
        """Permits free now (None: no limit)."""
        return None if self._tokens is None else self._tokens.qsize()

    def holds(self) -> bool:
        """True when the calling thread holds a permit."""
        return getattr(self._held, "depth", 0) > 0


class _PermitBlock:
    """A reusable ``with`` block over one WorkPermits (its state is per thread, in ``_held``)."""

    __slots__ = ("_permits",)

    def __init__(self, permits: WorkPermits) -> None:
        self._permits = permits


class _Working(_PermitBlock):
    """Takes a permit on entry unless the thread holds one already (nested blocks take no second one)."""

    __slots__ = ()

    def __enter__(self) -> None:
        p = self._permits
        held = p._held
        depth = getattr(held, "depth", 0)
        if depth == 0 and p._tokens is not None:
            p._tokens.get()
        held.depth = depth + 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        p = self._permits
        held = p._held
        held.depth -= 1
        if held.depth == 0 and p._tokens is not None:
            p._tokens.put(None)


class _Waiting(_PermitBlock):
    """Gives the thread's permit back for the block (if it holds one) and takes one again after it."""

    __slots__ = ()

    def __enter__(self) -> None:
        p = self._permits
        held = p._held
        depth = getattr(held, "depth", 0) if p._tokens is not None else 0
        lent = getattr(held, "lent", None)
        if lent is None:
            lent = held.lent = []
        lent.append(depth)  # restored on exit (a stack: waits may nest); 0: nothing lent
        if depth:
            held.depth = 0
            p._tokens.put(None)  # type: ignore[union-attr]

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        p = self._permits
        held = p._held
        depth = held.lent.pop()
        if depth:
            p._tokens.get()  # type: ignore[union-attr]
            held.depth = depth
