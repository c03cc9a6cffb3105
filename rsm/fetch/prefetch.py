"""Reading in order with the next read in flight, for the sequential scans (the Spark reader, `verify`).

A scan of a segment spends half its time waiting on the store unless the next chunk is already on its way:
one background thread fetches item `i + 1` while the caller works on item `i`.

Why a module of its own: left early (a refused batch, a `limit`, a cancelled task, an error), the
generator must not wait for the read under way. A `with ThreadPoolExecutor` block would: its exit joins
the thread, and when the generator is finalized by the garbage collector that join runs on whichever
thread happened to allocate, possibly one holding something the in-flight read needs. A stalled store
would also hold the caller past its own error. So the pool is shut down without waiting; the read in
flight finishes on its own and its result is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def prefetched(fn: Callable[[T], R], items: Iterable[T], thread_name: str) -> Iterator[R]:
    """``fn(item)`` for each item in order, computed one item ahead on a background thread."""
    it = iter(items)
    try:
        first = next(it)
    except StopIteration:
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix=thread_name)
    try:
        pending = pool.submit(fn, first)
        for item in it:
            result = pending.result()
            pending = pool.submit(fn, item)
            yield result
        yield pending.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
