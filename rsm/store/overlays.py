"""Per-topic `unchecked.*` settings kept in the store, for brokers that cannot hold them yet.

The RSM's topic configs proposal lets a topic carry `unchecked.rsm.*` keys (bucket, prefix, encryption, compression, chunk size,
record validation) and has the broker pass the topic's LogConfig to every RSM call. Kafka 4.4 does
neither: it refuses unknown topic configs (`INVALID_CONFIG: Unknown topic config name: ...`). Until it
can, those keys live in an overlay document per topic, stored next to the data:

    <broker bucket>/<broker prefix>_rsm/topic-configs/<topic>-<topicId base64>.json

(the document, its JSON and its checks: `rsm.stored.overlay`; this module reads and writes it, and caches it).
It lives with the store because all it does is I/O through an `ObjectStore`: the configuration
(`rsm.config.settings`) only merges the keys it is handed, and so needs no store.

Why the store: every broker, the Spark reader and the migration tool read the same document (no per-broker
divergence, no restart). Why the topic id: a topic deleted and recreated under the same name gets a new
id, so it does not inherit its predecessor's bucket or encryption settings (KIP's rejected alternative
names exactly this pitfall). Writes replace the whole object in one PUT (atomic on S3 and on the file
store, which renames a finished temporary file). The RSM caches each topic's overlay for
`topic.overlay.cache.ms` (5 s by default), so a change applies to the next copies within that time.

Only known topic-level `unchecked.*` keys are accepted, parsed with the RSM's own parsers (a bad value is
refused when written, not when the next copy fails), and nothing that looks like a secret is ever stored:
overlays are readable by whoever can list the bucket.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.overlay import (
    OVERLAY_DIR,
    OVERLAY_SUFFIX,
    TopicOverlay,
    overlay_key,
    validate_overlay_configs,
)

log = logging.getLogger(__name__)

__all__ = ["OverlayCache", "TopicOverlayStore", "named_buckets"]


def named_buckets(default: Location, overlays: Iterable[TopicOverlay], *more: str) -> list[str]:
    """The buckets the configuration and the overlays name (and `more`), each once, the default first:
    where a scan for segments the location record lacks looks (`rsm.store.locations`)."""
    return list(dict.fromkeys([default.bucket, *(o.location(default).bucket for o in overlays), *more]))


class TopicOverlayStore:
    """Reads and writes topic overlays in the broker-default bucket and prefix of an ObjectStore."""

    def __init__(self, store: ObjectStore, bucket: str, prefix: str = "") -> None:
        self.store = store
        self.bucket = bucket
        self.prefix = prefix

    def key(self, topic: str, topic_id: uuid.UUID | str) -> str:
        return overlay_key(self.prefix, topic, topic_id)

    def describe(self, topic: str, topic_id: uuid.UUID | str) -> str:
        """Where a topic's overlay lives, for messages (`s3://bucket/key` or `file:bucket/key`)."""
        return self.store.describe(self.bucket, self.key(topic, topic_id))

    def read(self, topic: str, topic_id: uuid.UUID | str) -> TopicOverlay | None:
        """The topic's overlay, or None when it has none. A stored document for another id is refused."""
        key = self.key(topic, topic_id)
        where = self.store.describe(self.bucket, key)
        try:
            raw = self.store.get(self.bucket, key)
        except ObjectNotFound:
            return None
        overlay = TopicOverlay.from_bytes(raw, where)
        if overlay.topic != topic or overlay.topic_id != to_uuid(topic_id):
            raise ConfigException(
                f"topic overlay {where} names topic {overlay.topic}/{overlay.topic_id_base64}, "
                f"not {topic}/{uuid_to_base64(to_uuid(topic_id))}"
            )
        return overlay

    def write(
        self, topic: str, topic_id: uuid.UUID | str, configs: Mapping[str, str], *, now_ms: int | None = None
    ) -> TopicOverlay | None:
        """Replace the topic's overlay with `configs` (validated); an empty mapping deletes it."""
        checked = validate_overlay_configs(configs)
        if not checked:
            self.delete(topic, topic_id)
            return None
        overlay = TopicOverlay(
            topic, to_uuid(topic_id), checked, int(time.time() * 1000) if now_ms is None else now_ms
        )
        self.store.put(self.bucket, self.key(topic, topic_id), overlay.to_bytes())
        log.info("topic overlay of %s/%s set: %s", topic, overlay.topic_id_base64, sorted(checked))
        return overlay

    def delete(self, topic: str, topic_id: uuid.UUID | str) -> bool:
        """Remove the topic's overlay; a missing one is fine."""
        return self.store.delete(self.bucket, self.key(topic, topic_id))

    def for_topic(self, topic: str) -> list[TopicOverlay]:
        """The overlays stored under a topic name, for every id it had (tools that know only names)."""
        return [o for o in self.list(f"{topic}-") if o.topic == topic]

    def list(self, topic_prefix: str = "") -> list[TopicOverlay]:
        """Every stored overlay whose topic name starts with `topic_prefix` (documents that fail to parse are
        logged and skipped). On S3 only the keys under that prefix are listed, not every overlay's."""
        out: list[TopicOverlay] = []
        listed = self.store.list_from(self.bucket, self.prefix + OVERLAY_DIR + topic_prefix)
        for key in (o.key for o in listed):
            if not key.endswith(OVERLAY_SUFFIX):
                continue
            where = self.store.describe(self.bucket, key)
            try:
                out.append(TopicOverlay.from_bytes(self.store.get(self.bucket, key), where))
            except (ConfigException, ObjectNotFound) as exc:
                log.warning("skipping topic overlay %s: %s", where, exc)
        return sorted(out, key=lambda o: (o.topic, o.topic_id_base64))


class OverlayCache:
    """Each topic's overlay configs, re-read from the store at most every `ttl_ms` (0 = every call).

    Absent overlays are cached too (most topics have none), so a copy costs at most one small GET per
    topic per TTL. A read failure is not cached: the caller fails its operation and Kafka retries.

    `adopt(topic, topic_id)`, when given, is asked for a topic id without an overlay: it may adopt one (a
    pending overlay written before the topic existed, `rsm.policy.pending`) and return it. When it does not,
    the id's overlay is read once more: another broker may have adopted it meanwhile.
    """

    def __init__(
        self,
        overlays: TopicOverlayStore,
        ttl_ms: int = 5000,
        clock: Callable[[], float] = time.monotonic,
        adopt: Callable[[str, uuid.UUID], TopicOverlay | None] | None = None,
    ) -> None:
        self.overlays = overlays
        self.ttl = ttl_ms / 1000.0
        self._clock = clock
        self._adopt = adopt
        self._entries: dict[tuple[str, uuid.UUID], tuple[float, Mapping[str, str]]] = {}
        self._lock = threading.Lock()

    def configs(self, topic: str, topic_id: uuid.UUID | str) -> Mapping[str, str]:
        """The topic's overlay keys (empty when it has none)."""
        tid = to_uuid(topic_id)
        now = self._clock()
        with self._lock:
            hit = self._entries.get((topic, tid))
        if hit is not None and now < hit[0]:
            return hit[1]
        overlay = self.overlays.read(topic, tid)
        if overlay is None and self._adopt is not None:
            overlay = self._adopt(topic, tid) or self.overlays.read(topic, tid)
        configs: Mapping[str, str] = overlay.configs if overlay is not None else MappingProxyType({})
        if self.ttl > 0:
            with self._lock:
                self._entries[(topic, tid)] = (now + self.ttl, configs)
        return configs

    def invalidate(self, topic: str | None = None, topic_id: uuid.UUID | str | None = None) -> None:
        """Forget one topic's cached overlay (or all)."""
        with self._lock:
            if topic is None or topic_id is None:
                self._entries.clear()
            else:
                self._entries.pop((topic, to_uuid(topic_id)), None)
