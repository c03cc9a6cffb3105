"""`rsm migrate move --from-config SOURCE.properties`: a topic's segments from one backend to another.

Why a module of its own: `rsm.migrate.move` relocates a segment within one store and retires the source
copy behind a forward, so brokers on that store keep reading. Across backends the situation differs: the
brokers will be reconfigured from the source store (file, S3, GCS, Azure) to the destination store, and
until they are, they read the source store only. Nothing in it is written, and nothing deleted unless
`--prune` asks (`rsm.migrate.cross_prune`, which says why it cannot be the default). What must hold is
that a broker switched to the destination fetches every old segment through the remote log metadata
Kafka already keeps, whose custom metadata names the location (bucket, prefix) each segment was written
to in the *source* store.

The topic's overlay and its name's pending overlay go first (`rsm.migrate.cross_overlay`): the new
store's brokers tier the topic with its own settings, and the destination below follows them.

The job's items are one per segment (one committed copy chosen when the source holds several, say after an
interrupted move there), planned from the source's catalog (`rsm.catalog.TopicCatalog`), so every location
of the topic is searched. Each item, in the destination store (D: the topic's configured location there, or
`--to-bucket` / `--to-prefix`), in this order:

1. `copied`: D is recorded in the destination's location record (`rsm.store.locations`), so its catalog, the
   Spark reader and `rsm migrate verify` find the copies; the `.log` and `.indexes` objects are streamed
   from the source store into the destination store's writer, one part (the destination's part size) at a
   time (bounded memory, nothing visible until the writer commits), and their sizes are checked against
   the manifest.
2. `committed`: the source manifest rewritten to name D's keys and sealed again (`rsm.stored.rekey.
   rekey_manifest`, with the destination's keyring: it must hold the topic's key ids) is written at D, then
   read back and checked (parse, seal, object sizes).
3. `done` (without `--prune`): a forward (`rsm.store.forward`) naming D is written in the destination store
   at every location Kafka's metadata may name for the segment (the copy's source location and every
   location holding a forward of it in the source store), unless that location is D itself. A broker on
   the destination store reading through the old custom metadata finds no manifest there and follows the
   forward to D. Without `--prune` the item ends here.
4. `verified` (`--prune`): the forwards as in 3, then D's copy is found to be the source's, byte for byte
   (`rsm.migrate.cross_prune`).
5. `done` (`--prune`): the segment's objects in the source store are deleted (its copies, manifests first,
   then the forwards an earlier move there left); D and its forwards stay.

Every step is idempotent (the copy is written whole, the manifest rewrite is deterministic, a forward is a
PUT, a deletion of what is gone is no error), the journal (`rsm.migrate.journal`, kept in the destination's
catalog home) records each step, and a resumed
run checks the store before trusting a recorded step: a committed copy at D is verified and used as it is.
A second run plans nothing: segments committed at D with their forwards written are left out of the plan,
unless it prunes: then they are planned (nothing to copy, their source to prune), and a pruned segment is
no longer in the source's catalog.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable
from typing import Any

from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.catalog.keys import topic_dir
from rsm.config.settings import RsmConfig
from rsm.migrate.context import Context, ItemResult, Keys, MigrateError, indexes_size
from rsm.migrate.cross_prune import check_identical, prune
from rsm.migrate.journal import TERMINAL, ItemState, crash_point
from rsm.migrate.move import _committed, _sizes_match
from rsm.migrate.plan import Plan, PlanItem, _forwards_of, _segments_and_forwards, item_for
from rsm.store.forward import read_forward, write_forward
from rsm.store.layout import MANIFEST_SUFFIX, Location
from rsm.store.objects import ObjectNotFound, ObjectStore, store_class
from rsm.stored.rekey import rekey_manifest

log = logging.getLogger(__name__)

KIND = "cross-move"
STEPS = ("planned", "copied", "committed", "verified", "done")

_sources_lock = threading.Lock()


def store_identity(config: RsmConfig) -> tuple[str, str]:
    """What tells two stores apart: the backend and where it is (root directory, endpoint, account), as the
    backend's store class says (`ObjectStore.identity`). Recorded in the journal's parameters and shown:
    never credentials written into an endpoint URL."""
    return (config.backend.value, store_class(config.backend).identity(config))


def describe_store(config: RsmConfig) -> str:
    backend, where = store_identity(config)
    shown = "|".join(part for part in where.split("|") if part and part != "None")
    return f"{backend} store {shown}" if shown else f"{backend} store"


def source_store(ctx: Context) -> ObjectStore:
    """The source store of the run (read only: never written, never deleted from)."""
    with _sources_lock:  # made once per Context (per process: executors build their own)
        store: ObjectStore | None = getattr(ctx, "_cross_source", None)
        if store is None:
            configs = dict(ctx.spec.source_configs)
            if not configs:
                raise MigrateError("a move across stores needs the source store's configuration")
            store = ObjectStore.from_config(RsmConfig(configs), create=False)
            ctx._cross_source = store  # type: ignore[attr-defined]
        return store


def forwards_needed(item: PlanItem) -> list[Location]:
    """Where Kafka's metadata may name the segment, apart from the destination: forwards go there."""
    docs = item.extra.get("origins") or [{"bucket": item.source.bucket, "prefix": item.source.prefix}]
    out = [Location(str(d["bucket"]), str(d["prefix"])) for d in docs]
    return [loc for loc in dict.fromkeys(out) if loc != item.destination]


# -- the plan -----------------------------------------------------------------------------------------------
def _destination_keys(store: ObjectStore, location: Location, topic: str, topic_id: uuid.UUID) -> set[str]:
    """Every key under the topic's directory at `location` in the destination store (one listing; none
    when the directory is missing)."""
    return set(store.list(location.bucket, topic_dir(location, topic, topic_id)))


def _unique(docs: list[dict[str, str]]) -> list[dict[str, str]]:
    """Location documents ({"bucket", "prefix"}) without repeats, in order."""
    return [dict(t) for t in dict.fromkeys(tuple(sorted(d.items())) for d in docs)]


def _forwards_to(store: ObjectStore, location: Location, item: PlanItem) -> bool:
    forward = read_forward(store, location, item.ref)
    return forward is not None and forward.to == item.destination


def plan_cross_move(
    source: TopicCatalog,
    destination_store: ObjectStore,
    topic: str,
    topic_id: uuid.UUID,
    partitions: Iterable[int] | None,
    destination: Location,
    params: dict[str, Any],
    *,
    prune: bool = False,
) -> Plan:
    """One item per segment of the topic in the source store, minus those already complete at D (unless
    `prune`: their source copies are still to delete)."""
    tid = uuid_to_base64(topic_id)
    plan = Plan(KIND, topic, tid, params={"destination": str(destination), **params})
    segs, forwards = _segments_and_forwards(source, topic, topic_id, partitions)
    copies: dict[tuple[int, str], list[Any]] = {}
    for seg in segs:
        copies.setdefault((seg.partition, seg.segment_id), []).append(seg)
    there: dict[Location, set[str]] = {}

    def keys_at(location: Location) -> set[str]:
        if location not in there:
            there[location] = _destination_keys(destination_store, location, topic, topic_id)
        return there[location]

    for group in copies.values():
        seg = group[0]
        held = _unique([{"bucket": s.location.bucket, "prefix": s.location.prefix} for s in group])
        seen = _unique(_forwards_of(forwards, seg))
        extra: dict[str, Any] = {"origins": _unique(held + seen)}
        if prune:  # what the prune deletes: the copies and the source's forwards (rsm.migrate.cross_prune)
            extra.update(prune=True, copies=held, forwards=seen)
        item = item_for(KIND, seg, topic, destination=destination, extra=extra)
        stem = item.ref.stem(destination)
        complete = stem + MANIFEST_SUFFIX in keys_at(destination) and all(
            item.ref.forward_key(loc) in keys_at(loc) and _forwards_to(destination_store, loc, item)
            for loc in forwards_needed(item)
        )
        if complete and not prune:
            plan.skipped.append((item.describe(), f"already at {destination} in the destination store"))
        else:
            plan.items.append(item)
    return plan


# -- one item -----------------------------------------------------------------------------------------------
def run(ctx: Context, item: PlanItem, state: ItemState | None) -> ItemResult:
    """Carry one segment to the destination store (see the module docstring)."""
    if state is not None and state.finished:
        return ItemResult(item, state.step, message="finished in an earlier run")
    assert item.destination is not None
    step = "planned" if state is None else state.step
    if step in TERMINAL:
        return ItemResult(item, step)
    src_store = source_store(ctx)
    if step == "verified":  # killed while pruning: delete what is left
        return prune(ctx, src_store, item, int(state.detail.get("bytes", 0)) if state else 0)
    src, dst = Keys.at(item.ref, item.source), Keys.at(item.ref, item.destination)
    moved = 0
    if ctx.spec.option("resumed") or step != "planned":  # a killed run's half-written objects at D
        ctx.clean_debris(dst.location, dst.stem)
    if _committed(ctx, dst) is None:  # else an earlier run (or its journal-less twin) committed it
        try:
            raw = src_store.get(src.location.bucket, src.manifest)
        except ObjectNotFound:
            ctx.journal.record(item, "vanished", why="its manifest is gone from the source store")
            return ItemResult(item, "vanished", message="its manifest is gone from the source store")
        where = src_store.describe(src.location.bucket, src.manifest)
        new_raw = rekey_manifest(raw, where, ctx.keyring, location=item.destination)
        manifest, _ = ctx.manifest(new_raw, dst.location, dst.manifest)
        # before any object lands at D (one PUT per location and process, an idempotent one)
        ctx.record_location(item.topic, item.topic_id, item.destination)
        crash_point(f"cross location recorded {item.ident}")
        if not _sizes_match(ctx, manifest, dst):  # else copied by a run killed before its commit
            sizes = {src.log: manifest.log.stored_size, src.indexes: indexes_size(manifest)}
            for key_src, key_dst in ((src.log, dst.log), (src.indexes, dst.indexes)):
                moved += stream_object(ctx, src_store, src.location.bucket, key_src, dst.location.bucket,
                                       key_dst, sizes[key_src])  # fmt: skip
                crash_point(f"cross copied {key_dst}")
            if not _sizes_match(ctx, manifest, dst):
                raise MigrateError(
                    f"{item.describe()}: the copy at {ctx.describe(dst.location, dst.stem)} does not have the "
                    f"sizes its manifest records; the source {where} is untouched"
                )
        ctx.journal.record(item, "copied", bytes=moved)
        crash_point(f"cross copied recorded {item.ident}")
        ctx.store.put(dst.location.bucket, dst.manifest, new_raw)
        crash_point(f"cross manifest committed {item.ident}")
        if _committed(ctx, dst) is None:
            raise MigrateError(f"{item.describe()}: the manifest written at "
                               f"{ctx.describe(dst.location, dst.manifest)} does not verify")  # fmt: skip
        ctx.journal.record(item, "committed", bytes=moved)
        crash_point(f"cross committed recorded {item.ident}")
    for origin in forwards_needed(item):
        existing = read_forward(ctx.store, origin, item.ref)
        if existing is None or existing.to != item.destination:
            write_forward(ctx.store, origin, item.ref, item.destination)
            crash_point(f"cross forward written {item.ident} {origin}")
    if item.extra.get("prune"):
        check_identical(ctx, src_store, item)
        ctx.journal.record(item, "verified", bytes=moved)
        crash_point(f"cross verified recorded {item.ident}")
        return prune(ctx, src_store, item, moved)
    ctx.journal.record(item, "done", bytes=moved)
    crash_point(f"cross done recorded {item.ident}")
    return ItemResult(item, "done", moved)


def stream_object(
    ctx: Context, src_store: ObjectStore, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str,
    size: int,
) -> int:  # fmt: skip
    """One object from the source store into the destination store's writer, a part at a time: memory is
    bounded by the part size; nothing shows at the destination until the writer commits."""
    part = max(1 << 20, ctx.store.part_size)
    writer = ctx.store.open_writer(dst_bucket, dst_key)
    try:
        for start in range(0, size, part):
            end = min(start + part, size)
            try:
                chunk = src_store.get_range(src_bucket, src_key, start, end)
            except ObjectNotFound:
                raise MigrateError(
                    f"{src_store.describe(src_bucket, src_key)} is missing (its manifest names it); verify "
                    "the source"
                ) from None
            writer.write(chunk)
            ctx.on_bytes(len(chunk))
    except BaseException:
        writer.abort()
        raise
    writer.commit()
    return size
