"""`rsm.fetch.prefetch.prefetched`: in order, one item ahead, and never waiting for a read left behind."""

from __future__ import annotations

import threading
import time

import pytest

from rsm.fetch.prefetch import prefetched


def test_results_come_in_order_with_the_next_one_in_flight() -> None:
    started: list[int] = []

    def fetch(i: int) -> int:
        started.append(i)
        return i * i

    it = prefetched(fetch, range(5), "t")
    assert next(it) == 0
    time.sleep(0.05)
    assert started[:2] == [0, 1]  # item 1 was asked for before item 0 was handed over
    assert list(it) == [1, 4, 9, 16]
    assert list(prefetched(fetch, [], "t")) == []


def test_an_error_reaches_the_caller_at_its_item() -> None:
    def fetch(i: int) -> int:
        if i == 2:
            raise ValueError("chunk 2 is corrupt")
        return i

    it = prefetched(fetch, range(4), "t")
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(ValueError, match="chunk 2 is corrupt"):
        next(it)


def test_leaving_early_does_not_wait_for_the_read_under_way() -> None:
    """A scan closed while the next read is stuck (a stalled store) returns at once: the generator's
    cleanup would otherwise join the thread, on whatever thread finalizes it."""
    release = threading.Event()

    def fetch(i: int) -> int:
        if i == 1:
            release.wait(30)
        return i

    it = prefetched(fetch, range(3), "t")
    assert next(it) == 0  # item 1 is now in flight, stuck
    began = time.monotonic()
    it.close()
    assert time.monotonic() - began < 5
    release.set()
