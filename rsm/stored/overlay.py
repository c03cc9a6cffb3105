"""A topic's overlay as a document: its `unchecked.*` settings, kept in the store under its topic id.

    <broker bucket>/<broker prefix>_rsm/topic-configs/<topic>-<topicId base64>.json
    {"version": 1, "topic": "...", "topic_id": "...", "configs": {"unchecked.rsm.bucket": "..."},
     "updated_ms": ...}

Why in the stored format: every broker, the Spark reader, `rsm topic-config` and the migration tool read the
same document, so its shape belongs to none of them. Why overlays exist at all, and reading them through a
store with a cache, is `rsm.store.overlays`'s story; this module is the document: its key, its JSON and its
checks. Only known topic-level `unchecked.*` keys are accepted, parsed with the RSM's own parsers (a bad
value is refused when written, not when the next copy fails), and nothing that looks like a secret is ever
stored: overlays are readable by whoever can list the bucket.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.api.names import topic_problem
from rsm.config.redact import is_sensitive_key, shown
from rsm.config.settings import TOPIC_KEYS, TOPIC_PREFIX, parse_topic_config
from rsm.stored.layout import Location

OVERLAY_VERSION = 1
OVERLAY_DIR = "_rsm/topic-configs/"
OVERLAY_SUFFIX = ".json"
MAX_OVERLAY_BYTES = 64 * 1024

__all__ = [
    "MAX_OVERLAY_BYTES",
    "OVERLAY_DIR",
    "OVERLAY_SUFFIX",
    "OVERLAY_VERSION",
    "TopicOverlay",
    "known_keys",
    "overlay_key",
    "validate_overlay_configs",
]


def overlay_key(prefix: str, topic: str, topic_id: uuid.UUID | str) -> str:
    """The object key of a topic's overlay under the broker-default prefix."""
    problem = topic_problem(topic)
    if problem:  # the name becomes part of the overlay's key: only names Kafka would accept
        raise ConfigException(f"invalid topic name {topic!r}: it {problem}")
    return f"{prefix}{OVERLAY_DIR}{topic}-{uuid_to_base64(to_uuid(topic_id))}{OVERLAY_SUFFIX}"


def validate_overlay_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Check overlay keys and values; returns them with values stripped.

    Raises ConfigException naming the first offending key: not an `unchecked.*` key, a key that looks
    sensitive, an unknown key, or a value the RSM's parser refuses. Values of refused keys are never
    echoed when the key looks sensitive.
    """
    out: dict[str, str] = {}
    for key, value in configs.items():
        if not isinstance(key, str) or not key.startswith("unchecked."):
            raise ConfigException(f"overlay key {shown(key)} is not an unchecked.* topic config")
        # a key that names a credential is refused: nothing secret goes into a bucket-readable document
        if is_sensitive_key(key):
            raise ConfigException(
                f"overlay key {key!r} looks sensitive: secrets are never stored in the overlay "
                "(keep them in the broker's rsm.config.* or the keyring)"
            )
        parse_topic_config(key, value)
        out[key] = value.strip()
    return out


@dataclass(frozen=True)
class TopicOverlay:
    """One topic's overlay document."""

    topic: str
    topic_id: uuid.UUID
    configs: Mapping[str, str] = field(default_factory=dict)
    updated_ms: int = 0
    version: int = OVERLAY_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", to_uuid(self.topic_id))
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))

    @property
    def topic_id_base64(self) -> str:
        return uuid_to_base64(self.topic_id)

    def location(self, default: Location) -> Location:
        """Where this overlay sends the topic's new copies (its bucket and prefix over the default)."""
        bucket = self.configs.get(TOPIC_PREFIX + "bucket", default.bucket)
        prefix = self.configs.get(TOPIC_PREFIX + "prefix", default.prefix)
        return Location(bucket.strip(), prefix.strip())

    def to_bytes(self) -> bytes:
        doc = {
            "version": self.version,
            "topic": self.topic,
            "topic_id": self.topic_id_base64,
            "configs": dict(sorted(self.configs.items())),
            "updated_ms": self.updated_ms,
        }
        return json.dumps(doc, indent=2, sort_keys=False).encode() + b"\n"

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> TopicOverlay:
        """Parse and check a stored overlay; ConfigException names `where` (the object) on any defect."""
        if len(raw) > MAX_OVERLAY_BYTES:
            raise ConfigException(f"topic overlay {where} is {len(raw)} bytes, over {MAX_OVERLAY_BYTES}")
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigException(f"topic overlay {where} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigException(f"topic overlay {where} must be a JSON object")
        version = doc.get("version")
        if version != OVERLAY_VERSION:
            raise ConfigException(f"topic overlay {where} has version {version!r}; this RSM reads version 1")
        topic, topic_id, configs = doc.get("topic"), doc.get("topic_id"), doc.get("configs")
        if not isinstance(topic, str) or not isinstance(topic_id, str):
            raise ConfigException(f"topic overlay {where} lacks a topic name or topic id")
        problem = topic_problem(topic)
        if problem:
            raise ConfigException(f"topic overlay {where} names topic {topic!r}: it {problem}")
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise ConfigException(f"topic overlay {where}: configs must be an object of strings")
        try:
            tid = to_uuid(topic_id)
        except ValueError as exc:
            raise ConfigException(f"topic overlay {where}: {exc}") from None
        try:
            checked = validate_overlay_configs(configs)
        except ConfigException as exc:
            raise ConfigException(f"topic overlay {where}: {exc}") from None
        updated = doc.get("updated_ms", 0)
        return cls(topic, tid, checked, int(updated) if isinstance(updated, int) else 0, version)


def known_keys() -> tuple[str, ...]:
    """The keys an overlay may hold."""
    return TOPIC_KEYS
