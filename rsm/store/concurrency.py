"""One bounded thread pool for the store requests a process's planning makes at once.

Why: planners (the Spark reader's driver, `rsm store`, `rsm migrate`) make many small requests that wait
on the store, not the CPU (listings, manifest and record reads), so they run them at once. A pool built
per call paid for starting and joining its threads on every call (dozens per plan, one per stream
trigger and more) and a session's concurrent queries each built their own. Here one pool of at most
`POOL_THREADS` threads serves every caller in the process, started on first use and reused: its size is
bounded whatever the number of queries, and its threads are never left behind by a call.

Nesting is safe: a task may itself call `map_concurrently` (a partition's first offset reads manifests
at once, the partitions being resolved at once). The caller never waits on a task the pool has not
started: it runs such a task itself (`Future.cancel` succeeds only before a task starts), so a full pool
slows a call down but never deadlocks it.

Forks: Spark's Python workers fork from a daemon process, and a pool's threads do not survive a fork; the
child drops its copy of the pool (`os.register_at_fork`) and starts its own on first use.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

POOL_THREADS = 16

T = TypeVar("T")
R = TypeVar("R")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def shared_pool() -> ThreadPoolExecutor:
    """The process's planning pool (started on first use, at most `POOL_THREADS` threads)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="rsm-planning")
        return _pool


def _forget_after_fork() -> None:
    """In a forked child: the parent's pool has no threads here, so a fresh one is started when needed."""
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def map_concurrently(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`fn` over `items`, in order, on the shared pool; a single item runs on the caller's thread.

    The caller runs any item the pool has not started by the time its result is wanted (module
    docstring). The first exception is raised once the items already running have ended; items not
    started yet are not run."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    pool = shared_pool()
    # each task in a copy of the caller's context (its store budget, `rsm.catalog.segments`' damage log)
    futures: list[Future[R]] = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
    out: list[R] = []
    try:
        for x, future in zip(items, futures, strict=True):
            out.append(fn(x) if future.cancel() else future.result())
    except BaseException:
        for future in futures:
            future.cancel()
        for future in futures:
            if not future.cancelled():
                future.exception()  # wait: nothing of this call goes on behind its caller's back
        raise
    return out
