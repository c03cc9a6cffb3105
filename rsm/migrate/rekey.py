"""`rsm migrate rekey`: data keys re-wrapped under another key id, or data re-encrypted, or decrypted.

Re-wrap (the default). Each encrypted copy's manifest is rewritten in place by `rsm.stored.rekey.rekey_manifest`:
its data key unwrapped with the keyring key it names, wrapped under the new key id, the manifest sealed
again (and upgraded to version 2). One GET and one PUT per segment, whatever its size; the pieces are not
touched. Readers see the old or the new manifest, both of which decrypt the same pieces. Journal: the item
is recorded `done` after its PUT (a killed run re-wraps it again, harmlessly). Once every segment is
re-wrapped, `rsm migrate verify` reports none under the old key id, and it can leave the keyring.

Re-encrypt (`--reencrypt`, or `--encryption on|off`). The pieces are rewritten under a fresh data key
(wrapped under the new key id), or stored plain with CRC-32Cs. Kafka's custom metadata and the catalog
name a segment by its location, and a segment's keys are fixed by its location and id, so the new pieces
cannot be written beside the old ones: the copy is re-encrypted into a staging location of the same bucket
(`_rsm-staging/<12 hex>/`, `rsm.migrate.plan.staging_location`) by a move with a transform (phase `a:`),
then moved back by a plain move (phase `b:`, a server-side copy on S3), both exactly as `rsm.migrate.move`
describes: the segment is readable at every moment, through the original location's forward to the
staging copy while the original is rewritten. Last, the staging location's forward is removed (nobody's
metadata names the staging location) and the item recorded `done`.

The transform streams one chunk at a time: each stored piece is decrypted with the old data key (its GCM
tag checked) and encrypted under the new one; pieces are decompressed only when the plain bytes are needed
(a plain source's CRC-32C is checked, a plain target's computed), so re-encrypting an encrypted copy costs
AES-GCM only, and memory stays at a chunk or two plus the upload part whatever the segment size. The new
manifest (with the new wrapped key) is kept in the journal item until it is committed, so a killed run
commits the pieces it wrote, never pieces under a lost key.

Finished re-encryptions cannot be told from the store (a fresh key looks like any key), so the job's
journal is sticky (`rsm.migrate.journal`): running the same command again re-encrypts nothing;
`--new-run` starts over.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from rsm.migrate.context import Context, ItemResult, Keys, MigrateError
from rsm.migrate.journal import ItemState, crash_point
from rsm.migrate.move import Phase, move_segment
from rsm.migrate.plan import PlanItem
from rsm.store.forward import read_forward
from rsm.stored.cipher import SegmentCipher
from rsm.stored.manifest import INDEX_NUMBERS, ChunkIndex, Encryption, IndexEntry, Manifest
from rsm.stored.pieces import Codec, PieceKind, bind_crc32c, crc32c, piece_tag
from rsm.stored.rekey import rekey_manifest
from rsm.stored.stages import decode_piece


# -- re-wrap --------------------------------------------------------------------------------------------------
def run_rekey(ctx: Context, item: PlanItem, state: ItemState | None) -> ItemResult:
    if state is not None and state.finished:
        return ItemResult(item, state.step, message="finished in an earlier run")
    target = str(item.extra["to_key_id"])
    keys = Keys.at(item.ref, item.source)
    raw = ctx.get(keys.location, keys.manifest)
    if raw is None:
        ctx.journal.record(item, "vanished")
        return ItemResult(item, "vanished", message="its manifest is gone (deleted or moved meanwhile)")
    where = ctx.describe(keys.location, keys.manifest)
    manifest = Manifest.from_bytes(raw, where)
    if manifest.encryption is None:
        ctx.journal.record(item, "skipped")
        return ItemResult(item, "skipped", message="not encrypted")
    if manifest.encryption.key_id == target and manifest.version >= 2:
        ctx.journal.record(item, "done")
        return ItemResult(item, "done", message=f"already under {target}")
    if ctx.keyring is None or target not in ctx.keyring:
        raise MigrateError(f"key id {target!r} is not in the keyring (encryption.keyring.path)")
    new_raw = rekey_manifest(raw, where, ctx.keyring, key_id=target)
    ctx.manifest(new_raw, keys.location, keys.manifest)  # parses and its seal checks
    ctx.store.put(keys.location.bucket, keys.manifest, new_raw)
    crash_point(f"rekeyed {item.ident}")
    ctx.journal.record(item, "done", from_key_id=manifest.encryption.key_id)
    crash_point(f"rekey recorded {item.ident}")
    return ItemResult(item, "done", len(new_raw))


# -- re-encrypt -----------------------------------------------------------------------------------------------
def run_reencrypt(ctx: Context, item: PlanItem, state: ItemState | None) -> ItemResult:
    if state is not None and state.finished:
        return ItemResult(item, state.step, message="finished in an earlier run")
    assert item.destination is not None
    target = item.extra.get("to_key_id")
    if target is not None and (ctx.keyring is None or target not in ctx.keyring):
        raise MigrateError(f"key id {target!r} is not in the keyring (encryption.keyring.path)")
    step = "planned" if state is None else state.step
    detail: dict[str, Any] = {} if state is None else dict(state.detail)
    moved = 0

    def record(step: str, **extra: Any) -> None:
        ctx.journal.record(item, step, **extra)

    if not step.startswith(("b:", "staging")):
        phase = Phase(item.source, item.destination, step, detail, "a:", _reencoder(target))
        status, n = move_segment(ctx, item, phase, record)
        moved += n
        if status != "done":
            return ItemResult(item, status, moved)
        step, detail = "b:planned", {"origin": detail.get("origin")}
    if step.startswith("b:"):
        phase = Phase(item.destination, item.source, step, detail, "b:")
        status, n = move_segment(ctx, item, phase, record)
        moved += n
        if status != "done":
            return ItemResult(item, status, moved)
    # the staging location's forward: nobody's metadata names it
    staging = Keys.at(item.ref, item.destination)
    if read_forward(ctx.store, item.destination, item.ref) is not None:
        ctx.store.delete(staging.location.bucket, staging.forward)
    crash_point(f"staging forward removed {item.ident}")
    record("done", to_key_id=target)
    return ItemResult(item, "done", moved)


def _reencoder(target: str | None):  # noqa: ANN202 - a Transform (rsm.migrate.move)
    def transform(ctx: Context, manifest: Manifest, src: Keys, dst: Keys) -> tuple[bytes, int]:
        return reencode(ctx, manifest, src, dst, target)

    return transform


def reencode(ctx: Context, manifest: Manifest, src: Keys, dst: Keys, target: str | None) -> tuple[bytes, int]:
    """Stream a copy's pieces to `dst` under a fresh data key wrapped by `target` (None: plain); returns
    the new manifest (sealed, naming `dst`) and the bytes written."""
    from rsm.fetch.reader import cipher_for

    old = cipher_for(manifest, ctx.keyring)
    uid = manifest.segment_uuid
    if target is not None:
        assert ctx.keyring is not None
        data_key, wrapped = ctx.keyring.new_data_key(target, uid.bytes)
        new: SegmentCipher | None = SegmentCipher(data_key, uid)
        encryption: Encryption | None = Encryption(target, wrapped)
    else:
        new, encryption = None, None
    store = ctx.store
    written = 0

    def piece(
        stored: bytes, kind: PieceKind, number: int, codec: Codec, size: int, crc: int | None
    ) -> tuple[bytes, int | None]:
        payload = old.decrypt(kind, number, stored) if old is not None else stored
        new_crc = None
        if (
            old is None or new is None
        ):  # the plain bytes are needed: check the source's CRC, make the target's
            tag = manifest.piece_tag(kind, number) if crc is not None else None
            plain = decode_piece(payload, kind=kind, number=number, codec=codec, size=size, cipher=None,
                                 crc=crc, tag=tag)  # fmt: skip
            if new is None:
                new_crc = bind_crc32c(crc32c(plain), piece_tag(uid, kind, number))
        out = new.encrypt(kind, number, payload) if new is not None else bytes(payload)
        return out, new_crc

    index = manifest.log
    sizes: list[int] = []
    crcs: list[int | None] = []
    writer = store.open_writer(dst.location.bucket, dst.log, background=True)
    try:
        for i in range(index.count):
            lo, hi = index.stored_span(i)
            start, end = index.original_span(i)
            stored = store.get_range(src.location.bucket, src.log, lo, hi)
            out, crc = piece(stored, PieceKind.LOG, i, index.codecs[i], end - start,
                             None if index.crc32c is None else index.crc32c[i])  # fmt: skip
            writer.write(out)
            sizes.append(len(out))
            crcs.append(crc)
            written += len(out)
            ctx.on_bytes(len(out))
    except BaseException:
        writer.abort()
        raise
    writer.commit()
    crash_point(f"reencoded {dst.log}")
    entries: dict[Any, IndexEntry] = {}
    writer = store.open_writer(dst.location.bucket, dst.indexes)
    try:
        offset = 0
        for index_type, entry in sorted(manifest.indexes.items(), key=lambda kv: kv[1].offset):
            stored = store.get_range(
                src.location.bucket, src.indexes, entry.offset, entry.offset + entry.stored_size
            )
            out, crc = piece(stored, PieceKind.INDEX, INDEX_NUMBERS[index_type], entry.codec, entry.size,
                             entry.crc32c)  # fmt: skip
            writer.write(out)
            entries[index_type] = IndexEntry(offset, len(out), entry.size, entry.codec, crc)
            offset += len(out)
            written += len(out)
    except BaseException:
        writer.abort()
        raise
    writer.commit()
    crash_point(f"reencoded {dst.indexes}")
    seg = manifest.segment
    location = {
        "bucket": dst.location.bucket,
        "prefix": dst.location.prefix,
        "log": dst.log,
        "indexes": dst.indexes,
    }
    rewritten = dataclasses.replace(
        manifest,
        version=2,
        copy_id=uuid.uuid4().hex,
        location=location,
        encryption=encryption,
        log=ChunkIndex(
            index.size,
            index.chunk_size,
            tuple(sizes),
            index.codecs,
            None if new is not None else tuple(c or 0 for c in crcs),
        ),  # fmt: skip
        indexes={t: entries[t] for t in manifest.indexes},
        seal=None,
        signed=b"",
    )
    assert seg.segment_id == rewritten.segment.segment_id
    return rewritten.to_bytes(new), written
