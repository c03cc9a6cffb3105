"""`rsm migrate move --from-config SOURCE.properties --prune`: the source store's copies of a moved segment
removed, once the destination's copy is checked byte for byte.

A move within one store deletes its source as its last step (`rsm.migrate.move`): brokers keep reading
through the forward it leaves at the old location, in the same store. Across stores no such forward can
exist: a forward names a bucket and prefix *of its own store*, and the brokers still configured for the
source store (all of them, until the operator switches them) read the source store only. Deleting a
source copy while one broker still uses that store would break its fetches of the segment, and nothing
in the source could send it elsewhere. So a move across stores prunes only when asked (`--prune`), meant
for the run after every broker reads from the destination; without it nothing in the source is changed.
Brokers on the destination keep fetching through Kafka's old custom metadata after the prune: the
forwards the move wrote *in the destination store* at every location that metadata names lead to the copy
(`rsm.migrate.cross`), and the prune never touches the destination.

What is deleted, and only after the destination's copy is verified: the objects the RSM wrote for this
segment of the planned topic in the source store, at the locations the source's catalog found them (its
committed copies: `.manifest`, `.log`, `.indexes`; the forwards an earlier move within the source left:
`.forward`). Keys are derived from the segment (`rsm.store.layout`), never listed, so nothing else under
the topic's directories is touched; the source's overlays, pending overlays and location record stay.

Verified means: the destination's manifest is exactly the source's rewritten for the destination (the
rewrite is deterministic: `rsm.stored.rekey.rekey_manifest`; a manifest rewritten at the destination since,
by a re-key there, is not, and the segment is left unpruned), and its `.log` and `.indexes` objects have
the source's sizes and bytes, compared a part at a time (bounded memory).

Order, so that a reader of the source never sees half a segment and a run killed anywhere ends, run
again, in the same state: the journal records `verified` before the first deletion; then every copy's
manifest goes, then their `.log` and `.indexes`, then the forwards; then `done`. A resumed item at
`verified` (whose source manifest may be gone already: the journal, not the source's catalog, brings it
back, `Plan.merge_pending`) deletes what is left; deleting what is gone already is no error.

One store reached through two configurations (two endpoint spellings of one S3, a GCS project's global
bucket names) would make the prune delete the copy it just verified. Before deleting in a bucket, a probe
object is written there through the destination's configuration and read through the source's: if the
source sees it, nothing is pruned (one line). The probe, under the job's journal directory, is deleted
at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from rsm.migrate.context import Context, ItemResult, Keys, MigrateError, indexes_size
from rsm.migrate.journal import JOURNAL_DIR, crash_point
from rsm.migrate.plan import PlanItem
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.rekey import rekey_manifest

log = logging.getLogger(__name__)

PRUNED = "source pruned"

_probe_lock = threading.Lock()


def _locations(docs: Any) -> list[Location]:
    return list(dict.fromkeys(Location(str(d["bucket"]), str(d["prefix"])) for d in docs or ()))


def copies_of(item: PlanItem) -> list[Location]:
    """Where the source's catalog found committed copies of the segment (the item's source among them)."""
    return _locations(item.extra.get("copies")) or [item.source]


def forwards_of(item: PlanItem) -> list[Location]:
    """Where the source holds forwards of the segment (an earlier move within the source store)."""
    return _locations(item.extra.get("forwards"))


def prune_locations(item: PlanItem) -> list[Location]:
    """Every source location a prune of the item deletes in."""
    return list(dict.fromkeys([*copies_of(item), *forwards_of(item)]))


def prune_stages(item: PlanItem) -> list[tuple[str, list[tuple[str, str]]]]:
    """The (bucket, key)s a prune deletes, in order: manifests, then data, then forwards."""
    copies = [Keys.at(item.ref, loc) for loc in copies_of(item)]
    return [
        ("manifests", [(k.location.bucket, k.manifest) for k in copies]),
        ("data", [(k.location.bucket, key) for k in copies for key in (k.log, k.indexes)]),
        ("forwards", [(loc.bucket, item.ref.forward_key(loc)) for loc in forwards_of(item)]),
    ]


def describe_prune(source: ObjectStore, items: Iterable[PlanItem]) -> list[str]:
    """Every object a prune of these items would delete (a dry run's answer)."""
    return [source.describe(b, k) for item in items for _, keys in prune_stages(item) for b, k in keys]


# -- the check ----------------------------------------------------------------------------------------------
def check_identical(ctx: Context, source: ObjectStore, item: PlanItem) -> None:
    """MigrateError (naming the object) unless the destination's copy is the source's, byte for byte (see the
    module docstring)."""
    assert item.destination is not None
    src, dst = Keys.at(item.ref, item.source), Keys.at(item.ref, item.destination)
    where = source.describe(src.location.bucket, src.manifest)
    kept = "nothing of it was pruned"
    try:
        raw = source.get(src.location.bucket, src.manifest)
    except ObjectNotFound:
        raise MigrateError(
            f"{item.describe()}: its manifest {where} is gone, so the copy at "
            f"{ctx.describe(dst.location, dst.stem)} cannot be checked against it; {kept}"
        ) from None
    expected = rekey_manifest(raw, where, ctx.keyring, location=item.destination)
    if ctx.get(dst.location, dst.manifest) != expected:
        raise MigrateError(
            f"{item.describe()}: the manifest {ctx.describe(dst.location, dst.manifest)} is not {where} "
            f"rewritten for the destination (missing, or changed there since); {kept}"
        )
    # its seal, with the destination's keyring
    manifest, _ = ctx.manifest(expected, dst.location, dst.manifest)
    for key_src, key_dst, size in ((src.log, dst.log, manifest.log.stored_size),
                                   (src.indexes, dst.indexes, indexes_size(manifest))):  # fmt: skip
        problem = _differs(ctx, source, src.location.bucket, key_src, dst.location.bucket, key_dst, size)
        if problem:
            raise MigrateError(f"{item.describe()}: {ctx.describe(dst.location, key_dst)} {problem}; {kept}")


def _differs(
    ctx: Context, source: ObjectStore, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, size: int
) -> str | None:
    """How the destination object differs from the source's (None: the same bytes). Both are read a part
    at a time, the destination's part on the side while the source's is read."""
    try:
        sizes = (source.size(src_bucket, src_key), ctx.store.size(dst_bucket, dst_key))
    except ObjectNotFound as exc:
        return f"cannot be compared: {exc} is missing"
    if sizes != (size, size):
        return f"has {sizes[1]} bytes, the source {source.describe(src_bucket, src_key)} {sizes[0]}, the manifest {size}"
    part = max(1 << 20, ctx.store.part_size)
    for start in range(0, size, part):
        end = min(start + part, size)
        theirs = ctx.side(lambda s=start, e=end: ctx.store.get_range(dst_bucket, dst_key, s, e))
        if source.get_range(src_bucket, src_key, start, end) != theirs.result():
            return f"differs from {source.describe(src_bucket, src_key)} in bytes {start}..{end}"
    return None


# -- one store behind two configurations --------------------------------------------------------------------
def check_distinct(destination: ObjectStore, source: ObjectStore, location: Location, job: str) -> None:
    """MigrateError when the source store sees an object written at `location` through the destination's
    configuration: the two are one store, and pruning would delete the destination's copies."""
    if destination.bucket_exists(location.bucket) is False:
        return  # a bucket the source has and the destination lacks: two stores
    key = f"{location.prefix}{JOURNAL_DIR}{job}/probe-{uuid.uuid4().hex}.json"
    body = json.dumps({"probe": "rsm migrate move --prune", "written_ms": int(time.time() * 1000)}).encode()
    destination.put(location.bucket, key, body)
    try:
        try:
            seen = source.get(location.bucket, key)
        except (ObjectNotFound, FileNotFoundError):
            return
        except PermissionError:
            raise MigrateError(
                f"--prune: cannot tell whether --from-config and --config name one store (reading the probe "
                f"{destination.describe(location.bucket, key)} through --from-config was denied); nothing was "
                "pruned"
            ) from None
    finally:
        destination.delete(location.bucket, key)
    if seen == body:
        raise MigrateError(
            f"--prune: --from-config and --config reach one store (the probe {destination.describe(location.bucket, key)} "
            "written through --config is read through --from-config): pruning would delete the moved copies; "
            "nothing was pruned"
        )


def check_distinct_once(ctx: Context, source: ObjectStore, locations: Iterable[Location]) -> None:
    """`check_distinct` for each bucket once per process (the driver's, or an executor's)."""
    with _probe_lock:
        done: set[str] = ctx.__dict__.setdefault("_cross_distinct", set())
        for location in locations:
            if location.bucket not in done:
                check_distinct(ctx.store, source, location, ctx.spec.job)
                done.add(location.bucket)


# -- the prune ----------------------------------------------------------------------------------------------
def prune(ctx: Context, source: ObjectStore, item: PlanItem, moved: int) -> ItemResult:
    """Delete the segment's objects in the source store (its state `verified`: see the module docstring) and
    record the item `done`."""
    check_distinct_once(ctx, source, prune_locations(item))
    stages = prune_stages(item)
    for stage, keys in stages:
        for bucket, key in keys:
            source.delete(bucket, key)  # a missing one (deleted before a kill) is fine
        crash_point(f"cross pruned {stage} {item.ident}")
    log.info(
        "%s: pruned from the source store (%d object(s))", item.describe(), sum(len(k) for _, k in stages)
    )
    ctx.journal.record(item, "done", bytes=moved, pruned=True)
    crash_point(f"cross done recorded {item.ident}")
    return ItemResult(item, "done", moved, message=PRUNED)
