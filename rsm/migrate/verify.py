"""`rsm migrate verify`: every committed segment checked against its manifest; orphans and key ids reported.

Per segment copy (one item each, from the catalog), without `--deep`:
- the manifest parses (version, consistency, location check) and its seal checks: for an encrypted copy
  that needs its data key, so a key id missing from the keyring is reported as `unknown-key` (and the
  copy's pieces cannot be checked further);
- its `.log` and `.indexes` objects exist with exactly the sizes the manifest records (`missing`,
  `corrupt`);
- every piece is read and checked as stored: an encrypted piece's AES-GCM authentication tag (decrypting it
  is how GCM checks it), a plain piece's CRC-32C (decompressing a zstd piece, since the CRC is of the
  original bytes).

With `--deep`, also every piece decoded to its original bytes, and:
- the log's batches, in order, through `segment_format`'s `SegmentVerifier` (every batch's CRC, lengths,
  offsets increasing inside the segment's range, which may end past the last batch: a compacted tail;
  every magic-2 batch's leader epoch one of the segment's, the copy's own rule), the count and last offset
  compared with the manifest's `integrity`;
- the indexes parsed (offset and time index, transaction index, producer snapshot with its CRC, leader-epoch
  checkpoint), each offset-index entry pointing at the start of a batch holding its offset, each time-index
  entry naming an offset of the segment.

Also reported, from the catalog rather than per segment, when verify is planned (`rsm.migrate.findings`):
the holes of each verified partition's history and every location the topic's record or overlay names
that cannot be read: a verify that saw fewer segments than the topic has must not call the topic sound.

A manifest the plan's listing cannot read, or that names another segment than its key, is one `corrupt`
problem of the run (naming the object and what is wrong); the other segments are verified all the same.

Also reported: `retiring` for copies still under a key id given with `--retire` (so it can leave the
keyring), and orphans (`rsm.migrate.gc`) of the verified topic's locations, those younger than the grace
period as `recent` (possibly in flight), which do not fail the run. Each item's outcome is recorded in the
journal; a killed run resumes with the segments not yet verified.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from rsm.api.errors import RemoteStorageException
from rsm.api.metadata import IndexType
from rsm.fetch.prefetch import prefetched
from rsm.fetch.reader import cipher_for
from rsm.migrate.context import Context, ItemResult, Keys, indexes_size
from rsm.migrate.journal import ItemState, crash_point
from rsm.migrate.plan import PlanItem
from rsm.store.objects import ObjectNotFound
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import INDEX_NUMBERS, Manifest, ManifestError
from rsm.stored.pieces import Codec, PieceKind, TransformError, check_piece
from rsm.stored.stages import decode_piece
from segment_format.errors import CorruptRecordError
from segment_format.leader_epoch import LeaderEpochCheckpoint
from segment_format.offset_index import OffsetIndex
from segment_format.producer_snapshot import ProducerSnapshot
from segment_format.segment import SegmentVerifier
from segment_format.time_index import TimeIndex
from segment_format.transaction_index import TransactionIndex

READ_GROUP_BYTES = 16 << 20  # chunks fetched per request when they are small


def problem(kind: str, obj: str, detail: str) -> dict[str, Any]:
    return {"kind": kind, "object": obj, "detail": detail}


def run(ctx: Context, item: PlanItem, state: ItemState | None) -> ItemResult:
    if state is not None and state.finished:
        return ItemResult(
            item, "done", int(state.detail.get("bytes", 0)), problems=list(state.detail.get("problems", []))
        )
    deep = bool(item.extra.get("deep"))
    retiring = set(item.extra.get("retire", ()))
    keys = Keys.at(item.ref, item.source)
    where = ctx.describe(keys.location, keys.manifest)
    problems: list[dict[str, Any]] = []
    checked = 0
    raw = ctx.get(keys.location, keys.manifest)
    if raw is None:
        ctx.journal.record(item, "vanished")
        return ItemResult(item, "vanished", message="deleted since it was planned")
    try:
        manifest = Manifest.from_bytes(raw, where)
    except ManifestError as exc:
        problems.append(problem("corrupt", where, str(exc)))
        manifest = None
    cipher: SegmentCipher | None = None
    usable = manifest is not None
    if manifest is not None and manifest.encryption is not None:
        key_id = manifest.encryption.key_id
        if key_id in retiring:
            problems.append(
                problem("retiring", where, f"still under key id {key_id!r}, which is being retired")
            )
        if ctx.keyring is None or key_id not in ctx.keyring:
            problems.append(
                problem("unknown-key", where, f"encrypted under key id {key_id!r}, not in the keyring")
            )
            usable = False
        else:
            try:
                cipher = cipher_for(manifest, ctx.keyring)
            except (ManifestError, RemoteStorageException) as exc:
                problems.append(problem("corrupt", where, str(exc)))
                usable = False
    if manifest is not None:
        sizes_ok = _sizes(ctx, manifest, keys, problems)
        if usable and sizes_ok:
            checked = _pieces(ctx, manifest, keys, cipher, deep, problems)
    ctx.journal.record(item, "done", problems=problems, bytes=checked)
    crash_point(f"verified {item.ident}")
    return ItemResult(item, "done", checked, problems=problems)


def _sizes(ctx: Context, manifest: Manifest, keys: Keys, problems: list[dict[str, Any]]) -> bool:
    ok = True
    for key, expected in ((keys.log, manifest.log.stored_size), (keys.indexes, indexes_size(manifest))):
        size = ctx.size(keys.location, key)
        obj = ctx.describe(keys.location, key)
        if size is None:
            problems.append(problem("missing", obj, "the manifest names it; it is not in the store"))
            ok = False
        elif size != expected:
            problems.append(problem("corrupt", obj, f"{size} bytes, the manifest records {expected}"))
            ok = False
    return ok


def _stored_chunks(ctx: Context, manifest: Manifest, keys: Keys) -> Iterator[tuple[int, memoryview]]:
    """(chunk number, stored bytes) in order; requests group small chunks, the next one in flight."""
    index = manifest.log
    groups: list[tuple[int, int]] = []  # (first chunk, last chunk + 1)
    i = 0
    while i < index.count:
        j = i + 1
        while j < index.count and index.offsets[j + 1] - index.offsets[i] <= READ_GROUP_BYTES:
            j += 1
        groups.append((i, j))
        i = j
    bucket = keys.location.bucket

    def fetch(group: tuple[int, int]) -> bytes:
        a, b = group
        return ctx.store.get_range(bucket, keys.log, index.offsets[a], index.offsets[b])

    for (a, b), stored in zip(groups, prefetched(fetch, groups, "rsm-verify"), strict=True):
        data = memoryview(stored)
        base = index.offsets[a]
        for c in range(a, b):
            yield c, data[index.offsets[c] - base : index.offsets[c + 1] - base]


def _pieces(
    ctx: Context,
    manifest: Manifest,
    keys: Keys,
    cipher: SegmentCipher | None,
    deep: bool,
    problems: list[dict[str, Any]],
) -> int:
    """Check every piece (and with `deep` the decoded log and indexes); returns the stored bytes read."""
    log_obj = ctx.describe(keys.location, keys.log)
    index = manifest.log
    seg = manifest.segment
    verifier = _IndexedVerifier(
        file=log_obj, expected_start_offset=seg.start_offset, expected_end_offset=seg.end_offset,
        exact_end_offset=False, total_size=index.size,
        leader_epochs=[int(e) for e in seg.segment_leader_epochs],  # the copy's rule (rsm.validation)
    ) if deep else None  # fmt: skip
    read = 0
    try:
        for i, stored in _stored_chunks(ctx, manifest, keys):
            read += len(stored)
            start, end = index.original_span(i)
            crc = None if index.crc32c is None else index.crc32c[i]
            tag = manifest.piece_tag(PieceKind.LOG, i) if crc is not None else None
            try:
                if verifier is None and cipher is not None:
                    cipher.decrypt(PieceKind.LOG, i, stored)  # its GCM tag
                elif verifier is None and index.codecs[i] is Codec.NONE:
                    check_piece(stored, kind=PieceKind.LOG, number=i, size=end - start, crc=crc, tag=tag)
                else:
                    plain = decode_piece(stored, kind=PieceKind.LOG, number=i, codec=index.codecs[i],
                                         size=end - start, cipher=cipher, crc=crc, tag=tag)  # fmt: skip
                    if verifier is not None:
                        verifier.update(plain)
            except TransformError as exc:
                problems.append(problem("corrupt", log_obj, f"chunk {i} (bytes {start}..{end}): {exc}"))
                verifier = None  # the batches after a bad chunk cannot be followed
            ctx.on_bytes(len(stored))
    except ObjectNotFound:
        problems.append(problem("missing", log_obj, "deleted while being verified"))
        return read
    summary = None
    if verifier is not None:
        try:
            summary = verifier.finish()
        except CorruptRecordError as exc:
            problems.append(problem("corrupt", log_obj, f"batch check: {exc}"))
        else:
            last = manifest.integrity.get("last_offset")
            batches = manifest.integrity.get("batches")
            if batches is not None and summary.batch_count != batches:
                problems.append(
                    problem(
                        "corrupt", log_obj, f"{summary.batch_count} batches, the manifest records {batches}"
                    )
                )
            if last is not None and last >= 0 and summary.last_offset != last:
                problems.append(
                    problem(
                        "corrupt", log_obj, f"last offset {summary.last_offset}, the manifest records {last}"
                    )
                )
    read += _indexes(ctx, manifest, keys, cipher, deep, verifier if summary is not None else None, problems)
    return read


def _indexes(
    ctx: Context,
    manifest: Manifest,
    keys: Keys,
    cipher: SegmentCipher | None,
    deep: bool,
    verifier: _IndexedVerifier | None,
    problems: list[dict[str, Any]],
) -> int:
    obj = ctx.describe(keys.location, keys.indexes)
    size = indexes_size(manifest)
    try:
        data = ctx.store.get_range(keys.location.bucket, keys.indexes, 0, size) if size else b""
    except ObjectNotFound:
        problems.append(problem("missing", obj, "deleted while being verified"))
        return 0
    seg = manifest.segment
    for index_type, entry in manifest.indexes.items():
        number = INDEX_NUMBERS[index_type]
        tag = manifest.piece_tag(PieceKind.INDEX, number) if entry.crc32c is not None else None
        try:
            raw = decode_piece(data[entry.offset : entry.offset + entry.stored_size], kind=PieceKind.INDEX,
                               number=number, codec=entry.codec, size=entry.size, cipher=cipher,
                               crc=entry.crc32c, tag=tag)  # fmt: skip
        except TransformError as exc:
            problems.append(problem("corrupt", obj, f"{index_type.name} index: {exc}"))
            continue
        if not deep:
            continue
        name = f"{index_type.name} index of {obj}"
        try:
            if index_type is IndexType.OFFSET:
                entries = OffsetIndex.from_bytes(bytes(raw), seg.start_offset, file=name).entries
                if verifier is not None:
                    for e in entries:
                        span = verifier.batch_at(e.position)
                        if span is None or not span[0] <= e.offset <= span[1]:
                            raise CorruptRecordError(
                                f"entry ({e.offset}, {e.position}) does not point at the batch holding offset {e.offset}",
                                file=name,
                            )
            elif index_type is IndexType.TIMESTAMP:
                for e in TimeIndex.from_bytes(bytes(raw), seg.start_offset, file=name).entries:
                    if not seg.start_offset <= e.offset <= seg.end_offset:
                        raise CorruptRecordError(
                            f"entry ({e.timestamp}, {e.offset}) names an offset outside the segment",
                            file=name,
                        )
            elif index_type is IndexType.TRANSACTION:
                list(TransactionIndex.from_bytes(bytes(raw), file=name))
            elif index_type is IndexType.PRODUCER_SNAPSHOT:
                ProducerSnapshot.from_bytes(bytes(raw), file=name)
            elif index_type is IndexType.LEADER_EPOCH:
                LeaderEpochCheckpoint.from_bytes(bytes(raw), file=name)
        except (CorruptRecordError, ValueError) as exc:
            problems.append(problem("corrupt", obj, f"{index_type.name} index: {exc}"))
    return len(data)


class _IndexedVerifier(SegmentVerifier):
    """The segment verifier, remembering where each batch starts and which offsets it holds."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.positions: list[int] = []
        self.spans: list[tuple[int, int]] = []

    def _check(self, batch: Any) -> None:
        super()._check(batch)
        self.positions.append(batch.position)
        self.spans.append((batch.base_offset, batch.last_offset))

    def batch_at(self, position: int) -> tuple[int, int] | None:
        i = bisect.bisect_left(self.positions, position)
        if i < len(self.positions) and self.positions[i] == position:
            return self.spans[i]
        return None
