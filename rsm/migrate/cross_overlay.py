"""A cross-backend move carries the topic's overlay: the settings the source store held for it.

A topic's `unchecked.rsm.*` settings live in an overlay in the store (`rsm.config.overlay`): its bucket and
prefix, its encryption and key id, its compression, chunk size and record validation. Brokers switched to
the destination store read overlays from there only, so a move that left the overlay behind would have
them tier the topic's next segments with the destination's defaults: unencrypted, say, a topic the source
encrypted under its own key. So the move copies the source's overlay into the destination, before any
segment; the moved segments then go where the topic's new copies will (unless `--to-bucket` /
`--to-prefix` name another place).

An overlay already in the destination is the operator's choice for the new store and stays; keys in
which the two differ are reported. The copy is refused, before anything is written, when the destination
could not honour it: a bucket it names that the destination store lacks, a key id not in the
destination's keyring.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from rsm.api.errors import ConfigException
from rsm.catalog import TopicCatalog
from rsm.config.keyring import Keyring
from rsm.config.settings import TOPIC_PREFIX
from rsm.migrate.context import MigrateError

KEY_ID = TOPIC_PREFIX + "encryption.key.id"


class OverlayAction(StrEnum):
    """What the move does with the topic's overlay."""

    NONE = "none"  # the source has none (the destination's, if any, applies)
    COPY = "copy"  # the destination has none: the source's is copied there
    SAME = "same"  # the destination already holds the same settings
    KEPT = "kept"  # the destination holds other settings: they stay (see `differs`)


@dataclass(frozen=True)
class OverlayCarry:
    """The decision for one topic id, made before anything is written."""

    action: OverlayAction
    configs: dict[str, str] = field(default_factory=dict)  # what the destination will hold
    differs: tuple[str, ...] = ()  # keys the source's and the destination's overlays disagree on

    def describe(self, topic: str, dry_run: bool = False) -> str | None:
        """One line for the operator, or None when there is nothing to say."""
        if self.action is OverlayAction.COPY:
            verb = "would be" if dry_run else "was"
            return f"the topic overlay of {topic} {verb} copied to the destination: {', '.join(sorted(self.configs))}"
        if self.action is OverlayAction.KEPT:
            return (
                f"the destination's own topic overlay of {topic} stays; it differs from the source's in "
                f"{', '.join(self.differs)}"
            )
        return None


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
    held = None if ours is None else dict(ours.configs)
    if theirs is None:  # the destination's own overlay, if any, still places the moved segments
        return OverlayCarry(OverlayAction.NONE, held or {})
    wanted = dict(theirs.configs)
    if held is not None:
        differs = tuple(sorted(k for k in wanted.keys() | held.keys() if wanted.get(k) != held.get(k)))
        return OverlayCarry(OverlayAction.KEPT if differs else OverlayAction.SAME, held, differs)
    where = source.overlays.describe(topic, topic_id)
    bucket = wanted.get(TOPIC_PREFIX + "bucket")
    if bucket is not None and destination.store.bucket_exists(bucket.strip()) is False:
        raise MigrateError(
            f"the topic overlay {where} names bucket {bucket.strip()!r} ({TOPIC_PREFIX}bucket), which does not "
            "exist in the destination store: create it there, or give the topic an overlay in the "
            "destination first (rsm topic-config)"
        )
    key_id = wanted.get(KEY_ID)
    if key_id is not None and (keyring is None or key_id.strip() not in keyring):
        raise MigrateError(
            f"the topic overlay {where} names key id {key_id!r} ({KEY_ID}), which is not in the destination's "
            "keyring (encryption.keyring.path in --config): the brokers tiering the topic there need it"
        )
    return OverlayCarry(OverlayAction.COPY, wanted)


def apply_overlay(destination: TopicCatalog, topic: str, topic_id: uuid.UUID, carry: OverlayCarry) -> None:
    """Write the source's overlay into the destination (a COPY decision; anything else writes nothing),
    unless one appeared there since the plan (`rsm topic-config` run meanwhile: the operator's wins).
    Idempotent: a resumed move finds it there and decides SAME."""
    if carry.action is OverlayAction.COPY and destination.overlays.read(topic, topic_id) is None:
        destination.overlays.write(topic, topic_id, carry.configs)
