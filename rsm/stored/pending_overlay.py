"""A pending overlay as a document: a topic's storage settings written before the topic exists.

    <prefix>_rsm/pending-topic-configs/<topic>.json
    {"version": 1, "topic": "payments", "configs": {"unchecked.rsm.encryption.enabled": "true", ...},
     "created_ms": ..., "expires_ms": ...}

Why in the stored format: `rsm topic-config --pending` writes it, and every broker's RSM and topic policy
reads it (and adopts it as the topic id's overlay, `rsm.stored.overlay`), so its shape belongs to none of
them. When it is adopted, and by whom, is `rsm.policy.pending`'s story; this module is its key, its JSON and
its checks (the same as an overlay's: only known `unchecked.*` keys, nothing that looks like a secret).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from rsm.api.errors import ConfigException
from rsm.api.names import topic_problem
from rsm.stored.overlay import MAX_OVERLAY_BYTES, validate_overlay_configs

PENDING_VERSION = 1
PENDING_DIR = "_rsm/pending-topic-configs/"
PENDING_SUFFIX = ".json"
PENDING_TTL_MS = 7 * 24 * 3600 * 1000

__all__ = [
    "PENDING_DIR",
    "PENDING_SUFFIX",
    "PENDING_TTL_MS",
    "PENDING_VERSION",
    "PendingOverlay",
    "pending_key",
]


def pending_key(prefix: str, topic: str) -> str:
    """The object key of a topic name's pending overlay under the broker-default prefix."""
    problem = topic_problem(topic)
    if problem:  # the name becomes part of the key: only names Kafka would accept
        raise ConfigException(f"invalid topic name {topic!r}: it {problem}")
    return f"{prefix}{PENDING_DIR}{topic}{PENDING_SUFFIX}"


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class PendingOverlay:
    """Settings for a topic not created yet, bound by name."""

    topic: str
    configs: Mapping[str, str] = field(default_factory=dict)
    created_ms: int = 0
    expires_ms: int = 0
    version: int = PENDING_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))

    def expired(self, now_ms: int | None = None) -> bool:
        return (_now_ms() if now_ms is None else now_ms) >= self.expires_ms

    def to_bytes(self) -> bytes:
        doc = {
            "version": self.version,
            "topic": self.topic,
            "configs": dict(sorted(self.configs.items())),
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
        }
        return json.dumps(doc, indent=2).encode() + b"\n"

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> PendingOverlay:
        if len(raw) > MAX_OVERLAY_BYTES:
            raise ConfigException(f"pending overlay {where} is {len(raw)} bytes, over {MAX_OVERLAY_BYTES}")
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigException(f"pending overlay {where} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("version") != PENDING_VERSION:
            raise ConfigException(f"pending overlay {where} is not a version {PENDING_VERSION} document")
        topic, configs = doc.get("topic"), doc.get("configs")
        if not isinstance(topic, str) or topic_problem(topic):
            raise ConfigException(f"pending overlay {where} names no valid topic")
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise ConfigException(f"pending overlay {where}: configs must be an object of strings")
        try:
            checked = validate_overlay_configs(configs)
        except ConfigException as exc:
            raise ConfigException(f"pending overlay {where}: {exc}") from None
        created, expires = doc.get("created_ms"), doc.get("expires_ms")
        if not isinstance(created, int) or not isinstance(expires, int):
            raise ConfigException(f"pending overlay {where} lacks created_ms or expires_ms")
        return cls(topic, checked, created, expires)
