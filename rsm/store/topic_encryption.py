"""Each topic's encryption memory: how its copies were last written, kept at the catalog home.

    <catalog home>_rsm/topic-encryption/<topic>-<topicId base64>.json
    {"version": 1, "topic": "...", "topic_id": "...", "key_id": "k2" | null,
     "setting": "<the key that chose it>", "topic_level": true, "updated_ms": ...}

Why a document of its own: a topic's encryption is chosen by settings that can vanish (its overlay, a
LogConfig key), and the copy must be able to tell "this topic was encrypted" after they did
(`rsm.copy.downgrade`). Written by the copy only when the state changes (a topic never encrypted has none),
read through a cache of `topic.overlay.cache.ms`. A document that cannot be parsed is an error naming it,
never "no memory".
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.store.home import HOME_DIR
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

MEMORY_DIR = HOME_DIR + "topic-encryption/"
MEMORY_VERSION = 1

__all__ = ["EncryptionMemory", "EncryptionState", "MEMORY_DIR"]


@dataclass(frozen=True)
class EncryptionState:
    """How a topic's copies were (or are about to be) written: the key id (None: plaintext) and the setting
    that chose it, with whether that setting is the topic's own."""

    key_id: str | None
    setting: str
    topic_level: bool

    def to_doc(self, topic: str, topic_id: uuid.UUID) -> dict[str, object]:
        return {
            "version": MEMORY_VERSION,
            "topic": topic,
            "topic_id": uuid_to_base64(topic_id),
            "key_id": self.key_id,
            "setting": self.setting,
            "topic_level": self.topic_level,
            "updated_ms": int(time.time() * 1000),
        }


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
        return f"{self.home.prefix}{MEMORY_DIR}{topic}-{uuid_to_base64(to_uuid(topic_id))}.json"

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
            state = _parse(raw, where, topic, tid)
        self._remember(tid, state, now)
        return state

    def _remember(self, tid: uuid.UUID, state: EncryptionState | None, now: float) -> None:
        if self.ttl > 0:
            with self._lock:
                self._cache[tid] = (now + self.ttl, state)

    def write(self, topic: str, topic_id: uuid.UUID | str, state: EncryptionState) -> None:
        tid = to_uuid(topic_id)
        body = json.dumps(state.to_doc(topic, tid), indent=2).encode() + b"\n"
        self.store.put(self.home.bucket, self.key(topic, tid), body)
        self._remember(tid, state, self._clock())
        log.info(
            "topic %s (%s) is now tiered %s (chosen by %s)",
            topic, uuid_to_base64(tid), f"under key {state.key_id}" if state.key_id else "in plaintext",
            state.setting,
        )  # fmt: skip


def _parse(raw: bytes, where: str, topic: str, tid: uuid.UUID) -> EncryptionState:
    try:
        doc = json.loads(raw)
        if doc.get("version") != MEMORY_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, this RSM reads version {MEMORY_VERSION}")
        if doc.get("topic") != topic or doc.get("topic_id") != uuid_to_base64(tid):
            raise ValueError(f"it names topic {doc.get('topic')}/{doc.get('topic_id')}")
        key_id = doc["key_id"]
        if key_id is not None and not isinstance(key_id, str):
            raise ValueError("key_id must be a string or null")
        return EncryptionState(key_id, str(doc.get("setting", "")), bool(doc.get("topic_level", False)))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ConfigException(f"topic encryption memory {where} is unreadable: {exc}") from None
