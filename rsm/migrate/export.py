"""`rsm migrate export`: a tiered partition written back as a Kafka partition directory.

`<out>/<topic>-<partition>/` gets, for each slice of the partition's history in the store
(`rsm.catalog.history`: every offset once, none from a truncated leader-epoch branch):

- `<base offset>.log`: the segment's bytes as Kafka wrote them, decoded chunk by chunk through the RSM's
  read path (`rsm.fetch.SegmentReader`: decryption, decompression, CRC / authentication), at most two
  chunks in memory whatever the segment size;
- `.index` and `.timeindex`: the broker's own, from the segment's `.indexes` object; for a slice that is
  only part of its segment (two copies overlapping after an unclean election), the batches outside the
  slice are left out and the indexes rebuilt as Kafka's `LogSegment` writes them;
- `.txnindex` when the segment has aborted transactions (entries outside a partial slice dropped);
- `<end offset + 1>.snapshot`: the producer snapshot stored with the segment (the state after it);
- `leader-epoch-checkpoint`: the history's lineage (epoch -> first offset), up to the last exported offset;
- `partition.metadata`: `version: 0` and the topic id.

Kafka's own tools read the result (`kafka-dump-log` / `DumpLogSegments` with index verification; the
tests check it with Kafka's classes), and a broker of a cluster where the topic exists with this topic id
can load it as the partition's log.

Journal: an export writes nothing to the store (read-only credentials suffice), so its journal is its
output: every file is written under a temporary name and renamed, the `.log` of a segment last, so a
segment whose `.log` is there with its size is complete and a rerun skips it; `partition.metadata` and the
checkpoint are written last of all.

It never overwrites what it did not write: the target directory must be new, empty, or one an export of the
same topic id and partition made (its `.rsm-export` marker, written first); anything else is refused before
a byte is written, unless `--force` (the files in it are then removed first).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from rsm.api.metadata import IndexType, uuid_to_base64
from rsm.catalog import PartitionHistory, SegmentSlice, TopicCatalog
from rsm.fetch.reader import SegmentReader, cipher_for
from rsm.migrate.context import MigrateError
from segment_format.indexes import build_indexes
from segment_format.log_entries import iter_batches
from segment_format.transaction_index import TransactionIndex


@dataclass
class ExportedSegment:
    base_offset: int
    first_offset: int
    last_offset: int
    size: int
    whole: bool
    skipped: bool = False


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


MARKER = ".rsm-export"


def _marker_text(topic: str, partition: int, topic_id: uuid.UUID) -> str:
    return (
        f"made by rsm migrate export: {topic}-{partition} topic id {uuid_to_base64(topic_id)}; "
        "a rerun of that export resumes here\n"
    )


def check_target(target: Path, topic: str, partition: int, topic_id: uuid.UUID, *, force: bool) -> list[Path]:
    """The files a forced export replaces in ``target`` (none when it is new, empty or this export's own).

    Without ``force`` (``--force``) a target holding files this export did not write is refused, one line
    and nothing written; a subdirectory is never replaced."""
    if target.exists() and not target.is_dir():
        raise MigrateError(f"{target} is a file, not a directory: nothing was written")
    if not target.is_dir():
        return []
    entries = sorted(target.iterdir())
    marker = target / MARKER
    if not entries or (marker.is_file() and marker.read_text() == _marker_text(topic, partition, topic_id)):
        return []
    if not force:
        shown = ", ".join(p.name for p in entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise MigrateError(
            f"{target} is not empty ({shown}) and was not written by this export: nothing was written; "
            "give --dir another directory, or --force to replace its files"
        )
    subdirs = [p for p in entries if p.is_dir() and not p.is_symlink()]
    if subdirs:
        raise MigrateError(
            f"{target} holds a directory ({subdirs[0].name}): not replaced, nothing was written"
        )
    return entries


def claim(target: Path, topic: str, partition: int, topic_id: uuid.UUID, replaced: list[Path]) -> None:
    """Remove what ``--force`` replaces, then mark the target as this export's before writing in it."""
    for p in replaced:
        p.unlink()
    target.mkdir(parents=True, exist_ok=True)
    _write(target / MARKER, _marker_text(topic, partition, topic_id).encode())


def log_bytes(s: SegmentSlice) -> int:
    """The bytes of the slice's segment as Kafka wrote it (its `.log`): the figure the plan, the progress and
    the result count (a slice that is part of its segment writes fewer)."""
    return s.segment.manifest.log.size


def plan_export(catalog: TopicCatalog, topic: str, topic_id: uuid.UUID, partition: int) -> PartitionHistory:
    histories = catalog.histories(topic, topic_id, [partition])
    if partition not in histories:
        raise MigrateError(f"{topic}-{partition} (topic id {uuid_to_base64(topic_id)}) has no tiered data")
    history = histories[partition]
    if history.gaps:
        gaps = ", ".join(f"{a}..{b}" for a, b in history.gaps)
        raise MigrateError(f"{topic}-{partition}: offsets {gaps} are missing from the store; a partition "
                           "directory with holes would not load")  # fmt: skip
    return history


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def export_slice(catalog: TopicCatalog, s: SegmentSlice, out: Path, on_bytes=None) -> ExportedSegment:  # noqa: ANN001
    seg = s.segment
    manifest = seg.manifest
    reader = SegmentReader(catalog.store, seg.bucket, manifest, cipher_for(manifest, _keyring(catalog)))
    whole = s.first_offset <= seg.start_offset and s.last_offset >= seg.last_record_offset
    base = seg.start_offset
    if whole:
        log_path = out / f"{base:020d}.log"
        if log_path.exists() and log_path.stat().st_size == manifest.log.size:
            if on_bytes is not None:
                on_bytes(manifest.log.size)
            return ExportedSegment(base, s.first_offset, s.last_offset, manifest.log.size, True, skipped=True)
        for index_type, suffix in ((IndexType.OFFSET, ".index"), (IndexType.TIMESTAMP, ".timeindex")):
            _write(
                out / f"{base:020d}{suffix}",
                reader.index(index_type) if index_type in manifest.indexes else b"",
            )
        if IndexType.TRANSACTION in manifest.indexes:
            raw = reader.index(IndexType.TRANSACTION)
            if raw:
                _write(out / f"{base:020d}.txnindex", raw)
        _snapshot(reader, manifest, out, seg.end_offset)
        tmp = log_path.with_name(f".{log_path.name}.tmp-{uuid.uuid4().hex[:12]}")
        with tmp.open("wb") as f:
            for i in range(manifest.log.count):
                data = reader.chunk(i)
                f.write(data)
                if on_bytes is not None:
                    on_bytes(len(data))
        os.replace(tmp, log_path)
        return ExportedSegment(base, s.first_offset, s.last_offset, manifest.log.size, True)
    # part of a segment (rare: copies overlapping after an unclean election): the batches holding offsets
    # of the slice, indexes rebuilt; read whole, so memory is the segment's size here
    data = reader.read_range(0, manifest.log.size)
    kept = bytearray()
    first_base = None
    for pos, batch in iter_batches(data):
        if batch.last_offset < s.first_offset or batch.base_offset > s.last_offset:
            continue
        if first_base is None:
            first_base = batch.base_offset
        kept += data[pos : pos + batch.size_in_bytes]
    if first_base is None:
        return ExportedSegment(base, s.first_offset, s.last_offset, 0, False, skipped=True)
    base = first_base
    log_path = out / f"{base:020d}.log"
    index, timeindex = build_indexes(bytes(kept), base)
    _write(out / f"{base:020d}.index", index)
    _write(out / f"{base:020d}.timeindex", timeindex)
    if IndexType.TRANSACTION in manifest.indexes:
        txns = [
            t for t in TransactionIndex.from_bytes(reader.index(IndexType.TRANSACTION))
            if s.first_offset <= t.last_offset <= s.last_offset
        ]  # fmt: skip
        if txns:
            _write(out / f"{base:020d}.txnindex", TransactionIndex(txns).to_bytes())
    _snapshot(reader, manifest, out, s.last_offset)
    _write(log_path, bytes(kept))
    if on_bytes is not None:
        on_bytes(manifest.log.size)
    return ExportedSegment(base, s.first_offset, s.last_offset, len(kept), False)


def _snapshot(reader: SegmentReader, manifest, out: Path, last: int) -> None:  # noqa: ANN001
    if IndexType.PRODUCER_SNAPSHOT in manifest.indexes:
        _write(out / f"{last + 1:020d}.snapshot", reader.index(IndexType.PRODUCER_SNAPSHOT))


def _keyring(catalog: TopicCatalog):  # noqa: ANN202
    from rsm.config.keyring import keyring_for

    return keyring_for(catalog.config)


def finish(out: Path, history: PartitionHistory, topic_id: uuid.UUID, last_offset: int) -> None:
    """The partition's own files, written last: the leader-epoch checkpoint and `partition.metadata`."""
    lineage = [(e, o) for e, o in history.lineage if o <= last_offset]
    _write(out / "leader-epoch-checkpoint",
           (f"0\n{len(lineage)}\n" + "".join(f"{e} {o}\n" for e, o in lineage)).encode())  # fmt: skip
    _write(out / "partition.metadata", f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n".encode())
