"""A cross-backend move carries the topic's settings documents: its overlay and its pending overlay.

A topic's `unchecked.rsm.*` settings live in an overlay in the store (`rsm.store.overlays`): its bucket and
prefix, its encryption and key id, its compression, chunk size and record validation. Brokers switched to
the destination store read overlays from there only, so a move that left the overlay behind would have
them tier the topic's next segments with the destination's defaults: unencrypted, say, a topic the source
encrypted under its own key. So the move copies the source's overlay into the destination, before any
segment; the moved segments then go where the topic's new copies will (unless `--to-bucket` /
`--to-prefix` name another place).

The pending overlay (`rsm.policy.pending`: settings written under the topic's name for a topic created
later under it, a successor) is carried the same way and for the same reason: a topic re-created once the
brokers use the destination adopts it there, not the destination's defaults. It keeps its creation and
expiry times: carrying it does not renew it.

Both are written into the destination's catalog home (`rsm.store.home`: `catalog.bucket` /
`catalog.prefix`), where its brokers look for them, never into its data bucket. A document already in the
destination is the operator's choice for the new store and stays; keys in which the two differ are
reported. The copy is refused, before anything is written, when the destination could not honour it: a
bucket it names that the destination store lacks (named with the store's endpoint), a key id not in the
destination's keyring.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from rsm.api.errors import ConfigException
from rsm.catalog import TopicCatalog
from rsm.config.keyring import Keyring
from rsm.config.settings import TOPIC_PREFIX
from rsm.migrate.context import MigrateError
from rsm.policy.pending import PendingOverlayStore
from rsm.store.objects import ObjectStore

KEY_ID = TOPIC_PREFIX + "encryption.key.id"
BUCKET = TOPIC_PREFIX + "bucket"
OVERLAY = "topic overlay"
PENDING = "pending overlay"


class OverlayAction(StrEnum):
    """What the move does with the topic's overlay (or pending overlay)."""

    NONE = "none"  # the source has none (the destination's, if any, applies)
    COPY = "copy"  # the destination has none: the source's is copied there
    SAME = "same"  # the destination already holds the same settings
    KEPT = "kept"  # the destination holds other settings: they stay (see `differs`)


@dataclass(frozen=True)
class OverlayCarry:
    """The decision for one document (a topic id's overlay, a name's pending overlay), made before
    anything is written."""

    action: OverlayAction
    configs: dict[str, str] = field(default_factory=dict)  # what the destination will hold
    differs: tuple[str, ...] = ()  # keys the source's and the destination's documents disagree on
    kind: str = OVERLAY
    created_ms: int = 0  # a pending overlay's times, kept as the source has them
    expires_ms: int = 0

    def describe(self, topic: str, dry_run: bool = False) -> str | None:
        """One line for the operator, or None when there is nothing to say."""
        if self.action is OverlayAction.COPY:
            verb = "would be" if dry_run else "was"
            return f"the {self.kind} of {topic} {verb} copied to the destination: {', '.join(sorted(self.configs))}"
        if self.action is OverlayAction.KEPT:
            return (
                f"the destination's own {self.kind} of {topic} stays; it differs from the source's in "
                f"{', '.join(self.differs)}"
            )
        return None


def _decide(
    wanted: Mapping[str, str] | None,
    held: Mapping[str, str] | None,
    where: str,
    kind: str,
    store: ObjectStore,
    keyring: Keyring | None,
) -> OverlayCarry:
    """The carry of one document: the source's (`wanted`) against the destination's (`held`); MigrateError
    when the destination could not honour the source's."""
    if wanted is None:  # the destination's own document, if any, still applies
        return OverlayCarry(OverlayAction.NONE, dict(held or {}), kind=kind)
    wanted = dict(wanted)
    if held is not None:
        differs = tuple(sorted(k for k in wanted.keys() | held.keys() if wanted.get(k) != held.get(k)))
        return OverlayCarry(OverlayAction.KEPT if differs else OverlayAction.SAME, dict(held), differs, kind)
    bucket = wanted.get(BUCKET)
    if bucket is not None and store.bucket_exists(bucket.strip()) is False:
        raise MigrateError(
            f"the {kind} {where} names bucket {bucket.strip()!r} ({BUCKET}), which does not exist in the "
            f"destination store ({store.backend.value} at {store.where}): create it there, or give the topic "
            f"a{'n' if kind == OVERLAY else ''} {kind} in the destination first (rsm topic-config)"
        )
    key_id = wanted.get(KEY_ID)
    if key_id is not None and (keyring is None or key_id.strip() not in keyring):
        raise MigrateError(
            f"the {kind} {where} names key id {key_id!r} ({KEY_ID}), which is not in the destination's "
            "keyring (encryption.keyring.path in --config): the brokers tiering the topic there need it"
        )
    return OverlayCarry(OverlayAction.COPY, wanted, kind=kind)


def plan_overlay(
    source: TopicCatalog, destination: TopicCatalog, topic: str, topic_id: uuid.UUID, keyring: Keyring | None
) -> OverlayCarry:
    """Decide what happens to the topic's overlay (module docstring); MigrateError when the destination
    cannot take the source's."""
    try:
        theirs = source.overlays.read(topic, topic_id)
        ours = destination.overlays.read(topic, topic_id)
    except ConfigException as exc:
        raise MigrateError(str(exc)) from None
    return _decide(
        None if theirs is None else theirs.configs,
        None if ours is None else ours.configs,
        source.overlays.describe(topic, topic_id),
        OVERLAY,
        destination.store,
        keyring,
    )


def apply_overlay(destination: TopicCatalog, topic: str, topic_id: uuid.UUID, carry: OverlayCarry) -> None:
    """Write the source's overlay into the destination (a COPY decision; anything else writes nothing),
    unless one appeared there since the plan (`rsm topic-config` run meanwhile: the operator's wins).
    Idempotent: a resumed move finds it there and decides SAME."""
    if carry.action is OverlayAction.COPY and destination.overlays.read(topic, topic_id) is None:
        destination.overlays.write(topic, topic_id, carry.configs)


def pending_store(catalog: TopicCatalog) -> PendingOverlayStore:
    """A store's pending overlays: at its catalog home, beside its overlays."""
    return PendingOverlayStore(catalog.store, catalog.home.bucket, catalog.home.prefix)


def plan_pending(
    source: TopicCatalog, destination: TopicCatalog, topic: str, keyring: Keyring | None
) -> OverlayCarry:
    """Decide what happens to the pending overlay of the topic's name (module docstring); an expired one
    in the source is not carried (nothing would adopt it). MigrateError when the destination cannot take it."""
    theirs_store, ours_store = pending_store(source), pending_store(destination)
    try:
        theirs = theirs_store.read(topic)
        ours = ours_store.read(topic)
    except ConfigException as exc:
        raise MigrateError(str(exc)) from None
    carry = _decide(
        None if theirs is None else theirs.configs,
        None if ours is None else ours.configs,
        theirs_store.describe(topic),
        PENDING,
        destination.store,
        keyring,
    )
    if carry.action is OverlayAction.COPY and theirs is not None:
        return OverlayCarry(carry.action, carry.configs, kind=PENDING, created_ms=theirs.created_ms,
                            expires_ms=theirs.expires_ms)  # fmt: skip
    return carry


def apply_pending(destination: TopicCatalog, topic: str, carry: OverlayCarry) -> None:
    """Write the source's pending overlay into the destination's catalog home, with its own creation and
    expiry times (a COPY decision; anything else writes nothing), unless one appeared there since the
    plan. Idempotent: a resumed move finds it there and decides SAME."""
    store = pending_store(destination)
    if carry.action is OverlayAction.COPY and store.read(topic) is None:
        store.write(topic, carry.configs, now_ms=carry.created_ms, ttl_ms=carry.expires_ms - carry.created_ms)
