"""Pending overlays: a topic's storage settings written before the topic exists, adopted by the topic
created under that name before its first segment is tiered.

Why: today's brokers (Kafka 4.4) refuse `unchecked.rsm.*` topic configs, so a topic's bucket, prefix and
encryption live in an overlay keyed by topic id (`rsm.store.overlays`), and a topic id exists only once the topic
does. A topic that the policy requires to be encrypted (`policy.encryption.required.topics`) could then
never be created: the create policy sees no encryption setting, and there is nothing to attach one to.
So an operator writes the settings under the name first:

    rsm topic-config --config server.properties set --topic payments --pending \\
        unchecked.rsm.encryption.enabled=true unchecked.rsm.encryption.key.id=k2

which stores, under the broker's default bucket and prefix (a format other tools may read):

    <prefix>_rsm/pending-topic-configs/<topic>.json

(the document, its JSON and its checks: `rsm.stored.pending_overlay`), and then:

1. The create policy (the broker's `CreateTopicPolicy`, `rsm topic-config --pending`'s own check) judges a
   new topic with its pending overlay applied, so the creation is accepted.
2. The first time an RSM reads the overlay of a topic id that has none (before the topic's first copy: a
   copy resolves its settings before it uploads anything), it adopts the pending overlay of that name:
   writes it as the id's overlay, then deletes the pending one. Every broker, the reader and the tools
   then see an ordinary overlay.
3. A broker that found neither reads the id's overlay once more, so one that lost the race with another
   broker's adoption (the pending overlay deleted after the id's overlay was written) still finds it.

Bound by name, adopted under the new topic id, and only by a topic id that has no overlay of its own and
has tiered nothing yet (no location record, `rsm.store.locations`): an existing topic of that name, which
has tiered segments, never picks up settings meant for its successor, and a later re-creation of the name
starts clean because adoption consumes the pending overlay. It expires after `PENDING_TTL_MS` (7 days;
writing it again renews it) so a forgotten one is not adopted months later by an unrelated topic.
The RSM also checks each topic's state against the policy before copying (`rsm.policy.enforce`): even a
topic created without its pending overlay (on a broker without the policy classes) is never tiered
unencrypted when the policy requires encryption; its copies fail, naming the fix, until it is set.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping

from rsm.api.errors import ConfigException
from rsm.api.metadata import to_uuid, uuid_to_base64
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.store.overlays import TopicOverlayStore
from rsm.stored.overlay import TopicOverlay, validate_overlay_configs
from rsm.stored.pending_overlay import (
    PENDING_DIR,
    PENDING_SUFFIX,
    PENDING_TTL_MS,
    PendingOverlay,
    pending_key,
)

log = logging.getLogger(__name__)

__all__ = ["PendingAdopter", "PendingOverlayStore"]


def _now_ms() -> int:
    return int(time.time() * 1000)


class PendingOverlayStore:
    """Pending overlays in the broker-default bucket and prefix of an ObjectStore."""

    def __init__(self, store: ObjectStore, bucket: str, prefix: str = "") -> None:
        self.store = store
        self.bucket = bucket
        self.prefix = prefix

    def key(self, topic: str) -> str:
        return pending_key(self.prefix, topic)

    def describe(self, topic: str) -> str:
        return self.store.describe(self.bucket, self.key(topic))

    def read(self, topic: str, *, include_expired: bool = False) -> PendingOverlay | None:
        """The topic's pending overlay; None when it has none (or only an expired one, unless asked)."""
        key = self.key(topic)
        try:
            raw = self.store.get(self.bucket, key)
        except ObjectNotFound:
            return None
        pending = PendingOverlay.from_bytes(raw, self.store.describe(self.bucket, key))
        if pending.topic != topic:
            raise ConfigException(f"pending overlay {self.describe(topic)} names topic {pending.topic!r}")
        if pending.expired() and not include_expired:
            log.warning(
                "pending overlay %s expired at %d ms: ignored (write it again to renew it)",
                self.describe(topic),
                pending.expires_ms,
            )
            return None
        return pending

    def write(
        self,
        topic: str,
        configs: Mapping[str, str],
        *,
        now_ms: int | None = None,
        ttl_ms: int = PENDING_TTL_MS,
    ) -> PendingOverlay | None:
        """Replace the topic's pending overlay (validated); an empty mapping deletes it."""
        checked = validate_overlay_configs(configs)
        if not checked:
            self.delete(topic)
            return None
        now = _now_ms() if now_ms is None else now_ms
        pending = PendingOverlay(topic, checked, now, now + ttl_ms)
        self.store.put(self.bucket, self.key(topic), pending.to_bytes())
        log.info("pending overlay of topic %s set: %s", topic, sorted(checked))
        return pending

    def delete(self, topic: str) -> bool:
        return self.store.delete(self.bucket, self.key(topic))

    def list(self) -> list[PendingOverlay]:
        """Every pending overlay, expired ones included (unreadable documents are logged and skipped)."""
        out: list[PendingOverlay] = []
        for key in self.store.list(self.bucket, self.prefix + PENDING_DIR):
            if not key.endswith(PENDING_SUFFIX):
                continue
            where = self.store.describe(self.bucket, key)
            try:
                out.append(PendingOverlay.from_bytes(self.store.get(self.bucket, key), where))
            except (ConfigException, ObjectNotFound) as exc:
                log.warning("skipping pending overlay %s: %s", where, exc)
        return sorted(out, key=lambda p: p.topic)


class PendingAdopter:
    """Adopts a topic name's pending overlay for a topic id that has none (step 2 of the module docstring).

    Called by `rsm.store.overlays.OverlayCache` when a topic id has no overlay; returns the adopted overlay or None.
    """

    def __init__(
        self, overlays: TopicOverlayStore, pending: PendingOverlayStore, registry: LocationRegistry | None
    ) -> None:
        self.overlays = overlays
        self.pending = pending
        self.registry = registry

    def __call__(self, topic: str, topic_id: uuid.UUID | str) -> TopicOverlay | None:
        found = self.pending.read(topic)
        if found is None:
            return None
        tid = to_uuid(topic_id)
        if self.registry is not None:
            try:
                tiered_already = bool(self.registry.locations(topic, tid))
            except (ObjectNotFound, FileNotFoundError):
                tiered_already = False  # no default bucket: no location records at all
            if tiered_already:
                log.warning(
                    "pending overlay %s not adopted by topic %s (%s): that topic id has tiered segments "
                    "already, so the settings are meant for a topic created later under this name",
                    self.pending.describe(topic),
                    topic,
                    uuid_to_base64(tid),
                )
                return None
        overlay = self.overlays.write(topic, tid, found.configs)
        self.pending.delete(topic)
        log.info(
            "topic %s (%s) adopted its pending overlay %s: %s",
            topic,
            uuid_to_base64(tid),
            self.pending.describe(topic),
            sorted(found.configs),
        )
        return overlay
