"""The planning pool (`rsm.store.concurrency`): one bounded pool per process, safe to nest and to fork."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest

from rsm.store.concurrency import POOL_THREADS, map_concurrently, shared_pool


def _pool_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("rsm-planning")}


def test_every_call_uses_the_same_bounded_pool() -> None:
    before = threading.active_count()
    for _ in range(50):
        assert map_concurrently(lambda x: x * 2, list(range(40))) == [x * 2 for x in range(40)]
    assert 0 < len(_pool_threads()) <= POOL_THREADS
    assert threading.active_count() <= before + POOL_THREADS  # no call left threads of its own behind
    assert shared_pool() is shared_pool()


def test_calls_nested_in_a_full_pool_finish() -> None:
    """Every worker busy with an outer item that waits on inner items: the callers run what no worker
    started, so the whole call ends (a pool per call would not be needed for that)."""

    def inner(x: int) -> int:
        time.sleep(0.001)
        return x

    def outer(_: int) -> int:
        return sum(map_concurrently(inner, list(range(8))))

    got: list[list[int]] = []
    runner = threading.Thread(
        target=lambda: got.append(map_concurrently(outer, list(range(4 * POOL_THREADS))))
    )
    runner.start()
    runner.join(120)  # a liveness bound: a deadlock never ends
    assert not runner.is_alive(), "nested calls deadlocked the shared pool"
    assert got == [[28] * (4 * POOL_THREADS)]


def test_an_error_is_raised_once_nothing_of_the_call_runs_any_more() -> None:
    lock = threading.Lock()
    running = 0

    def fn(x: int) -> int:
        nonlocal running
        with lock:
            running += 1
        try:
            time.sleep(0.01)
            if x == 3:
                raise ValueError("item 3 failed")
            return x
        finally:
            with lock:
                running -= 1

    with pytest.raises(ValueError, match="item 3 failed"):
        map_concurrently(fn, list(range(64)))
    assert running == 0


def _in_child(out: Any) -> None:
    try:
        out.put(shared_pool().submit(lambda: threading.current_thread().name).result(timeout=30))
    except Exception as exc:  # noqa: BLE001 - the parent asserts on what the child saw
        out.put(f"{type(exc).__name__}: {exc}")


def test_a_forked_child_starts_a_pool_of_its_own() -> None:
    """Spark's Python workers fork from a daemon: the parent's pool threads do not exist in the child."""
    assert shared_pool().submit(lambda: 1).result() == 1  # the parent's pool has its threads
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(out,))
    child.start()
    try:
        answer = out.get(timeout=60)
    finally:
        child.join(60)
    assert str(answer).startswith("rsm-planning"), answer
