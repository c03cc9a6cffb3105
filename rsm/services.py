"""The services a configured RemoteStorageManager's operations use, built from its settings.

Why apart from the settings (`rsm.broker_settings`): settings are values an operation reads; services are
things it talks to (the store, the keyring and KMS, the record validation and topic policies, the topic
overlays and pending overlays, the location record and its notes, the catalog home, the topics' encryption
memory). `configure` builds a whole new set from new settings, then swaps it in with them, so an operation in
flight keeps the set it started with and the previous set's policies and notes are closed once replaced.

The set is frozen: a function is handed the one or two services it uses (`services.store`,
`services.registry`), never the manager's whole state. What outlives a reconfiguration (the fetch threads,
the caches, the counters) is not here but in `rsm.state.RsmState`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rsm.api.errors import ConfigException
from rsm.broker_settings import RsmSettings
from rsm.config.keyring import Keyring, keyring_for
from rsm.config.kms import is_kms_key
from rsm.policy.enforce import PolicyGate
from rsm.policy.loading import load_topic_policy
from rsm.policy.pending import PendingAdopter, PendingOverlayStore
from rsm.store.home import CatalogHome
from rsm.store.location_notes import LocationNotes
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectStore
from rsm.store.overlays import OverlayCache, TopicOverlayStore
from rsm.store.topic_encryption import EncryptionMemory
from rsm.validation.api import RecordValidationPolicy, load_policy
from rsm.validation.builtin import BuiltinPolicies

__all__ = ["RsmServices"]


@dataclass(frozen=True)
class RsmServices:
    """What one `configure` built for the operations to use (see the module docstring)."""

    store: ObjectStore
    keyring: Keyring | None
    record_policy: RecordValidationPolicy
    overlays: OverlayCache  # each topic's overlay, adopted from its pending overlay before its first copy
    pending: PendingOverlayStore
    gate: PolicyGate  # the topic management policy, as the RSM's own operations ask it
    registry: LocationRegistry
    home: CatalogHome
    encryption_memory: EncryptionMemory
    notes: LocationNotes

    @classmethod
    def build(cls, settings: RsmSettings, store_override: ObjectStore | None = None) -> RsmServices:
        """The services of `settings`; `store_override` replaces the store they name (tests inject failing
        stores). ConfigException when the keyring cannot give the default key."""
        keyring = keyring_for(settings.config)
        default_key = settings.default_key_id
        if settings.keyring_path and default_key and default_key not in keyring:  # type: ignore[operator]
            raise ConfigException(f"config encryption.key.id: key id {default_key!r} is not in the keyring")
        if settings.encryption_enabled and not settings.keyring_path and not is_kms_key(default_key):
            raise ConfigException(
                "config encryption.enabled=true needs encryption.keyring.path or a KMS key "
                "(encryption.key.id=kms:<key ARN or alias/...>)"
            )
        store = store_override or ObjectStore.from_config(settings.config)
        # topics name a built-in policy (rsm.validation.builtin) unless the broker names a class
        policy_class = settings.record_policy_class
        policy = load_policy(policy_class, dict(settings.plain)) if policy_class else BuiltinPolicies()
        # the store's documents live at the catalog home, apart from where new segments go (rsm.store.home)
        home, ttl = settings.home, settings.overlay_ttl_ms
        registry = LocationRegistry(store, home.bucket, home.prefix)
        overlay_store = TopicOverlayStore(store, home.bucket, home.prefix)
        pending = PendingOverlayStore(store, home.bucket, home.prefix)
        overlays = OverlayCache(overlay_store, ttl, adopt=PendingAdopter(overlay_store, pending, registry))
        topic_policy = load_topic_policy(settings.topic_policy_class, dict(settings.plain))
        return cls(
            store=store,
            keyring=keyring,
            record_policy=policy,
            overlays=overlays,
            pending=pending,
            gate=PolicyGate(topic_policy, ttl),
            registry=registry,
            home=CatalogHome(store, home, ttl_ms=ttl),
            encryption_memory=EncryptionMemory(store, home, ttl_ms=ttl),
            notes=LocationNotes(registry, settings.data_default),
        )

    def close(self, successor: RsmServices | None = None) -> None:
        """Close what this set owns (the policies, the notes' thread); a policy the `successor` kept (the
        same object) stays open."""
        if successor is None or successor.record_policy is not self.record_policy:
            self.record_policy.close()
        self.gate.policy.close()
        self.notes.close()
