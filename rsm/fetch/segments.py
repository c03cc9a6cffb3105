"""The fetch path: a segment's bytes or one of its indexes, from its manifest and stored chunks.

A fetch finds the segment's keys (from its custom metadata, remembered per metadata object), its manifest
(cached; when gone, the forwards `rsm migrate move` left are followed to where it went), and a reader over
its chunks (one per plain manifest; an encrypted one unwraps its data key on every fetch, so a key taken
out of the keyring stops decrypting at once). The stream reads chunks lazily, prefetching on the fetch
threads, and counts itself when it closes (`rsm.metrics`). A failure mid-stream forgets the cached
manifest, so the next fetch reads the store afresh.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, BinaryIO, Protocol

from rsm.api.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.api.metadata import IndexType, RemoteLogSegmentMetadata
from rsm.fetch.reader import SegmentReader, cipher_for
from rsm.store import forward
from rsm.store.errors import StoreErrors
from rsm.store.layout import Location, SegmentKeys
from rsm.stored import custom_metadata as cm
from rsm.stored.forward import SegmentRef
from rsm.stored.manifest import Manifest, require_authenticated

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from rsm.broker_settings import RsmSettings
    from rsm.fetch.cache import ByteLRU, IdentityMemo
    from rsm.fetch.reader import ChunkAllocator
    from rsm.metrics import RsmMetrics
    from rsm.services import RsmServices


class FetchState(Protocol):
    """What the fetch path uses of the manager's state: the configured settings and services, and the caches,
    memos and threads that outlive a reconfiguration. `rsm.state.RsmState` has all of it; it is named here,
    not imported, because the state holds this package's readers and caches (the import would be a circle)."""

    metrics: RsmMetrics
    manifests: ByteLRU[tuple[Manifest, int]]
    chunks: ByteLRU[bytes]
    allocate: ChunkAllocator | None
    keys: IdentityMemo[RemoteLogSegmentMetadata, SegmentKeys]
    readers: IdentityMemo[Manifest, SegmentReader]
    executor: ThreadPoolExecutor | None

    def configured(self) -> tuple[RsmSettings, RsmServices]: ...

    def location(
        self, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
    ) -> Location: ...

    def forget(self, keys: SegmentKeys) -> None: ...


def fetch_log_segment(
    state: FetchState,
    metadata: RemoteLogSegmentMetadata,
    start_position: int,
    end_position: int | None,
    log_config: Mapping[str, str] | None,
) -> BinaryIO:
    """A stream of the segment's bytes [start_position, end_position] (inclusive), fetched lazily."""
    if start_position < 0 or (end_position is not None and end_position < start_position):
        raise RemoteStorageException(
            f"invalid position range {start_position}..{end_position} for segment {metadata.remote_log_segment_id}"
        )
    # failures of the segment are counted here and in on_error (rsm.metrics), not by a wrapper: this
    # runs once per Kafka fetch, and a wrapper's frame cost more than the counting
    broker, services = state.configured()
    recorder = state.metrics
    try:
        reader, keys = _reader_of(state, broker, services, metadata, log_config)
    except Exception as exc:
        count_fetch_failure(recorder, metadata, exc)
        raise
    if start_position > reader.size or (start_position == reader.size and reader.size > 0):
        count_fetch_failure(recorder, metadata, None)
        raise RemoteStorageException(
            f"start position {start_position} is beyond the {reader.size}-byte segment "
            f"{metadata.remote_log_segment_id} ({services.store.describe(keys.bucket, keys.log)})"
        )

    def on_error(exc: BaseException) -> BaseException:
        # the cached manifest may describe a copy another process has since replaced or deleted:
        # forget it so the next fetch reads the store afresh
        state.forget(keys)
        try:
            with StoreErrors(services.store, "fetch", metadata, keys.bucket, keys.log):
                raise exc
        except RemoteStorageException as mapped:
            count_fetch_failure(recorder, metadata, mapped)  # by the kind Kafka sees
            return mapped
        return exc  # pragma: no cover - _errors always maps

    # the stream counts itself when it closes (reader.stats): nothing more to do per fetch here
    prefetch = broker.prefetch_chunks
    return reader.stream(start_position, end_position, state.executor, prefetch, on_error)  # type: ignore[return-value]


def count_fetch_failure(
    recorder: RsmMetrics, metadata: RemoteLogSegmentMetadata, exc: BaseException | None
) -> None:
    tip = metadata.remote_log_segment_id.topic_id_partition
    recorder.failed("fetch", tip.topic, tip.partition, exc or RemoteStorageException("position"))


def fetch_index(
    state: FetchState,
    metadata: RemoteLogSegmentMetadata,
    index_type: IndexType,
    log_config: Mapping[str, str] | None,
) -> BinaryIO:
    """A stream of one index file as the broker had it; missing optional index -> not found."""
    broker, services = state.configured()
    reader, keys = _reader_of(state, broker, services, metadata, log_config)
    if index_type not in reader.manifest.indexes:
        raise RemoteResourceNotFoundException(
            f"segment {metadata.remote_log_segment_id.id_base64} of {metadata.topic_id_partition} has no "
            f"{index_type.name} index ({services.store.describe(keys.bucket, keys.indexes)})"
        )
    with StoreErrors(services.store, f"{index_type.name} index fetch", metadata, keys.bucket, keys.indexes):
        data = reader.index(index_type)
    tip = metadata.remote_log_segment_id.topic_id_partition
    state.metrics.index_fetched(tip.topic, tip.partition)
    return io.BytesIO(data)


def reader_of(
    state: FetchState, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
) -> tuple[SegmentReader, SegmentKeys]:
    """The segment's reader and the keys it reads (where forwards led, if they did)."""
    return _reader_of(state, *state.configured(), metadata, log_config)


def _reader_of(
    state: FetchState,
    broker: RsmSettings,
    services: RsmServices,
    metadata: RemoteLogSegmentMetadata,
    log_config: Mapping[str, str] | None,
) -> tuple[SegmentReader, SegmentKeys]:
    keys = keys_of(state, metadata, log_config)
    manifest, keys = manifest_or_moved(state, broker, services, metadata, keys)
    # plain segments: one reader per manifest (it holds no state of a fetch); encrypted ones unwrap their
    # data key on every fetch, so a key taken out of the keyring stops decrypting at once
    plain = manifest.encryption is None
    if plain:
        hit = state.readers.get(manifest)
        if hit is not None:
            return hit, keys
    try:
        with StoreErrors(services.store, "decryption setup", metadata, keys.bucket, keys.manifest):
            cipher = cipher_for(manifest, services.keyring)  # checks the manifest's seal
    except RemoteStorageException:
        state.forget(keys)  # a manifest refused now may be rewritten by a retried copy: reread it
        raise
    reader = SegmentReader(
        services.store, keys.bucket, manifest, cipher, state.chunks, state.allocate, state.metrics
    )
    if plain:
        state.readers.put(manifest, reader)
    return reader, keys


def keys_of(
    state: FetchState, metadata: RemoteLogSegmentMetadata, log_config: Mapping[str, str] | None
) -> SegmentKeys:
    """The segment's object keys; remembered per metadata object when its custom metadata says where
    it lives (the bridge hands the same object for every fetch of a segment, and so does Kafka)."""
    custom = metadata.custom_metadata
    if custom is None or not custom.value:
        return SegmentKeys.of(state.location(metadata, log_config), metadata)  # today's configuration
    keys = state.keys.get(metadata)
    if keys is None:
        keys = SegmentKeys.of(cm.decode(custom), metadata)
        state.keys.put(metadata, keys)
    return keys


def manifest_or_moved(
    state: FetchState,
    broker: RsmSettings,
    services: RsmServices,
    metadata: RemoteLogSegmentMetadata,
    keys: SegmentKeys,
) -> tuple[Manifest, SegmentKeys]:
    """`_manifest`, or, when the manifest is gone, the one where `rsm migrate move` took the segment:
    its forwards (`rsm.store.forward`) are followed to the first location holding its manifest."""
    try:
        return manifest_of(state, broker, services, metadata, keys), keys
    except RemoteResourceNotFoundException as not_here:
        ref = SegmentRef.of(metadata)
        with StoreErrors(
            services.store, "forward read", metadata, keys.bucket, ref.forward_key(keys.location)
        ):
            hops = forward.chain(services.store, keys.location, ref)
        for location in hops:
            moved = SegmentKeys.of(location, metadata)
            try:
                manifest = manifest_of(state, broker, services, metadata, moved)
            except RemoteResourceNotFoundException:
                continue
            if metadata.custom_metadata is not None and metadata.custom_metadata.value:
                state.keys.put(metadata, moved)  # later fetches with this metadata go straight there
            return manifest, moved
        raise not_here


def manifest_of(
    state: FetchState,
    broker: RsmSettings,
    services: RsmServices,
    metadata: RemoteLogSegmentMetadata,
    keys: SegmentKeys,
) -> Manifest:
    """The segment's manifest at `keys`, from the manifest cache (`state.manifests`) or the store."""
    cache_key = (keys.bucket, keys.manifest)
    hit = state.manifests.get(cache_key)
    if hit is not None:
        return hit[0]
    store = services.store
    with StoreErrors(store, "manifest read", metadata, keys.bucket, keys.manifest):
        raw = store.get(keys.bucket, keys.manifest)
        manifest = Manifest.from_bytes(raw, store.describe(keys.bucket, keys.manifest))
        if broker.require_authenticated:
            require_authenticated(manifest)
    if manifest.segment.segment_id != metadata.remote_log_segment_id.id_base64:
        raise RemoteStorageException(
            f"manifest {store.describe(keys.bucket, keys.manifest)} belongs to segment "
            f"{manifest.segment.segment_id}, not {metadata.remote_log_segment_id.id_base64}"
        )
    state.manifests.put(cache_key, (manifest, len(raw)))
    # a location other than the default: in the current record (off-path)
    services.notes.fetched(metadata, keys.location)
    return manifest
