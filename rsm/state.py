"""What a configured RemoteStorageManager holds: its settings, its services, and what outlives both.

`RemoteStorageManager` (`rsm.manager`) is the contract Kafka calls; the jobs it delegates to
(`rsm.copy.pipeline`, `rsm.fetch.segments`, `rsm.store.deletion`) start from one `RsmState`, each typed
against a protocol of its own that names what it uses (`CopyState`, `FetchState`, `DeletionState`), so
none imports this module, which is built on theirs. `configure` decides the settings
(`rsm.broker_settings.RsmSettings`, immutable) and builds the services they name
(`rsm.services.RsmServices`: the store, the keyring, the policies, the overlays, the location record, the
catalog home), then swaps the pair in as one value, so an operation takes both at its start
(`configured()`) and keeps them to its end. Each job hands its helpers the settings and the one or two
services they use, not this state. What outlives a reconfiguration stays here: the fetch threads, the caches
and per-object memos, the chunk allocator, the counters and what was said once.

The few answers every path needs are here too: a topic's effective settings (LogConfig over overlay over
the broker's keys), where a segment lives, and forgetting a segment's cached manifest and chunks.
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
from rsm.broker_settings import RsmSettings
from rsm.config.settings import RsmConfig, TopicSettings, unknown_setting
from rsm.fetch.cache import ByteLRU, IdentityMemo
from rsm.fetch.reader import ChunkAllocator, SegmentReader
from rsm.services import RsmServices
from rsm.store.errors import safe_message
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore
from rsm.store.overlays import OverlayCache
from rsm.stored import custom_metadata as cm
from rsm.stored.manifest import Manifest
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
    """A RemoteStorageManager's settings, services, caches and threads (see the module docstring);
    `store_override` replaces the store built from the configuration (tests inject failing stores)."""

    def __init__(self, store_override: ObjectStore | None = None) -> None:
        self.store_override = store_override
        # what configure decided and what it built: each replaced whole, never changed in place
        self._configured: tuple[RsmSettings, RsmServices] | None = None
        # what outlives a reconfiguration: counters, the fetch threads and caches, the copy's memos
        self.validation_stats = ValidationStats()
        self.metrics: metrics.RsmMetrics = metrics.NoMetrics()  # rsm.metrics, chosen at configure
        # topic ids the catalog home was found to know, so a copy with a past checks only once per process
        self.known_topics: set[uuid.UUID] = set()
        self.registry_warned = False
        self.manifests: ByteLRU[tuple[Manifest, int]] = ByteLRU(8 << 20, sizeof=lambda v: v[1])
        self.chunks: ByteLRU[bytes] = ByteLRU(64 << 20)
        self.allocate: ChunkAllocator | None = None
        # fetch-path work done once per segment: its keys per metadata object, a plain reader per manifest
        self.keys: IdentityMemo[RemoteLogSegmentMetadata, SegmentKeys] = IdentityMemo(KEYS_MEMO_ENTRIES)
        self.readers: IdentityMemo[Manifest, SegmentReader] = IdentityMemo(READER_MEMO_ENTRIES)
        self.executor: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        self.closed = False

    # -- lifecycle ---------------------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, str]) -> None:
        """Decide the settings and build their services, then swap both in (the previous services closed)."""
        settings = RsmSettings.of(configs)
        warn_unknown_keys(settings.config.unknown_keys)
        services = RsmServices.build(settings, self.store_override)
        with self.lock:
            old = None if self._configured is None else self._configured[1]
            self._configured = (settings, services)
            self.manifests = ByteLRU(settings.manifest_cache_bytes, sizeof=lambda v: v[1])
            self.chunks = ByteLRU(settings.chunk_cache_bytes)
            self.readers.clear()  # they hold the old store and chunk cache
            if self.metrics.enabled != settings.metrics_enabled:
                self.metrics = metrics.for_config(settings.metrics_enabled)
            self.metrics.watch_chunk_cache(self.chunks)
            if self.executor is None:
                self.executor = ThreadPoolExecutor(
                    max_workers=settings.fetch_threads, thread_name_prefix="rsm-fetch"
                )
        if old is not None:
            old.close(services)
        log.info("RemoteStorageManager configured: %r", settings.config)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            executor, configured = self.executor, self._configured
            self.executor = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if configured is not None:
            configured[1].close()
        self.manifests.clear()
        self.chunks.clear()
        self.readers.clear()

    def check_open(self) -> None:
        if self.closed:
            raise RemoteStorageException("RemoteStorageManager is closed")
        if self._configured is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")

    # -- the configured parts ----------------------------------------------------------------------------
    def configured(self) -> tuple[RsmSettings, RsmServices]:
        """What the last `configure` decided and built, read at once: an operation takes them at its start
        and keeps them to its end, whatever a reconfiguration does meanwhile."""
        configured = self._configured
        if configured is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return configured

    @property
    def broker_settings(self) -> RsmSettings:
        """What `configure` decided (immutable: a reconfiguration replaces it whole)."""
        return self.configured()[0]

    @property
    def services(self) -> RsmServices:
        """The services `configure` built (immutable: a reconfiguration replaces the set whole)."""
        return self.configured()[1]

    @property
    def config(self) -> RsmConfig:
        return self.broker_settings.config

    @property
    def store(self) -> ObjectStore:
        return self.services.store

    @property
    def overlays(self) -> OverlayCache:
        return self.services.overlays

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

    def forget(self, keys: SegmentKeys) -> None:
        """Drop a segment's cached manifest and chunks (its copy was replaced, moved or deleted)."""
        hit = self.manifests.get((keys.bucket, keys.manifest))
        self.manifests.pop((keys.bucket, keys.manifest))
        if hit is not None:
            cache_id = hit[0].cache_id
            self.chunks.discard_where(lambda k: isinstance(k, tuple) and k[0] == cache_id)
