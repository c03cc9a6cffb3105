"""The copy's uploads: the `.log` object chunk by chunk, then the `.indexes` object, each as one streaming
write that is visible only when committed (a failure aborts it: nothing partial is left).

Each `.log` chunk is read again and checked against the CRC-32C the first pass took (a file that changed
refuses the copy), then compressed unless it is mostly already-compressed batches, encrypted when the topic
says so, and uploaded as a part (from a background thread on S3, overlapping the next chunk's work).
"""

from __future__ import annotations

from pathlib import Path

from rsm.api.errors import RemoteStorageException
from rsm.api.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from rsm.config.settings import TopicSettings
from rsm.copy.checks import fill
from rsm.copy.integrity import IntegritySummary
from rsm.store.errors import StoreErrors
from rsm.store.layout import SegmentKeys
from rsm.store.objects import ObjectStore
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import ChunkIndex, IndexEntry
from rsm.stored.pieces import Codec, PieceKind, bind_crc32c, crc32c, piece_tag
from rsm.stored.stages import encode_piece

INDEX_ORDER = list(IndexType)  # piece numbers of indexes in the `.indexes` object
SKIP_COMPRESSION_FRACTION = 0.5  # chunks whose bytes are mostly compressed batches are stored as they are


def upload_log(
    store: ObjectStore,
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
    with StoreErrors(store, "upload", metadata, keys.bucket, keys.log):
        writer = store.open_writer(keys.bucket, keys.log, background=True)
        try:
            with path.open("rb", buffering=0) as f:
                i = 0
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    n = fill(f, view, n)
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


def upload_indexes(
    store: ObjectStore,
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
    with StoreErrors(store, "upload", metadata, keys.bucket, keys.indexes):
        writer = store.open_writer(keys.bucket, keys.indexes)
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
