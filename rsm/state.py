"""What a configured RemoteStorageManager holds, shared by its copy, fetch and delete paths.

`RemoteStorageManager` (`rsm.manager`) is the contract Kafka calls; the jobs it delegates to
(`rsm.copy.pipeline`, `rsm.fetch.segments`, `rsm.store.deletion`) all read one `RsmState`: the
configuration, the keyring, the store, the record validation and topic policies, the overlays, the
location record, the caches and the fetch threads. `configure` builds the new configuration's parts first
and swaps them in under the lock, so an operation in flight keeps the ones it started with; what outlives a
reconfiguration (the fetch threads, the chunk allocator, the per-object memos, the counters) stays here.

The few answers every path needs are here too: a topic's effective settings (LogConfig over overlay over
the broker's keys), where a segment lives, store failures named as Kafka's exceptions, and forgetting a
segment's cached manifest and chunks.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from rsm import metrics
from rsm.api.errors import ConfigException, RemoteStorageException
from rsm.api.log_config import LogConfig
from rsm.api.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from rsm.config.keyring import Keyring, keyring_for
from rsm.config.kms import is_kms_key
from rsm.config.overlay import OverlayCache, TopicOverlayStore
from rsm.config.settings import RsmConfig, TopicSettings, unknown_setting
from rsm.fetch.cache import ByteLRU, IdentityMemo
from rsm.fetch.reader import ChunkAllocator, SegmentReader
from rsm.policy.enforce import PolicyGate
from rsm.policy.loading import load_topic_policy
from rsm.policy.pending import PendingAdopter, PendingOverlayStore
from rsm.store import custom_metadata as cm
from rsm.store.errors import StoreErrors, safe_message
from rsm.store.home import CatalogHome, catalog_home, data_default
from rsm.store.layout import Location, SegmentKeys
from rsm.store.location_notes import LocationNotes
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectStore
from rsm.store.topic_encryption import EncryptionMemory
from rsm.stored.manifest import Manifest
from rsm.validation.api import RecordValidationPolicy, load_policy
from rsm.validation.builtin import BuiltinPolicies
from rsm.validation.records import ValidationStats

log = logging.getLogger(__name__)

# entries of the per-object memos on the fetch path: segment keys (small), and plain segment readers (each
# holds its manifest, up to tens of KiB for a large segment: fewer, so the memo stays within a few MiB)
KEYS_MEMO_ENTRIES = 4096
READER_MEMO_ENTRIES = 256

_warned_unknown: set[str] = set()
_warned_lock = threading.Lock()


def warn_unknown_keys(keys: list[str]) -> None:
    """One warning per process naming the unknown keys not named before (not one per key per RSM
    instance: a bridge configures one per connection). ``bridge.*`` keys belong to the bridge."""
    with _warned_lock:
        new = [k for k in keys if not k.startswith("bridge.") and k not in _warned_unknown]
        _warned_unknown.update(new)
    if new:
        log.warning(
            "ignoring unknown RSM config keys (said once per process): %s",
            ", ".join(unknown_setting(k) for k in new),
        )


class RsmState:
    """A RemoteStorageManager's configuration, store, policies, caches and threads (see the module
    docstring); `store_override` replaces the store built from the configuration (tests inject failing
    stores)."""

    def __init__(self, store_override: ObjectStore | None = None) -> None:
        self.store_override = store_override
        self._store: ObjectStore | None = None
        self._config: RsmConfig | None = None
        self.keyring: Keyring | None = None
        self.policy: RecordValidationPolicy | None = None
        self.validation_stats = ValidationStats()
        self.metrics: metrics.RsmMetrics = metrics.NoMetrics()  # rsm.metrics, chosen at configure
        self._overlays: OverlayCache | None = None
        self._pending: PendingOverlayStore | None = None
        self.gate: PolicyGate | None = None
        self.registry: LocationRegistry | None = None
        self.home: CatalogHome | None = None
        self.encryption_memory: EncryptionMemory | None = None
        # topic ids the catalog home was found to know, so a copy with a past checks only once per process
        self.known_topics: set[uuid.UUID] = set()
        self.registry_warned = False
        self.notes: LocationNotes | None = None
        self.manifests: ByteLRU[tuple[Manifest, int]] = ByteLRU(8 << 20, sizeof=lambda v: v[1])
        self.chunks: ByteLRU[bytes] = ByteLRU(64 << 20)
        self.allocate: ChunkAllocator | None = None
        # fetch-path work done once per segment: its keys per metadata object, a plain reader per manifest
        self.keys: IdentityMemo[RemoteLogSegmentMetadata, SegmentKeys] = IdentityMemo(KEYS_MEMO_ENTRIES)
        self.readers: IdentityMemo[Manifest, SegmentReader] = IdentityMemo(READER_MEMO_ENTRIES)
        self.executor: ThreadPoolExecutor | None = None
        self.prefetch = 1
        self.lock = threading.Lock()
        self.closed = False

    # -- lifecycle ---------------------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, str]) -> None:
        """Build the configuration's parts, then swap them in (the previous policies and notes closed)."""
        config = RsmConfig(configs)
        warn_unknown_keys(config.unknown_keys)
        keyring_path = config.get("encryption.keyring.path")
        keyring: Keyring | None = keyring_for(config)
        default_key = config.get("encryption.key.id")
        kms_default = is_kms_key(str(default_key) if default_key else None)
        if keyring_path and default_key and default_key not in keyring:  # type: ignore[operator]
            raise ConfigException(f"config encryption.key.id: key id {default_key!r} is not in the keyring")
        if config.get("encryption.enabled") and not keyring_path and not kms_default:
            raise ConfigException(
                "config encryption.enabled=true needs encryption.keyring.path or a KMS key "
                "(encryption.key.id=kms:<key ARN or alias/...>)"
            )
        store = self.store_override or ObjectStore.from_config(config)
        plain = {k: str(v) for k, v in configs.items()}
        policy_class = config.get("record.validation.policy.class.name")
        # topics name a built-in policy (rsm.validation.builtin) unless the broker names a class
        policy = load_policy(str(policy_class), plain) if policy_class else BuiltinPolicies()
        # the store's documents live at the catalog home, apart from where new segments go (rsm.store.home)
        home = catalog_home(config)
        registry = LocationRegistry(store, home.bucket, home.prefix)
        # a topic's overlay, adopted from the pending overlay of its name before its first copy (rsm.policy)
        overlay_store = TopicOverlayStore(store, home.bucket, home.prefix)
        pending = PendingOverlayStore(store, home.bucket, home.prefix)
        overlay_ttl = int(config.get("topic.overlay.cache.ms"))  # type: ignore[arg-type]
        overlays = OverlayCache(
            overlay_store, overlay_ttl, adopt=PendingAdopter(overlay_store, pending, registry)
        )
        topic_policy = load_topic_policy(str(config.get("policy.class.name") or "") or None, plain)
        notes = LocationNotes(registry, data_default(config))
        catalog = CatalogHome(store, home, ttl_ms=overlay_ttl)
        memory = EncryptionMemory(store, home, ttl_ms=overlay_ttl)
        with self.lock:
            old_policy, old_gate, old_notes = self.policy, self.gate, self.notes
            self.notes = notes
            self._config, self.keyring, self._store, self.policy = config, keyring, store, policy
            self._overlays = overlays
            self._pending = pending
            self.gate = PolicyGate(topic_policy, overlay_ttl)
            self.registry = registry
            self.home = catalog
            self.encryption_memory = memory
            self.manifests = ByteLRU(int(config.get("cache.manifest.bytes")), sizeof=lambda v: v[1])  # type: ignore[arg-type]
            self.chunks = ByteLRU(int(config.get("cache.chunk.bytes")))  # type: ignore[arg-type]
            self.readers.clear()  # they hold the old store and chunk cache
            self.prefetch = int(config.get("fetch.prefetch.chunks"))  # type: ignore[arg-type]
            if self.metrics.enabled != bool(config.get("metrics.enabled")):
                self.metrics = metrics.for_config(bool(config.get("metrics.enabled")))
            self.metrics.watch_chunk_cache(self.chunks)
            if self.executor is None:
                self.executor = ThreadPoolExecutor(
                    max_workers=int(config.get("fetch.threads")),  # type: ignore[arg-type]
                    thread_name_prefix="rsm-fetch",
                )
        if old_policy is not None and old_policy is not policy:
            old_policy.close()
        if old_gate is not None:
            old_gate.policy.close()
        if old_notes is not None:
            old_notes.close()
        log.info("RemoteStorageManager configured: %r", config)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            executor, policy, gate, notes = self.executor, self.policy, self.gate, self.notes
            self.executor = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if notes is not None:
            notes.close()
        if policy is not None:
            policy.close()
        if gate is not None:
            gate.policy.close()
        self.manifests.clear()
        self.chunks.clear()
        self.readers.clear()

    def check_open(self) -> None:
        if self.closed:
            raise RemoteStorageException("RemoteStorageManager is closed")
        if self._config is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")

    # -- the configured parts ----------------------------------------------------------------------------
    @property
    def config(self) -> RsmConfig:
        if self._config is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._config

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._store

    @property
    def overlays(self) -> OverlayCache:
        if self._overlays is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._overlays

    @property
    def pending(self) -> PendingOverlayStore:
        if self._pending is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._pending

    @property
    def policy_gate(self) -> PolicyGate:
        if self.gate is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self.gate

    # -- answers every path needs ------------------------------------------------------------------------
    def topic_overlay(self, topic_id_partition: TopicIdPartition) -> Mapping[str, str]:
        """The topic's overlay keys (cached); RemoteStorageException if the store cannot be read."""
        tip = topic_id_partition
        try:
            return self.overlays.configs(tip.topic, tip.topic_id)
        except ConfigException:
            raise
        except Exception as exc:  # noqa: BLE001 - a store failure fails the operation; Kafka retries
            where = self.overlays.overlays.describe(tip.topic, tip.topic_id)
            raise RemoteStorageException(
                f"cannot read the topic overlay {where} of {tip}: {type(exc).__name__}: {safe_message(exc)}"
            ) from exc

    def topic_overlay_exists(self, topic: str, topic_id: uuid.UUID) -> bool:
        """Whether the topic has an overlay in the catalog home (read through the overlay cache)."""
        return bool(self.overlays.configs(topic, topic_id))

    def settings(
        self, log_config: Mapping[str, str] | None, topic_id_partition: TopicIdPartition | None = None
    ) -> TopicSettings:
        """A topic's effective settings: LogConfig keys over its overlay over the broker's."""
        overlay = self.topic_overlay(topic_id_partition) if topic_id_partition is not None else None
        return self.config.resolve(log_config if log_config is not None else LogConfig(), overlay)

    def location(self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None) -> Location:
        """Where a segment lives: from its custom metadata, else from today's configuration."""
        if metadata.custom_metadata is not None and metadata.custom_metadata.value:
            return cm.decode(metadata.custom_metadata)
        s = self.settings(log_config, metadata.topic_id_partition)
        return Location(s.bucket, s.prefix)

    def errors(self, what: str, metadata: RemoteLogSegmentMetadata, bucket: str, key: str) -> StoreErrors:
        """``with``: store failures become Kafka's exceptions, naming partition, segment and object."""
        return StoreErrors(self.store, what, metadata, bucket, key)

    def forget(self, keys: SegmentKeys) -> None:
        """Drop a segment's cached manifest and chunks (its copy was replaced, moved or deleted)."""
        hit = self.manifests.get((keys.bucket, keys.manifest))
        self.manifests.pop((keys.bucket, keys.manifest))
        if hit is not None:
            cache_id = hit[0].cache_id
            self.chunks.discard_where(lambda k: isinstance(k, tuple) and k[0] == cache_id)
