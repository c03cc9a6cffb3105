"""The RemoteStorageManager: copy, fetch, fetch index and delete segments, per-topic configured.

The interface is Kafka's `RemoteStorageManager` in snake_case with seed 004's extension: every operation
receives the topic's LogConfig, whose `unchecked.rsm.*` keys choose bucket, prefix, encryption,
compression and chunk size (see `rsm.config.settings`).

Today's brokers refuse `unchecked.*` topic configs, so those keys also come from the topic's overlay in
the store (`rsm.config.overlay`, set with `rsm topic-config`, keyed by topic id, cached `topic.overlay.cache.ms`):
LogConfig keys win over the overlay, the overlay over the broker's `rsm.config.*`. Only new copies read
the settings: an existing segment is found through its custom metadata (where it was written), so a
changed bucket or prefix never orphans it.

Copy, in order (so that nothing a reader can mistake for a segment reaches the store):
1. resolve the topic's settings and the location; ask the topic policy about the topic's state (a violation
   refuses the copy: `rsm.policy.enforce`); encode the custom metadata (refused if over 128 bytes);
2. read the whole segment once, checking every batch (`rsm.validation`), computing a CRC-32C per chunk and
   noting which chunks are mostly already-compressed batches; run the topic's record validation policy;
3. delete a manifest left by an earlier attempt with the same segment id (so readers see "missing", never
   a mix of two attempts), then stream the `.log` object chunk by chunk (read, check the chunk's CRC
   against step 2 in case the file changed, compress, encrypt, upload part), then the `.indexes` object;
4. write the manifest: the commit point. On failure, every object of the segment is removed (best effort;
   a write whose answer was lost may have landed) and a `RemoteStorageException` names the topic-partition,
   the segment and the object;
5. failed or not, remove what unfinished writes of the segment's keys left (`rsm.store.debris`): temporary files
   or multipart uploads of this attempt or of an earlier one killed mid-copy.

Memory during a copy is bounded by a few chunks plus the S3 part buffer, whatever the segment size.
Where segments are is recorded under the default location for readers without a broker: a copy records its
location before its first upload, and a fetch or delete records any other location it finds a segment in
(`rsm.store.location_notes`: after the default bucket or prefix changed, the older locations follow).
Every method is thread-safe; the bridge calls them from many threads at once.

Every public method checks the types of its arguments first and refuses a wrong one with
`InvalidArgumentException` naming it (a RemoteStorageException, so Kafka and the bridge see their own
exception rather than a TypeError from deep inside, and `True` is not taken for position 1).
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from rsm import metrics
from rsm.api.errors import (
    ConfigException,
    InvalidArgumentException,
    RecordValidationError,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    SegmentIntegrityError,
)
from rsm.api.log_config import LogConfig
from rsm.api.metadata import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    is_int,
)
from rsm.config.keyring import Keyring
from rsm.config.names import topic_problem
from rsm.config.overlay import OverlayCache, TopicOverlayStore
from rsm.config.redact import redact_text
from rsm.config.settings import ConfigEntry, RsmConfig, TopicSettings, ViolationAction
from rsm.copy.manifest import (
    ChunkIndex,
    Encryption,
    IndexEntry,
    Manifest,
    ManifestError,
    SegmentInfo,
    require_authenticated,
)
from rsm.copy.transform import (
    Codec,
    PieceKind,
    SegmentCipher,
    TransformError,
    bind_crc32c,
    crc32c,
    encode_piece,
    new_data_key,
    piece_tag,
)
from rsm.fetch.cache import ByteLRU, IdentityMemo
from rsm.fetch.reader import ChunkAllocator, SegmentReader, cipher_for
from rsm.policies import BuiltinPolicies
from rsm.policy.api import TopicManagementPolicy
from rsm.policy.enforce import PolicyGate
from rsm.policy.loading import load_topic_policy
from rsm.policy.pending import PendingAdopter, PendingOverlayStore
from rsm.record_validation import RecordValidator, ValidationResult, ValidationStats
from rsm.store import custom_metadata as cm
from rsm.store import forward
from rsm.store.debris import remove_segment_leftovers
from rsm.store.layout import Location, SegmentKeys
from rsm.store.location_notes import LocationNotes
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.validation import (
    IntegritySummary,
    RecordValidationPolicy,
    SegmentIntegrityVerifier,
    TopicMetadata,
    load_policy,
    read_index,
)

log = logging.getLogger(__name__)
# entries of the per-object memos on the fetch path: segment keys (small), and plain segment readers (each
# holds its manifest, up to tens of KiB for a large segment: fewer, so the memo stays within a few MiB)
_KEYS_MEMO_ENTRIES = 4096
_READER_MEMO_ENTRIES = 256

INDEX_ORDER = list(IndexType)  # piece numbers of indexes in the `.indexes` object
SKIP_COMPRESSION_FRACTION = 0.5  # chunks whose bytes are mostly compressed batches are stored as they are


_warned_unknown: set[str] = set()
_warned_lock = threading.Lock()


def warn_unknown_keys(keys: list[str]) -> None:
    """One warning per process naming the unknown keys not named before (not one per key per RSM
    instance: a bridge configures one per connection). ``bridge.*`` keys belong to the bridge."""
    with _warned_lock:
        new = [k for k in keys if not k.startswith("bridge.") and k not in _warned_unknown]
        _warned_unknown.update(new)
    if new:
        log.warning("ignoring unknown RSM config keys (said once per process): %s", ", ".join(new))


class RemoteStorageManager:
    """Kafka's RemoteStorageManager in Python (see the module docstring for the copy protocol)."""

    def __init__(self, store: ObjectStore | None = None) -> None:
        """`store` overrides the store built from the configuration (tests inject failing stores)."""
        self._store_override = store
        self._store: ObjectStore | None = None
        self._config: RsmConfig | None = None
        self._keyring: Keyring | None = None
        self._policy: RecordValidationPolicy | None = None
        self._validation_stats = ValidationStats()
        self._metrics: metrics.RsmMetrics = metrics.NoMetrics()  # rsm.metrics, chosen at configure
        self._overlays: OverlayCache | None = None
        self._pending: PendingOverlayStore | None = None
        self._gate: PolicyGate | None = None
        self._registry: LocationRegistry | None = None
        self._registry_warned = False
        self._notes: LocationNotes | None = None
        self._manifests: ByteLRU[tuple[Manifest, int]] = ByteLRU(8 << 20, sizeof=lambda v: v[1])
        self._chunks: ByteLRU[bytes] = ByteLRU(64 << 20)
        self._allocate: ChunkAllocator | None = None
        # fetch-path work done once per segment: its keys per metadata object, a plain reader per manifest
        self._keys: IdentityMemo[RemoteLogSegmentMetadata, SegmentKeys] = IdentityMemo(_KEYS_MEMO_ENTRIES)
        self._readers: IdentityMemo[Manifest, SegmentReader] = IdentityMemo(_READER_MEMO_ENTRIES)
        self._executor: ThreadPoolExecutor | None = None
        self._prefetch = 1
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------------------
    def configure(self, configs: Mapping[str, str]) -> None:
        """Take the broker's `rsm.config.*` keys (prefix stripped, as Kafka passes them)."""
        config = RsmConfig(configs)
        warn_unknown_keys(config.unknown_keys)
        keyring_path = config.get("encryption.keyring.path")
        keyring = Keyring(str(keyring_path)) if keyring_path else None
        default_key = config.get("encryption.key.id")
        if keyring is not None and default_key and default_key not in keyring:
            raise ConfigException(f"config encryption.key.id: key id {default_key!r} is not in the keyring")
        if config.get("encryption.enabled") and keyring is None:
            raise ConfigException("config encryption.enabled=true needs encryption.keyring.path")
        store = self._store_override or ObjectStore.from_config(config)
        policy_class = config.get("record.validation.policy.class.name")
        policy = (
            load_policy(str(policy_class), {k: str(v) for k, v in configs.items()})
            if policy_class
            else BuiltinPolicies()  # topics name a built-in policy (rsm.policies)
        )
        registry = LocationRegistry(store, str(config.get("bucket")), str(config.get("prefix")))
        # a topic's overlay, adopted from the pending overlay of its name before its first copy (rsm.policy)
        overlay_store = TopicOverlayStore(store, str(config.get("bucket")), str(config.get("prefix")))
        pending = PendingOverlayStore(store, str(config.get("bucket")), str(config.get("prefix")))
        overlay_ttl = int(config.get("topic.overlay.cache.ms"))  # type: ignore[arg-type]
        overlays = OverlayCache(
            overlay_store, overlay_ttl, adopt=PendingAdopter(overlay_store, pending, registry)
        )
        topic_policy = load_topic_policy(
            str(config.get("policy.class.name") or "") or None, {k: str(v) for k, v in configs.items()}
        )
        notes = LocationNotes(registry)
        with self._lock:
            old_policy = self._policy
            old_gate = self._gate
            old_notes = self._notes
            self._notes = notes
            self._config, self._keyring, self._store, self._policy = config, keyring, store, policy
            self._overlays = overlays
            self._pending = pending
            self._gate = PolicyGate(topic_policy, overlay_ttl)
            self._registry = registry
            self._manifests = ByteLRU(int(config.get("cache.manifest.bytes")), sizeof=lambda v: v[1])  # type: ignore[arg-type]
            self._chunks = ByteLRU(int(config.get("cache.chunk.bytes")))  # type: ignore[arg-type]
            self._readers.clear()  # they hold the old store and chunk cache
            self._prefetch = int(config.get("fetch.prefetch.chunks"))  # type: ignore[arg-type]
            if self._metrics.enabled != bool(config.get("metrics.enabled")):
                self._metrics = metrics.for_config(bool(config.get("metrics.enabled")))
            self._metrics.watch_chunk_cache(self._chunks)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
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
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, policy, gate, notes = self._executor, self._policy, self._gate, self._notes
            self._executor = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if notes is not None:
            notes.close()
        if policy is not None:
            policy.close()
        if gate is not None:
            gate.policy.close()
        self._manifests.clear()
        self._chunks.clear()
        self._readers.clear()

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def config(self) -> RsmConfig:
        """The broker-level configuration; `config.describe(log_config)` answers effective values."""
        if self._config is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._config

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._store

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageException("RemoteStorageManager is closed")
        if self._config is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")

    def _check_call(self, metadata: object, log_config: object) -> None:
        """Open, and the arguments every operation takes are of the right types."""
        self._check_open()
        if not isinstance(metadata, RemoteLogSegmentMetadata):
            raise InvalidArgumentException(
                f"metadata must be a RemoteLogSegmentMetadata, got {type(metadata).__name__}"
            )
        if log_config is not None and not isinstance(log_config, Mapping):
            raise InvalidArgumentException(
                f"log_config must be a mapping of topic configs or None, got {type(log_config).__name__}"
            )

    # -- helpers -----------------------------------------------------------------------------------------
    @property
    def overlays(self) -> OverlayCache:
        """The per-topic overlays (`rsm topic-config`) this RSM reads, cached `topic.overlay.cache.ms`."""
        if self._overlays is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._overlays

    @property
    def pending_overlays(self) -> PendingOverlayStore:
        """Settings of topics not created yet, adopted before their first copy (`rsm.policy.pending`)."""
        if self._pending is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._pending

    @property
    def topic_policy(self) -> TopicManagementPolicy:
        """The topic management policy (`policy.class.name`, or the built-in one), configured like the RSM:
        the bridge answers the broker's policy classes with it, and copies and deletions ask it too."""
        if self._gate is None:
            raise RemoteStorageException("RemoteStorageManager is not configured")
        return self._gate.policy

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
                f"cannot read the topic overlay {where} of {tip}: {type(exc).__name__}: {_safe(exc)}"
            ) from exc

    def describe_topic_config(
        self, topic_id_partition: TopicIdPartition, log_config: Mapping[str, str] | None = None
    ) -> list[ConfigEntry]:
        """Every effective setting of a topic with its source (LogConfig, overlay, broker, default)."""
        self._check_open()
        return self.config.describe(log_config, self.topic_overlay(topic_id_partition))

    def _settings(
        self, log_config: Mapping[str, str] | None, topic_id_partition: TopicIdPartition | None = None
    ) -> TopicSettings:
        overlay = self.topic_overlay(topic_id_partition) if topic_id_partition is not None else None
        return self.config.resolve(log_config if log_config is not None else LogConfig(), overlay)

    def _location(self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None) -> Location:
        """Where a segment lives: from its custom metadata, else from today's configuration."""
        if metadata.custom_metadata is not None and metadata.custom_metadata.value:
            return cm.decode(metadata.custom_metadata)
        s = self._settings(log_config, metadata.topic_id_partition)
        return Location(s.bucket, s.prefix)

    def _errors(self, what: str, metadata: RemoteLogSegmentMetadata, bucket: str, key: str) -> _StoreErrors:
        """Translate store failures into Kafka's exceptions, naming partition, segment and object."""
        return _StoreErrors(self.store, what, metadata, bucket, key)

    def _manifest(self, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys) -> Manifest:
        cache_key = (keys.bucket, keys.manifest)
        hit = self._manifests.get(cache_key)
        if hit is not None:
            return hit[0]
        with self._errors("manifest read", metadata, keys.bucket, keys.manifest):
            raw = self.store.get(keys.bucket, keys.manifest)
            manifest = Manifest.from_bytes(raw, self.store.describe(keys.bucket, keys.manifest))
            if self.config.get("manifest.require.authenticated"):
                require_authenticated(manifest)
        if manifest.segment.segment_id != metadata.remote_log_segment_id.id_base64:
            raise RemoteStorageException(
                f"manifest {self.store.describe(keys.bucket, keys.manifest)} belongs to segment "
                f"{manifest.segment.segment_id}, not {metadata.remote_log_segment_id.id_base64}"
            )
        self._manifests.put(cache_key, (manifest, len(raw)))
        if self._notes is not None:  # a location other than the default: in the current record (off-path)
            self._notes.fetched(metadata, keys.location)
        return manifest

    def _manifest_or_moved(
        self, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys
    ) -> tuple[Manifest, SegmentKeys]:
        """`_manifest`, or, when the manifest is gone, the one where `rsm migrate move` took the segment:
        its forwards (`rsm.store.forward`) are followed to the first location holding its manifest."""
        try:
            return self._manifest(metadata, keys), keys
        except RemoteResourceNotFoundException as not_here:
            ref = forward.SegmentRef.of(metadata)
            with self._errors("forward read", metadata, keys.bucket, ref.forward_key(keys.location)):
                hops = forward.chain(self.store, keys.location, ref)
            for location in hops:
                moved = SegmentKeys.of(location, metadata)
                try:
                    manifest = self._manifest(metadata, moved)
                except RemoteResourceNotFoundException:
                    continue
                if metadata.custom_metadata is not None and metadata.custom_metadata.value:
                    self._keys.put(metadata, moved)  # later fetches with this metadata go straight there
                return manifest, moved
            raise not_here

    def _reader(
        self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
    ) -> tuple[SegmentReader, SegmentKeys]:
        keys = self._keys_of(metadata, log_config)
        manifest, keys = self._manifest_or_moved(metadata, keys)
        # plain segments: one reader per manifest (it holds no state of a fetch); encrypted ones unwrap their
        # data key on every fetch, so a key taken out of the keyring stops decrypting at once
        plain = manifest.encryption is None
        if plain:
            hit = self._readers.get(manifest)
            if hit is not None:
                return hit, keys
        try:
            with self._errors("decryption setup", metadata, keys.bucket, keys.manifest):
                cipher = cipher_for(manifest, self._keyring)  # checks the manifest's seal
        except RemoteStorageException:
            self._forget(keys)  # a manifest refused now may be rewritten by a retried copy: reread it
            raise
        reader = SegmentReader(
            self.store, keys.bucket, manifest, cipher, self._chunks, self._allocate, self._metrics
        )
        if plain:
            self._readers.put(manifest, reader)
        return reader, keys

    def _keys_of(
        self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
    ) -> SegmentKeys:
        """The segment's object keys; remembered per metadata object when its custom metadata says where
        it lives (the bridge hands the same object for every fetch of a segment, and so does Kafka)."""
        custom = metadata.custom_metadata
        if custom is None or not custom.value:
            return SegmentKeys.of(self._location(metadata, log_config), metadata)  # today's configuration
        keys = self._keys.get(metadata)
        if keys is None:
            keys = SegmentKeys.of(cm.decode(custom), metadata)
            self._keys.put(metadata, keys)
        return keys

    def set_chunk_allocator(self, allocate: ChunkAllocator | None) -> None:
        """Decode fetched chunks into buffers from ``allocate(size)`` (None from it: the heap as usual).

        Why: the bridge passes its shared-memory arena, so a chunk decoded for one fetch is cached where the
        broker can read it in place, with no copy between the processes.
        """
        self._allocate = allocate
        self._readers.clear()  # they decode with the allocator they were made with

    # -- copy --------------------------------------------------------------------------------------------
    @metrics.counts_failures("copy")
    def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment_data: LogSegmentData,
        log_config: Mapping[str, str] | None = None,
    ) -> CustomMetadata | None:
        """Upload a rolled segment and its indexes; returns where it went (<= 128 bytes)."""
        self._check_call(metadata, log_config)
        if not isinstance(segment_data, LogSegmentData):
            raise InvalidArgumentException(
                f"segment_data must be a LogSegmentData, got {type(segment_data).__name__}"
            )
        seg = metadata.remote_log_segment_id
        settings = self._settings(log_config, seg.topic_id_partition)
        assert self._gate is not None
        self._gate.check_copy(seg.topic_id_partition, log_config, self.topic_overlay(seg.topic_id_partition))
        location = Location(settings.bucket, settings.prefix)
        custom = cm.encode(location)
        keys = SegmentKeys.of(location, metadata)
        key_id = None
        if settings.encryption_enabled:
            key_id = settings.encryption_key_id
            if self._keyring is None:
                raise ConfigException(
                    f"topic {seg.topic_id_partition.topic} asks for encryption but no keyring is configured "
                    "(encryption.keyring.path)"
                )
            if not key_id:
                raise ConfigException(
                    f"topic {seg.topic_id_partition.topic} asks for encryption but no key id is set "
                    "(unchecked.rsm.encryption.key.id, its topic overlay, or encryption.key.id)"
                )
            if key_id not in self._keyring:
                raise ConfigException(
                    f"topic {seg.topic_id_partition.topic}: encryption key id {key_id!r} is not in the keyring"
                )
        elif self.config.get("manifest.require.authenticated"):
            raise ConfigException(
                f"topic {seg.topic_id_partition.topic} is not encrypted, but manifest.require.authenticated=true "
                "would refuse to fetch its segments"
            )
        log_path = segment_data.log_segment
        started = time.monotonic()

        # 1. check the whole segment (batches, indexes, the topic's record policy) before anything is uploaded
        summary, chunk_crcs, validation = self._verify(metadata, segment_data, settings)

        # 2. transform and upload, manifest last
        cipher = None
        encryption = None
        if key_id is not None:
            assert self._keyring is not None
            data_key = new_data_key()
            cipher = SegmentCipher(data_key, seg.id)
            encryption = Encryption(key_id, self._keyring.wrap(key_id, data_key, seg.id.bytes))
        # readers without a broker find a topic's segments through this record (rsm.store.locations)
        assert self._registry is not None
        registry = self._registry
        with self._errors("location record", metadata, registry.bucket, registry.prefix):
            try:
                registry.record(seg.topic_id_partition.topic, seg.topic_id_partition.topic_id, location)
            except (ObjectNotFound, FileNotFoundError):
                # no default bucket (every topic names its own): the copy goes on, readers scan instead
                if not self._registry_warned:
                    self._registry_warned = True
                    log.warning(
                        "the default location %s does not exist, so topics' locations are not recorded there; "
                        "readers without a broker find segments by listing the buckets they are told about",
                        self.store.describe(registry.bucket, registry.prefix),
                    )
        with self._errors("removal of an earlier attempt's manifest", metadata, keys.bucket, keys.manifest):
            self.store.delete(keys.bucket, keys.manifest)
        self._forget(keys)
        try:
            chunk_index = self._upload_log(metadata, keys, log_path, settings, summary, chunk_crcs, cipher)
            index_entries = self._upload_indexes(metadata, keys, segment_data, settings, cipher)
            manifest = Manifest(
                copy_id=uuid.uuid4().hex,
                created_ms=int(time.time() * 1000),
                segment=SegmentInfo.of(metadata, txn_idx_empty=IndexType.TRANSACTION not in index_entries),
                location={
                    "bucket": keys.bucket,
                    "prefix": location.prefix,
                    "log": keys.log,
                    "indexes": keys.indexes,
                },
                encryption=encryption,
                log=chunk_index,
                indexes=index_entries,
                integrity={
                    "batches": summary.batches,
                    "first_offset": -1 if summary.first_offset is None else summary.first_offset,
                    "last_offset": -1 if summary.last_offset is None else summary.last_offset,
                    "max_timestamp_ms": summary.max_timestamp_ms,
                    "first_batch_timestamp_ms": summary.first_batch_timestamp_ms,
                    "compressed_batch_bytes": summary.compressed_batch_bytes,
                },
                validation=validation,
            )
            with self._errors("manifest write", metadata, keys.bucket, keys.manifest):
                self.store.put(keys.bucket, keys.manifest, manifest.to_bytes(cipher))
            stored = chunk_index.stored_size + sum(e.stored_size for e in index_entries.values())
        except BaseException:
            # every key of the segment, the manifest first, whether or not its write seemed to succeed: a PUT
            # or CompleteMultipartUpload whose answer was lost (a timeout, a reset connection) may have
            # landed although it failed here. Only this copy writes these keys (Kafka runs one copy of a
            # segment id at a time), so nothing removed here belongs to anyone else
            for key in keys.all():
                with contextlib.suppress(Exception):
                    self.store.delete(keys.bucket, key)
            self._sweep_leftovers(metadata, keys)
            raise
        # a botocore retry of CreateMultipartUpload whose first answer was lost leaves an upload nobody
        # completes, and an earlier attempt killed mid-copy leaves its own: both are this segment's
        self._sweep_leftovers(metadata, keys)
        elapsed = time.monotonic() - started
        tip = seg.topic_id_partition
        self._metrics.copied(tip.topic, tip.partition, summary.size, stored, 3, elapsed)
        # one line per copy, the same fields as the delete's, to search for (never one per fetch at INFO)
        log.info(
            "copied segment topic=%s partition=%d segment=%s offsets=%d..%d bytes=%d stored_bytes=%d "
            "chunks=%d time_ms=%d location=%s key_id=%s%s",
            tip.topic,
            tip.partition,
            seg.id_base64,
            metadata.start_offset,
            metadata.end_offset,
            summary.size,
            stored,
            chunk_index.count,
            round(elapsed * 1000),
            self.store.describe(keys.bucket, keys.stem),
            key_id or "-",
            ""
            if validation is None
            else f" validated_records={validation['records']} violations={validation['violation_count']}",
        )
        return custom

    def _verify(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData, settings: TopicSettings
    ) -> tuple[IntegritySummary, list[int], dict[str, object] | None]:
        """Read the segment once, chunk by chunk: integrity (every batch, the offset and time indexes), a
        CRC-32C per chunk, and the topic's record validation policy over the same bytes (compressed batches
        are decompressed once, by the validation's decoder: `rsm.record_validation`). Returns the summary,
        the chunk CRCs and the validation report for the manifest (None when the topic has no policy)."""
        path = data.log_segment
        validator = self._record_validator(metadata, settings, path)
        crcs: list[int] = []
        buf = bytearray(settings.chunk_size)
        view = memoryview(buf)
        try:
            verifier = SegmentIntegrityVerifier(
                str(path),
                metadata.start_offset,
                metadata.end_offset,
                metadata.segment_size_in_bytes,
                settings.chunk_size,
                offset_index=read_index(data.offset_index),
                time_index=read_index(data.time_index),
                offset_index_file=_name(data.offset_index, "offset index"),
                time_index_file=_name(data.time_index, "time index"),
                on_batch=None if validator is None else validator.on_batch,
                leader_epochs=metadata.segment_leader_epochs.keys(),
            )
            with path.open("rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    n = _fill(f, view, n)
                    verifier.feed(view[:n])
                    if validator is not None:
                        validator.feed(view[:n])
                    crcs.append(crc32c(view[:n]))
            summary = verifier.finish()
            result = None if validator is None else validator.finish()
        except SegmentIntegrityError as exc:
            seg = metadata.remote_log_segment_id
            raise SegmentIntegrityError(
                exc.file, exc.position, f"{exc.reason} (segment {seg.id_base64} of {seg.topic_id_partition})"
            ) from None
        except OSError as exc:
            raise RemoteStorageException(
                f"cannot read segment file {path} of {metadata.remote_log_segment_id}: {exc.strerror or exc}"
            ) from None
        report = None if result is None else self._validation_report(metadata, path, settings, result)
        return summary, crcs, report

    def _record_validator(
        self, metadata: RemoteLogSegmentMetadata, settings: TopicSettings, path: Path
    ) -> RecordValidator | None:
        if settings.validation_policy is None or self._policy is None:
            return None
        topic = TopicMetadata(metadata.topic_id_partition, settings.validation_policy)
        return RecordValidator(self._policy.for_topic(topic), topic, str(path))

    def _validation_report(
        self,
        metadata: RemoteLogSegmentMetadata,
        path: Path,
        settings: TopicSettings,
        result: ValidationResult,
    ) -> dict[str, object]:
        tip = metadata.topic_id_partition
        count, violations = result.violation_count, result.violations
        refuse = bool(count) and settings.on_violation is ViolationAction.FAIL
        totals = self._validation_stats.add(tip.topic, result, refuse)
        self._metrics.validated(tip.topic, tip.partition, result.records, count, refuse, result.seconds)
        # the copy's line names the records checked; a segment with violations gets its own line
        log.log(
            logging.INFO if count else logging.DEBUG,
            "validated segment %s of %s with policy %r: %d records, %d violation(s), %.3fs%s "
            "(topic totals: %d segments, %d records, %d violations, %.3fs)",
            metadata.remote_log_segment_id.id_base64,
            tip,
            result.policy,
            result.records,
            count,
            result.seconds,
            "; copy refused" if refuse else ("; tiered with a report" if count else ""),
            totals.segments,
            totals.records,
            totals.violations,
            totals.seconds,
        )
        if refuse:
            first = violations[0]
            raise RecordValidationError(
                f"segment {metadata.remote_log_segment_id} of {tip}: {count} record(s) violate policy "
                f"{settings.validation_policy!r}; first at offset {first.offset} (batch at byte {first.position} "
                f"of {path}): {first.reason}"
            )
        return {
            "policy": settings.validation_policy,
            "action": settings.on_violation.value,
            "records": result.records,
            "violation_count": count,
            "violations": [
                {"offset": v.offset, "position": v.position, "reason": v.reason} for v in violations
            ],
        }

    def validation_stats(self) -> dict[str, dict[str, int | float]]:
        """Record validation counters per topic since start: {topic: {segments, records, violations,
        refused, seconds}} (segments validated, records checked, records violating the policy, copies
        refused for violations, seconds spent decoding and in the policy)."""
        return self._validation_stats.snapshot()

    def _upload_log(
        self,
        metadata: RemoteLogSegmentMetadata,
        keys: SegmentKeys,
        path: Path,
        settings: TopicSettings,
        summary: IntegritySummary,
        chunk_crcs: list[int],
        cipher: SegmentCipher | None,
    ) -> ChunkIndex:
        cs = settings.chunk_size
        stored_sizes: list[int] = []
        codecs: list[Codec] = []
        buf = bytearray(cs)
        view = memoryview(buf)
        with self._errors("upload", metadata, keys.bucket, keys.log):
            writer = self.store.open_writer(keys.bucket, keys.log, background=True)
            try:
                with path.open("rb", buffering=0) as f:
                    i = 0
                    while True:
                        n = f.readinto(buf)
                        if not n:
                            break
                        n = _fill(f, view, n)
                        chunk = view[:n]
                        if i >= len(chunk_crcs) or crc32c(chunk) != chunk_crcs[i]:
                            raise RemoteStorageException(
                                f"segment file {path} changed while being copied (chunk {i}); refusing the copy"
                            )
                        compress = (
                            settings.compression_enabled
                            and summary.compressed_bytes_per_chunk[i] <= SKIP_COMPRESSION_FRACTION * n
                        )
                        stored, codec = encode_piece(
                            chunk,
                            kind=PieceKind.LOG,
                            number=i,
                            compress=compress,
                            level=settings.compression_level,
                            cipher=cipher,
                        )
                        writer.write(stored)
                        stored_sizes.append(len(stored))
                        codecs.append(codec)
                        i += 1
                if i != len(chunk_crcs):
                    raise RemoteStorageException(f"segment file {path} shrank while being copied")
            except BaseException:
                writer.abort()
                raise
            writer.commit()
        return ChunkIndex(
            size=summary.size,
            chunk_size=cs,
            stored_sizes=tuple(stored_sizes),
            codecs=tuple(codecs),
            crc32c=None
            if cipher is not None
            else tuple(
                bind_crc32c(crc, piece_tag(metadata.remote_log_segment_id.id, PieceKind.LOG, i))
                for i, crc in enumerate(chunk_crcs)
            ),
        )

    def _upload_indexes(
        self,
        metadata: RemoteLogSegmentMetadata,
        keys: SegmentKeys,
        data: LogSegmentData,
        settings: TopicSettings,
        cipher: SegmentCipher | None,
    ) -> dict[IndexType, IndexEntry]:
        sources: dict[IndexType, Path | bytes | None] = {
            IndexType.OFFSET: data.offset_index,
            IndexType.TIMESTAMP: data.time_index,
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index,
            IndexType.TRANSACTION: data.transaction_index,
            IndexType.LEADER_EPOCH: data.leader_epoch_index,
        }
        entries: dict[IndexType, IndexEntry] = {}
        with self._errors("upload", metadata, keys.bucket, keys.indexes):
            writer = self.store.open_writer(keys.bucket, keys.indexes)
            try:
                offset = 0
                for index_type, source in sources.items():
                    if source is None:
                        continue
                    if isinstance(source, Path):
                        try:
                            raw = source.read_bytes()
                        except FileNotFoundError:
                            if index_type is IndexType.TRANSACTION:
                                continue  # Kafka may hand a path to a transaction index never created
                            raise RemoteStorageException(
                                f"{index_type.name} index file {source} of {metadata.remote_log_segment_id} is missing"
                            ) from None
                        if index_type is IndexType.TRANSACTION and not raw:
                            continue
                    else:
                        raw = source
                    stored, codec = encode_piece(
                        raw,
                        kind=PieceKind.INDEX,
                        number=INDEX_ORDER.index(index_type),
                        compress=settings.compression_enabled,
                        level=settings.compression_level,
                        cipher=cipher,
                    )
                    writer.write(stored)
                    tag = piece_tag(
                        metadata.remote_log_segment_id.id, PieceKind.INDEX, INDEX_ORDER.index(index_type)
                    )
                    entries[index_type] = IndexEntry(
                        offset,
                        len(stored),
                        len(raw),
                        codec,
                        None if cipher is not None else bind_crc32c(crc32c(raw), tag),
                    )
                    offset += len(stored)
            except BaseException:
                writer.abort()
                raise
            writer.commit()
        return entries

    # -- fetch -------------------------------------------------------------------------------------------
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        log_config: Mapping[str, str] | None = None,
    ) -> BinaryIO:
        """A stream of the segment's bytes [start_position, end_position] (inclusive), fetched lazily."""
        self._check_call(metadata, log_config)
        if not is_int(start_position):
            raise _not_a_position("start_position", start_position, metadata)
        if end_position is not None and not is_int(end_position):
            raise _not_a_position("end_position", end_position, metadata)
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise RemoteStorageException(
                f"invalid position range {start_position}..{end_position} for segment {metadata.remote_log_segment_id}"
            )
        # failures of the segment are counted here and in on_error (rsm.metrics), not by a wrapper: this
        # runs once per Kafka fetch, and a wrapper's frame cost more than the counting
        try:
            reader, keys = self._reader(metadata, log_config)
        except Exception as exc:
            self._count_fetch_failure(metadata, exc)
            raise
        if start_position > reader.size or (start_position == reader.size and reader.size > 0):
            self._count_fetch_failure(metadata, None)
            raise RemoteStorageException(
                f"start position {start_position} is beyond the {reader.size}-byte segment "
                f"{metadata.remote_log_segment_id} ({self.store.describe(keys.bucket, keys.log)})"
            )

        def on_error(exc: BaseException) -> BaseException:
            # the cached manifest may describe a copy another process has since replaced or deleted:
            # forget it so the next fetch reads the store afresh
            self._forget(keys)
            try:
                with self._errors("fetch", metadata, keys.bucket, keys.log):
                    raise exc
            except RemoteStorageException as mapped:
                self._count_fetch_failure(metadata, mapped)  # by the kind Kafka sees
                return mapped
            return exc  # pragma: no cover - _errors always maps

        # the stream counts itself when it closes (reader.stats): nothing more to do per fetch here
        return reader.stream(start_position, end_position, self._executor, self._prefetch, on_error)  # type: ignore[return-value]

    def _count_fetch_failure(self, metadata: RemoteLogSegmentMetadata, exc: BaseException | None) -> None:
        tip = metadata.remote_log_segment_id.topic_id_partition
        self._metrics.failed("fetch", tip.topic, tip.partition, exc or RemoteStorageException("position"))

    @metrics.counts_failures("index-fetch", expected=(RemoteResourceNotFoundException,))
    def fetch_index(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        log_config: Mapping[str, str] | None = None,
    ) -> BinaryIO:
        """A stream of one index file as the broker had it; missing optional index -> not found.

        `index_type` is an IndexType or its name (`"OFFSET"`), as the bridge passes Kafka's enum.
        """
        self._check_call(metadata, log_config)
        if not isinstance(index_type, IndexType):
            if not isinstance(index_type, str) or index_type not in IndexType.__members__:
                raise InvalidArgumentException(
                    f"index_type must be an IndexType or one of its names ({', '.join(IndexType.__members__)}), "
                    f"got {index_type!r} (segment {metadata.remote_log_segment_id})"
                )
            index_type = IndexType[index_type]
        reader, keys = self._reader(metadata, log_config)
        if index_type not in reader.manifest.indexes:
            raise RemoteResourceNotFoundException(
                f"segment {metadata.remote_log_segment_id.id_base64} of {metadata.topic_id_partition} has no "
                f"{index_type.name} index ({self.store.describe(keys.bucket, keys.indexes)})"
            )
        with self._errors(f"{index_type.name} index fetch", metadata, keys.bucket, keys.indexes):
            data = reader.index(index_type)
        tip = metadata.remote_log_segment_id.topic_id_partition
        self._metrics.index_fetched(tip.topic, tip.partition)
        return io.BytesIO(data)

    # -- delete ------------------------------------------------------------------------------------------
    @metrics.counts_failures("delete")
    def delete_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None = None
    ) -> None:
        """Remove the segment's objects, the manifest first so readers never see a half-deleted segment, then
        whatever unfinished writes of them left (`rsm.store.debris`).

        Why the leftovers too: Kafka deletes a segment whose copy never finished (a broker or bridge killed
        mid-copy) through this call, and nothing else would ever find its temporary files or incomplete
        multipart uploads. A failure to remove them fails the delete, so Kafka retries it.
        """
        self._check_call(metadata, log_config)
        assert self._gate is not None  # a legal hold keeps the segment (rsm.policy.enforce)
        self._gate.check_delete(metadata, log_config, self._delete_overlay(metadata.topic_id_partition))
        started = time.monotonic()
        location = self._location(metadata, log_config)
        keys = SegmentKeys.of(location, metadata)
        self._forget(keys)
        if (
            self._notes is not None
        ):  # the topic's other segments there stay findable (rsm.store.location_notes)
            self._notes.deleted(metadata, [location])
        for key in keys.all():
            with self._errors("delete", metadata, keys.bucket, key):
                self.store.delete(keys.bucket, key)
        self._delete_moved(metadata, keys)
        with self._errors("removal of unfinished writes", metadata, keys.bucket, keys.stem):
            remove_segment_leftovers(self.store, keys.bucket, keys.stem)
        elapsed = time.monotonic() - started
        seg = metadata.remote_log_segment_id
        tip = seg.topic_id_partition
        self._metrics.deleted(tip.topic, tip.partition, metadata.segment_size_in_bytes, elapsed)
        log.info(
            "deleted segment topic=%s partition=%d segment=%s offsets=%d..%d bytes=%d time_ms=%d location=%s",
            tip.topic,
            tip.partition,
            seg.id_base64,
            metadata.start_offset,
            metadata.end_offset,
            metadata.segment_size_in_bytes,
            round(elapsed * 1000),
            self.store.describe(keys.bucket, keys.stem),
        )

    def _sweep_leftovers(self, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys) -> None:
        """Remove the segment's unfinished writes at the end of a copy; a failure only warns: the copy's
        outcome stands, and `delete_log_segment_data` (or `rsm migrate gc`) tries again later."""
        try:
            with self._errors("removal of unfinished writes", metadata, keys.bucket, keys.stem):
                remove_segment_leftovers(self.store, keys.bucket, keys.stem)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("%s", exc)

    def _delete_overlay(self, tip: TopicIdPartition) -> Mapping[str, str]:
        """The overlay a deletion's legal-hold check reads. A topic name Kafka refuses (only a forged value
        gets here) can have no overlay: the store refuses its keys just below, naming them."""
        if topic_problem(tip.topic):
            return {}
        return self.topic_overlay(tip)

    def _delete_moved(self, metadata: RemoteLogSegmentMetadata, keys: SegmentKeys) -> None:
        """After the segment's own objects: its objects at every location forwards lead to from there
        (`rsm migrate move`), then the forwards themselves, last, so a delete cut short and retried still
        finds whatever the first attempt left (`rsm.store.forward`)."""
        ref = forward.SegmentRef.of(metadata)
        with self._errors("forward read", metadata, keys.bucket, ref.forward_key(keys.location)):
            hops = forward.chain(self.store, keys.location, ref)
        for location in hops:
            moved = SegmentKeys.of(location, metadata)
            self._forget(moved)
            for key in moved.all():
                with self._errors("delete", metadata, moved.bucket, key):
                    self.store.delete(moved.bucket, key)
        for location in [keys.location, *hops] if hops else []:
            with self._errors("delete", metadata, location.bucket, ref.forward_key(location)):
                self.store.delete(location.bucket, ref.forward_key(location))

    def _forget(self, keys: SegmentKeys) -> None:
        hit = self._manifests.get((keys.bucket, keys.manifest))
        self._manifests.pop((keys.bucket, keys.manifest))
        if hit is not None:
            cache_id = hit[0].cache_id
            self._chunks.discard_where(lambda k: isinstance(k, tuple) and k[0] == cache_id)


class _StoreErrors:
    """``with``: store failures become Kafka's exceptions, naming partition, segment and object.

    A class, not a generator context manager, and the message is built only when something failed: every
    fetch enters one, and both cost more than the rest of opening a cached segment.
    """

    __slots__ = ("_store", "_what", "_metadata", "_bucket", "_key")

    def __init__(
        self, store: ObjectStore, what: str, metadata: RemoteLogSegmentMetadata, bucket: str, key: str
    ) -> None:
        self._store, self._what, self._metadata, self._bucket, self._key = store, what, metadata, bucket, key

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is None or isinstance(exc, RemoteStorageException) or not isinstance(exc, Exception):
            return False
        seg = self._metadata.remote_log_segment_id
        where = (
            f"{self._what} of segment {seg.id_base64} of {seg.topic_id_partition}, "
            f"object {self._store.describe(self._bucket, self._key)}"
        )
        if isinstance(exc, (ObjectNotFound, FileNotFoundError)):
            raise RemoteResourceNotFoundException(f"{where}: not found") from None
        if isinstance(exc, (TransformError, ManifestError)):
            raise RemoteStorageException(f"{where}: {exc}") from None
        # every other storage failure becomes Kafka's exception too
        raise RemoteStorageException(f"{where}: {type(exc).__name__}: {_safe(exc)}") from exc


def _not_a_position(name: str, value: object, metadata: RemoteLogSegmentMetadata) -> InvalidArgumentException:
    return InvalidArgumentException(
        f"{name} must be an int, got {type(value).__name__} (fetch of segment {metadata.remote_log_segment_id})"
    )


def _name(source: object, what: str) -> str:
    return str(source) if isinstance(source, Path) else what


def _fill(f: object, view: memoryview, n: int) -> int:
    """Keep reading until the buffer is full or the file ends (raw reads may return short)."""
    total = len(view)
    while n < total:
        more = f.readinto(view[n:])  # type: ignore[attr-defined]
        if not more:
            break
        n += more
    return n


def _safe(exc: BaseException) -> str:
    """An exception's message without anything that looks like a credential (`rsm.config.redact.redact_text`:
    URLs' user information, signatures, tokens, the configured credentials), cut at anything else that
    might introduce one."""
    text = redact_text(str(exc))
    for marker in ("Signature=", "X-Amz-Credential=", "X-Amz-Security-Token=", "secret", "Authorization"):
        idx = text.find(marker)
        if idx >= 0:
            text = text[:idx] + "[redacted]"
    return text[:500]
