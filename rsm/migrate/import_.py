"""`rsm migrate import`: tier a broker's partition directory into the store (a retired cluster's disk, a backup).

The directory is Kafka's `<topic>-<partition>/`: `<base offset>.log` segments with their `.index`,
`.timeindex`, `.txnindex`, producer `<offset>.snapshot` files, `leader-epoch-checkpoint` and
`partition.metadata` (`version: 0` / `topic_id: <base64>`). Each segment with records becomes one item,
tiered through the RSM's own `copy_log_segment_data`, so exactly what a broker's copy does happens: the
integrity check of every batch (a corrupt or truncated segment is refused, naming the file and byte), the
topic's record validation policy and its action, the topic's bucket, prefix, encryption, compression and
chunk size (its overlay over the configuration), the location record. Then the Spark reader and `rsm
migrate export` read it like any tiered segment.

What the broker would hand the RSM is rebuilt from the directory alone, never written into it (it may be
read-only):
- topic id from `partition.metadata` (or `--topic-id`; without either, the topic id of the store's topic of
  that name, else a new one, said in one line); topic and partition from the directory's name
  (`<topic>-<partition>`; or `--topic` / `--partition`);
- the segment's end offset and largest timestamp from its batches, read once;
- its leader-epoch chain from `leader-epoch-checkpoint` (epochs in force within the segment, the first
  clamped to the segment's base offset, as the broker trims it); without a checkpoint, from the batches'
  partition leader epochs;
- `.index` and `.timeindex` rebuilt from the log as Kafka's `LogSegment` writes them
  (`segment_format.indexes`): a live broker's active segment has preallocated, zero-filled index files,
  and a backup's may be stale;
- `.txnindex` as found (it needs the producer state of the whole log to rebuild), and the producer snapshot
  `<end offset + 1>.snapshot` when the broker kept it, else an empty one (Kafka keeps only recent snapshots;
  an empty snapshot means "no transaction open at the end of this segment", which is what a reader needs
  except for a segment ending inside a transaction).

With `--engine spark` each task reads its segment file from the same path, so the directory must be
where the executors run (a shared mount); the local engine reads it on this host.

The segment id is derived from the topic id, partition, base offset and size (UUID version 5), so importing
the same directory twice writes the same segments again (the copy is idempotent) and a segment already in
the store under that id, or whose offsets the topic's history in the store already covers, is skipped.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rsm.api.metadata import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    to_uuid,
    uuid_to_base64,
)
from rsm.catalog import PartitionHistory, TopicCatalog
from rsm.manager import RemoteStorageManager
from rsm.migrate.context import Context, ItemResult, Keys, MigrateError
from rsm.migrate.journal import ItemState, crash_point
from rsm.migrate.plan import Plan, PlanItem, topic_settings
from rsm.store.layout import Location
from segment_format.errors import CorruptRecordError
from segment_format.indexes import IndexBuilder
from segment_format.leader_epoch import LeaderEpochCheckpoint
from segment_format.log_entries import iter_batches
from segment_format.producer_snapshot import ProducerSnapshot

log = logging.getLogger(__name__)

SEGMENT_ID_NAMESPACE = uuid.UUID("5b0f6a52-3c1e-4d7e-9a57-6d1a1c6b2f10")


class ImportError_(MigrateError):  # noqa: N801 - `ImportError` is Python's
    """The directory cannot be imported (one line naming the file)."""


@dataclass(frozen=True)
class PartitionDir:
    path: Path
    topic: str
    partition: int
    topic_id: uuid.UUID
    epochs: tuple[tuple[int, int], ...] | None  # the leader-epoch checkpoint, when there is one


def read_partition_dir(
    path: Path,
    topic: str | None,
    partition: int | None,
    topic_id: str | None,
    without_metadata: Callable[[str, Path], str] | None = None,
) -> PartitionDir:
    """The directory's partition; ``without_metadata(topic, path)`` answers the topic id when neither
    ``topic_id`` nor a ``partition.metadata`` gives one (else that is refused)."""
    if not path.is_dir():
        raise ImportError_(f"{path} is not a directory")
    name_topic, _, name_part = path.name.rpartition("-")
    topic = topic or name_topic
    if partition is None:
        if not name_part.isdigit():
            raise ImportError_(f"{path.name} is not named <topic>-<partition>: give --topic and --partition")
        partition = int(name_part)
    meta = path / "partition.metadata"
    if topic_id is None and without_metadata is not None and not meta.exists():
        topic_id = without_metadata(topic, path)
    if topic_id is None:
        try:
            fields = dict(line.split(":", 1) for line in meta.read_text().splitlines() if ":" in line)
            topic_id = fields["topic_id"].strip()
        except (OSError, KeyError):
            raise ImportError_(f"{meta} is missing or names no topic_id: give --topic-id") from None
    try:
        tid = to_uuid(topic_id)
    except ValueError as exc:
        raise ImportError_(f"topic id: {exc}") from None
    epochs = None
    checkpoint = path / "leader-epoch-checkpoint"
    if checkpoint.exists():
        try:
            entries = LeaderEpochCheckpoint.from_bytes(checkpoint.read_bytes(), file=str(checkpoint)).entries
        except CorruptRecordError as exc:
            raise ImportError_(str(exc)) from None
        epochs = tuple((e.epoch, e.start_offset) for e in entries)
    return PartitionDir(path, topic, partition, tid, epochs)


def plan_import(catalog: TopicCatalog, pdir: PartitionDir) -> Plan:
    """One item per segment file with records, not already in the store."""
    tid = pdir.topic_id
    plan = Plan("import", pdir.topic, uuid_to_base64(tid), params={"dir": str(pdir.path.resolve())})
    settings = topic_settings(catalog, pdir.topic, tid)
    destination = Location(settings.bucket, settings.prefix)
    histories = catalog.histories(pdir.topic, tid, [pdir.partition]) if catalog.topic_ids(pdir.topic) else {}
    history = histories.get(pdir.partition)
    stored = {s.segment_id for s in catalog.segments(pdir.topic, tid, [pdir.partition])} if history else set()
    logs = sorted((int(p.stem), p) for p in pdir.path.glob("*.log") if p.stem.isdigit())
    for n, (base, log_path) in enumerate(logs):
        size = log_path.stat().st_size
        if size == 0:
            plan.skipped.append((str(log_path), "empty"))
            continue
        sid = uuid_to_base64(segment_id(tid, pdir.partition, base, size))
        if sid in stored:
            plan.skipped.append((str(log_path), "already imported"))
            continue
        upper = logs[n + 1][0] - 1 if n + 1 < len(logs) else None  # the next segment bounds this one
        end = upper if upper is not None else last_offset_in(log_path)  # what the run will find (`run`)
        if history is not None and upper is not None and _covered(history, base, upper):
            plan.skipped.append((str(log_path), f"offsets {base}..{upper} are already in the store"))
            continue
        plan.items.append(
            PlanItem(
                kind="import", topic=pdir.topic, topic_id=uuid_to_base64(tid), partition=pdir.partition,
                start_offset=base, end_offset=end, segment_id=sid, source=destination, destination=destination,
                bytes=size, key_id=settings.encryption_key_id if settings.encryption_enabled else None, extra={"dir": str(pdir.path.resolve()), "log": log_path.name, "upper": upper,
                                   "epochs": None if pdir.epochs is None else [list(e) for e in pdir.epochs]},
            )
        )  # fmt: skip
    return plan


def last_offset_in(log_path: Path) -> int:
    """The last offset of a segment file's batches (headers only), -1 for none: the plan shows the
    range the run will tier (the file is read once more then)."""
    last = -1
    with log_path.open("rb") as f:
        for _, batch in iter_batches(f, file=str(log_path), strict=False):
            last = batch.last_offset
    return last


def _covered(history: PartitionHistory, first: int, last: int) -> bool:
    """Whether the store's history holds every offset of [first, last] (no gap inside)."""
    if history.first_offset is None or history.next_offset is None:
        return False
    if first < history.first_offset or last >= history.next_offset:
        return False
    return not any(a <= last and first <= b for a, b in history.gaps)


def segment_id(topic_id: uuid.UUID, partition: int, base: int, size: int) -> uuid.UUID:
    return uuid.uuid5(SEGMENT_ID_NAMESPACE, f"{topic_id}/{partition}/{base}/{size}")


_rsms: dict[int, RemoteStorageManager] = {}
_rsms_lock = threading.Lock()


def _rsm(ctx: Context) -> RemoteStorageManager:
    with _rsms_lock:
        rsm = _rsms.get(id(ctx))
        if rsm is None:
            rsm = RemoteStorageManager(store=ctx.store)
            rsm.configure(dict(ctx.spec.configs))
            _rsms[id(ctx)] = rsm
        return rsm


def run(ctx: Context, item: PlanItem, state: ItemState | None) -> ItemResult:
    if state is not None and state.finished:
        return ItemResult(item, state.step, message="finished in an earlier run")
    directory = Path(item.extra["dir"])
    log_path = directory / item.extra["log"]
    base = item.start_offset
    tip = TopicIdPartition(to_uuid(item.topic_id), item.topic, item.partition)
    with tempfile.TemporaryDirectory(prefix="rsm-import-") as tmp:
        work = Path(tmp)
        builder = IndexBuilder(base)
        last, max_ts, batch_epochs = base - 1, -1, {}
        try:
            with log_path.open("rb") as f:
                for _, batch in iter_batches(f, file=str(log_path)):
                    builder.add_batch(batch.last_offset, batch.max_timestamp, batch.size_in_bytes)
                    last, max_ts = batch.last_offset, max(max_ts, batch.max_timestamp)
                    epoch = getattr(batch, "partition_leader_epoch", -1)
                    if epoch >= 0:
                        batch_epochs.setdefault(epoch, batch.base_offset)
        except CorruptRecordError as exc:
            raise ImportError_(f"{exc} (Kafka's recovery would truncate it there; not imported)") from None
        builder.close()
        if last < base:
            ctx.journal.record(item, "skipped", why="no records")
            return ItemResult(item, "skipped", message="no records")
        # Kafka's endOffset: the next segment's base - 1, past the last batch where compaction left a hole
        # (the catalog reads those offsets as compacted away, not as lost); the last segment's
        # last batch. A plan journaled before `upper` was recorded has none
        upper = item.extra.get("upper")
        end = max(last, upper) if isinstance(upper, int) else last
        index, timeindex = work / "index", work / "timeindex"
        index.write_bytes(builder.offset_index.to_bytes())
        timeindex.write_bytes(builder.time_index.to_bytes())
        snapshot = directory / f"{end + 1:020d}.snapshot"
        if not snapshot.exists():
            snapshot = work / "snapshot"
            snapshot.write_bytes(ProducerSnapshot([]).to_bytes())
        txn = log_path.with_suffix(".txnindex")
        chain = segment_epochs(item.extra.get("epochs"), batch_epochs, base, end)
        checkpoint = f"0\n{len(chain)}\n" + "".join(f"{e} {o}\n" for e, o in sorted(chain.items()))
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, to_uuid(item.segment_id)),
            start_offset=base,
            end_offset=end,
            max_timestamp_ms=max_ts,
            broker_id=-1,
            event_timestamp_ms=int(log_path.stat().st_mtime * 1000),
            segment_size_in_bytes=log_path.stat().st_size,
            segment_leader_epochs=chain,
        )
        data = LogSegmentData(log_path, index, timeindex, txn if txn.exists() else None, snapshot,
                              checkpoint.encode())  # fmt: skip
        rsm = _rsm(ctx)
        settings = rsm._state.settings(None, tip)  # noqa: SLF001 - where the copy goes, for the report
        ctx.record_location(item.topic, item.topic_id, Location(settings.bucket, settings.prefix))
        rsm.copy_log_segment_data(metadata, data)
        ctx.on_bytes(metadata.segment_size_in_bytes)
        crash_point(f"imported {item.ident}")
    keys = Keys.at(item.ref, Location(settings.bucket, settings.prefix))
    ctx.journal.record(item, "done", end_offset=end, manifest=ctx.describe(keys.location, keys.manifest))
    return ItemResult(item, "done", metadata.segment_size_in_bytes)


def segment_epochs(
    checkpoint: list[list[int]] | None, batch_epochs: dict[int, int], base: int, last: int
) -> dict[int, int]:
    """The segment's leader-epoch chain: from the checkpoint (epochs in force within [base, last], the first
    clamped to base), else from the batches' own epochs."""
    if not checkpoint:
        return dict(sorted(batch_epochs.items())) or {0: base}
    live = {e: o for e, o in checkpoint if o <= last}
    live = {e: o for e, o in live.items() if not any(e2 > e and o2 <= base for e2, o2 in live.items())}
    return {e: max(o, base) for e, o in sorted(live.items())} or {0: base}
