"""A topic's encryption memory as a document: how its copies were last written.

    <catalog home>_rsm/topic-encryption/<topic>-<topicId base64>.json
    {"version": 1, "topic": "...", "topic_id": "...", "key_id": "k2" | null,
     "setting": "<the key that chose it>", "topic_level": true, "updated_ms": ...}

Why in the stored format: the copy writes it and `rsm migrate gc` and the tools read it, so its shape
belongs to neither. Reading it through a store, with a cache, is `rsm.store.topic_encryption`'s job; this
module is its name and JSON. A document that cannot be parsed is an error naming it, never "no memory".
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.stored.home import HOME_DIR

MEMORY_DIR = HOME_DIR + "topic-encryption/"
MEMORY_VERSION = 1

__all__ = ["MEMORY_DIR", "MEMORY_VERSION", "EncryptionState", "memory_key"]


def memory_key(home_prefix: str, topic: str, topic_id: uuid.UUID | str) -> str:
    """The key of a topic id's memory under the catalog home's prefix."""
    return f"{home_prefix}{MEMORY_DIR}{topic}-{uuid_to_base64(to_uuid(topic_id))}.json"


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

    def to_bytes(self, topic: str, topic_id: uuid.UUID) -> bytes:
        return json.dumps(self.to_doc(topic, topic_id), indent=2).encode() + b"\n"

    @classmethod
    def from_bytes(cls, raw: bytes, where: str, topic: str, tid: uuid.UUID) -> EncryptionState:
        """Parse a stored memory of `topic`/`tid`; ConfigException naming `where` when it is unreadable."""
        try:
            doc = json.loads(raw)
            if doc.get("version") != MEMORY_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, this RSM reads version {MEMORY_VERSION}")
            if doc.get("topic") != topic or doc.get("topic_id") != uuid_to_base64(tid):
                raise ValueError(f"it names topic {doc.get('topic')}/{doc.get('topic_id')}")
            key_id = doc["key_id"]
            if key_id is not None and not isinstance(key_id, str):
                raise ValueError("key_id must be a string or null")
            return cls(key_id, str(doc.get("setting", "")), bool(doc.get("topic_level", False)))
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise ConfigException(f"topic encryption memory {where} is unreadable: {exc}") from None
