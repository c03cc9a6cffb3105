"""How many fetches the bridge works on at once, whatever the number of connections.

Why: Kafka holds up to ten remote reads open (one bridge connection and thread each), but the bridge has
one GIL and a few cores. With every connection thread runnable, each system call hands the GIL to another
thread and back (measured: ~28 futex calls per 1 MiB fetch with ten readers, and the bridge's CPU per GiB
up by a fifth over three readers). A permit bounds the streams doing work at once to about the number of
cores; a stream that waits (on its client, or on the network) lends its permit meanwhile, so waiting never
holds back another stream's work.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator


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
        self._sem = threading.Semaphore(limit) if limit else None
        self._held = threading.local()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Hold a permit for the block (blocks while ``limit`` other threads hold one)."""
        sem = self._sem
        if sem is None or getattr(self._held, "yes", False):
            yield
            return
        sem.acquire()
        self._held.yes = True
        try:
            yield
        finally:
            if self._held.yes:
                self._held.yes = False
                sem.release()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Lend this thread's permit (if it holds one) for the block, and take one back after it."""
        sem = self._sem
        if sem is None or not getattr(self._held, "yes", False):
            yield
            return
        self._held.yes = False
        sem.release()
        try:
            yield
        finally:
            sem.acquire()
            self._held.yes = True
