"""Each topic's encryption memory: how its copies were last written, kept at the catalog home.

    <catalog home>_rsm/topic-encryption/<topic>-<topicId base64>.json

(the document, its JSON and its checks: `rsm.stored.topic_encryption`).

Why a document of its own: a topic's encryption is chosen by settings that can vanish (its overlay, a
LogConfig key), and the copy must be able to tell "this topic was encrypted" after they did
(`rsm.copy.downgrade`). Written by the copy only when the state changes (a topic never encrypted has none),
read through a cache of `topic.overlay.cache.ms`. A document that cannot be parsed is an error naming it,
never "no memory".
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.topic_encryption import EncryptionState, memory_key

log = logging.getLogger(__name__)

__all__ = ["EncryptionMemory"]


class EncryptionMemory:
    """Each topic's encryption memory at the catalog home, read through a cache (`ttl_ms`)."""

    def __init__(
        self,
        store: ObjectStore,
        home: Location,
        *,
        ttl_ms: int = 5000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.home = home
        self.ttl = ttl_ms / 1000.0
        self._clock = clock
        self._cache: dict[uuid.UUID, tuple[float, EncryptionState | None]] = {}
        self._lock = threading.Lock()

    def key(self, topic: str, topic_id: uuid.UUID | str) -> str:
        return memory_key(self.home.prefix, topic, topic_id)

    def describe(self, topic: str, topic_id: uuid.UUID | str) -> str:
        return self.store.describe(self.home.bucket, self.key(topic, topic_id))

    def read(self, topic: str, topic_id: uuid.UUID | str) -> EncryptionState | None:
        """The topic's memory, None when it has none; ConfigException naming the object when it is bad."""
        tid = to_uuid(topic_id)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(tid)
        if hit is not None and now < hit[0]:
            return hit[1]
        where = self.describe(topic, tid)
        try:
            raw = self.store.get(self.home.bucket, self.key(topic, tid))
        except (ObjectNotFound, FileNotFoundError):
            state = None
        else:
            state = EncryptionState.from_bytes(raw, where, topic, tid)
        self._remember(tid, state, now)
        return state

    def _remember(self, tid: uuid.UUID, state: EncryptionState | None, now: float) -> None:
        if self.ttl > 0:
            with self._lock:
                self._cache[tid] = (now + self.ttl, state)

    def write(self, topic: str, topic_id: uuid.UUID | str, state: EncryptionState) -> None:
        tid = to_uuid(topic_id)
        self.store.put(self.home.bucket, self.key(topic, tid), state.to_bytes(topic, tid))
        self._remember(tid, state, self._clock())
        log.info(
            "topic %s (%s) is now tiered %s (chosen by %s)",
            topic, uuid_to_base64(tid), f"under key {state.key_id}" if state.key_id else "in plaintext",
            state.setting,
        )  # fmt: skip
