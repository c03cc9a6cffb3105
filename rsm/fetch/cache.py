"""Caches: a byte-bounded, thread-safe LRU for manifests and decoded chunks, and a per-object memo.

The LRU is bounded by the bytes it holds (not by entry count) because chunks are megabytes and manifests
kilobytes: an entry-count bound would let the chunk cache take gigabytes. An entry larger than the whole
bound is not cached at all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    """A value computed once per object, found by the object's identity (no hashing of its fields).

    Each entry holds its object, so no other object can take its id while the entry lives. The memo is
    cleared whole when ``max_entries`` are held: a cheap bound for a working set that mostly fits.
    """

    __slots__ = ("max_entries", "_entries")

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: dict[int, tuple[K, V]] = {}

    def get(self, obj: K) -> V | None:
        hit = self._entries.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: K, value: V) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[id(obj)] = (obj, value)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class ByteLRU(Generic[V]):
    def __init__(self, max_bytes: int, sizeof: Callable[[V], int] = len) -> None:  # type: ignore[assignment]
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: Hashable, value: V) -> None:
        size = self._sizeof(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    def pop(self, key: Hashable) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

    def discard_where(self, predicate: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for key in [k for k in self._entries if predicate(k)]:
                self._bytes -= self._entries.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
