"""`rsm migrate move`: relocate a segment copy to another location, readable at every moment.

One segment, source S (its manifest's location), destination D, in this order (the journal,
`rsm.migrate.journal`, records `forwarded` and `done`, and `copied` for a re-encryption, whose new manifest
it must keep; the other steps are told from the store when a run resumes):

1. `copied`: the `.log` and `.indexes` objects are copied to D (a server-side copy on S3, the kernel's copy
   on the file store: `rsm.migrate.transfer`; a re-encryption streams them through its transform instead)
   and their sizes checked against the manifest. D is recorded in the topic's location record first, so
   the catalog finds the copy the moment it is committed. The segment's origin is noted: the location
   Kafka's custom metadata names, i.e. the one whose forward leads to S (the planner lists forwards), or S.
2. `forwarded`: a forward `<S stem>.forward` naming D is written at S (`rsm.store.forward`).
3. `committed`: the manifest, rewritten to name D's keys and sealed again (`rsm.stored.rekey.rekey_manifest`,
   which also upgrades a version 1 manifest to version 2), is written at D: the commit point; then read
   back and checked (parse, seal, object sizes).
4. `done`: D's copy is checked again (manifest, seal, sizes), so a source is never deleted before its copy
   is verified; S's objects are deleted, manifest first; then the forwards are collapsed so that a segment
   has one forward, at its origin, naming where it is: the origin's forward is rewritten to name D, S's
   removed unless S is the origin, D's removed if D had one (a move back to where the segment once was).

Why the forward before the commit (DESIGN's order has it after): so that whenever D holds a committed
copy, a broker's delete through the old custom metadata reaches it. Committed first, a delete between the
two steps would remove S only and leave D's copy for ever (Kafka thinks the segment gone; readers would
still read it). Written first, it is never followed while S's manifest exists (a manifest always wins),
and a delete following it to an uncommitted D removes the objects copied so far; the commit step then sees
S's manifest and forward gone, takes back its own commit, and records the item `vanished`.

What readers see at every moment: S's copy (up to step 4), D's copy (from step 3), both at once between 3
and 4. A broker's fetch through the origin reads the manifest there while it exists, else follows the
chain (origin -> S -> D during step 4, origin -> D after). The catalog sees the same segment id at two
locations with the same offsets and reads it once (`rsm.catalog.history`: a copy whose offsets another copy
already holds is superseded).

Resuming: the journal's step says where to start; every step is idempotent (a copy is rewritten whole,
the manifest rewrite is deterministic for the same source), so one done but not recorded is done again,
and a step recorded as done is checked in the store before anything depends on it (a commit found there is
verified, a forward missing is written again). A run that carries a segment from its start trusts what it
wrote and checked itself and does not read it back. A
committed copy already at D (an earlier run whose journal entry was lost, or a segment with copies at
several sources) is verified and used as it is; D's objects gone since step 1 (`gc` removes uncommitted
objects older than its grace period, so a run resumed hours later may find them gone) are copied again.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rsm.api.errors import RemoteStorageException
from rsm.migrate.context import Context, ItemResult, Keys, MigrateError, indexes_size
from rsm.migrate.journal import TERMINAL, ItemState, crash_point
from rsm.migrate.plan import PlanItem
from rsm.migrate.transfer import DEFAULT_COPY_PART_SIZE, copy_object
from rsm.store.forward import read_forward, write_forward
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound
from rsm.stored.manifest import Manifest, ManifestError
from rsm.stored.rekey import rekey_manifest

log = logging.getLogger(__name__)

STEPS = ("planned", "copied", "forwarded", "committed", "done")

# a transform copies S's objects to D its own way and returns the manifest to commit at D (None: the
# plain copy's rewrite of S's manifest) and the bytes it moved
Transform = Callable[[Context, Manifest, Keys, Keys], tuple[bytes, int]]


@dataclass
class Phase:
    """One move of a segment: from, to, its steps' names in the journal, and what they carry."""

    source: Location
    destination: Location
    step: str = "planned"
    detail: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""  # journal step names of this phase are prefix + step
    transform: Transform | None = None
    origin: Location | None = None  # where Kafka's metadata names the segment (None: found at step 1)


def run(ctx: Context, item: PlanItem, state: ItemState | None) -> ItemResult:
    """Move one segment copy (`item.source` -> `item.destination`)."""
    if state is not None and state.finished:
        return ItemResult(item, state.step, message="finished in an earlier run")
    assert item.destination is not None
    if item.source == item.destination:
        return ItemResult(item, "skipped", message="already at the destination")
    phase = Phase(item.source, item.destination)
    if state is not None:
        phase.step, phase.detail = state.step, dict(state.detail)

    def record(step: str, **detail: Any) -> None:
        ctx.journal.record(item, step, **detail)

    status, moved = move_segment(ctx, item, phase, record)
    return ItemResult(item, status, moved)


def move_segment(ctx: Context, item: PlanItem, phase: Phase, record: Callable[..., None]) -> tuple[str, int]:
    """Carry one phase through its steps from `phase.step` (see the module docstring).

    Returns ("done" | "vanished" | "skipped", bytes copied). A phase carried from its start in one call
    (`fresh`) trusts what it wrote and checked itself and does not read it back; one resumed from the
    journal looks at the store first.
    """
    ref = item.ref
    src, dst = Keys.at(ref, phase.source), Keys.at(ref, phase.destination)
    step = phase.step[len(phase.prefix) :] if phase.step.startswith(phase.prefix) else phase.step
    detail = phase.detail
    moved = 0
    fresh = step == "planned"
    raw: bytes | None = None  # S's manifest, once read
    dst_ok = False  # D holds a committed copy checked in this call

    def done(step_name: str) -> None:
        record(phase.prefix + step_name, **detail)
        crash_point(f"{phase.prefix}{step_name} recorded {item.ident}")

    if step in TERMINAL:
        return step, 0
    if ctx.spec.option("resumed") or phase.step != "planned":  # a killed run's half-written objects
        for keys in (src, dst):
            ctx.clean_debris(keys.location, keys.stem)
    if step == "planned":
        if "origin" not in detail:
            origin = phase.origin or _origin(ctx, item, phase.source)
            detail["origin"] = {"bucket": origin.bucket, "prefix": origin.prefix}
        # the planner saw every committed copy: none at D unless it says so
        if item.extra.get("at_destination") is not False and _committed(ctx, dst) is not None:
            dst_ok = True
        else:
            raw = ctx.get(src.location, src.manifest)
            if raw is None:
                return _gone(ctx, item, phase, src, dst, record, before_forward=True), 0
            ctx.record_location(item.topic, item.topic_id, phase.destination)
            crash_point(f"{phase.prefix}location recorded {item.ident}")
            moved += _transfer(ctx, phase, raw, src, dst, detail)
            detail["bytes"] = moved
        if phase.transform is not None:
            done("copied")  # the journal keeps the new manifest: its pieces are under a new data key
        step = "copied"
    copied_sizes: dict[str, int] | None = None  # D's objects as listed right after this call copied them
    if step == "copied":
        # the forward and the journal's record of it at once: both land before the commit; a run that
        # copied just now lists D's sizes meanwhile (read-only, checked before the commit)
        def forward_and_record() -> None:
            ctx.both(lambda: write_forward(ctx.store, phase.source, ref, phase.destination),
                     lambda: done("forwarded"))  # fmt: skip

        if fresh and not dst_ok:
            sizes_of = ctx.side(lambda: ctx.sizes(dst.location, dst.stem))
            forward_and_record()
            copied_sizes = sizes_of.result()
        else:
            forward_and_record()
        crash_point(f"{phase.prefix}forward written {item.ident}")
        step = "forwarded"
    if step == "forwarded":
        if not fresh and read_forward(ctx.store, phase.source, ref) is None and _committed(ctx, dst) is None:
            # written at once with its journal record, the forward may not have landed before a kill
            write_forward(ctx.store, phase.source, ref, phase.destination)
        if not dst_ok and (fresh or _committed(ctx, dst) is None):
            raw = raw or ctx.get(src.location, src.manifest)
            if raw is None:
                return _gone(ctx, item, phase, src, dst, record, before_forward=False), moved
            new_raw = _new_manifest(ctx, phase, raw, src, detail)
            new_manifest, _ = ctx.manifest(new_raw, dst.location, dst.manifest)
            if not _sizes_match(ctx, new_manifest, dst, copied_sizes):
                if fresh:
                    _check_sizes(ctx, new_manifest, dst)  # just copied, and not what was copied: stop here
                # D's objects went away since they were copied (`gc` takes uncommitted objects older than its
                # grace period, so a run resumed much later may find them gone): copy again
                moved += _transfer(ctx, phase, raw, src, dst, detail)
                new_raw = _new_manifest(ctx, phase, raw, src, detail)
                new_manifest, _ = ctx.manifest(new_raw, dst.location, dst.manifest)
                _check_sizes(ctx, new_manifest, dst)
            ctx.store.put(dst.location.bucket, dst.manifest, new_raw)
            crash_point(f"{phase.prefix}manifest committed {item.ident}")
            if read_forward(ctx.store, phase.source, ref) is None:
                if ctx.get(src.location, src.manifest) is None:
                    # a delete through the old location ran meanwhile (it removes the forward last): the
                    # segment is gone for Kafka; take back what this move committed
                    _remove(ctx, dst)
                    return _gone(ctx, item, phase, src, dst, record, before_forward=False), moved
                write_forward(ctx.store, phase.source, ref, phase.destination)
            dst_ok = True  # parsed, sealed and sized above, and written by this call
        step = "committed"
    if step == "committed":
        if not dst_ok and _committed(ctx, dst) is None:
            raise MigrateError(
                f"{item.describe()}: the copy at {ctx.describe(dst.location, dst.stem)} does not verify; "
                f"its source {ctx.describe(src.location, src.stem)} is kept"
            )
        _remove(ctx, src, label=f"{phase.prefix}source")
        _collapse(ctx, item, phase, src, dst, _location(detail.get("origin")) or phase.source)
        detail.pop("manifest", None)
        done("done")
    return "done", moved


def _location(doc: Any) -> Location | None:
    return None if not doc else Location(str(doc["bucket"]), str(doc["prefix"]))


def _origin(ctx: Context, item: PlanItem, source: Location) -> Location:
    """Where Kafka's metadata names the segment: the location whose forward leads to `source`, else
    `source` itself (forwards are kept at the origin only, pointing at the segment's current location)."""
    docs = item.extra.get("forwards")  # where the planner saw forwards of this segment
    candidates = ctx.topic_locations(item) if docs is None else [_location(d) for d in docs]
    for location in candidates:
        if location is None or location == source:
            continue
        forward = read_forward(ctx.store, location, item.ref)
        if forward is not None and forward.to == source:
            return location
    return source


def _collapse(ctx: Context, item: PlanItem, phase: Phase, src: Keys, dst: Keys, origin: Location) -> None:
    """After S's objects are gone, keep one forward, at the origin, pointing at D: the origin's rewritten
    (it pointed at S), S's removed unless S is the origin, D's removed (D holds the manifest now)."""
    if origin not in (phase.source, phase.destination):
        write_forward(ctx.store, origin, item.ref, phase.destination)
        crash_point(f"{phase.prefix}origin forward rewritten {item.ident}")
    seen = item.extra.get("forwards")  # where the planner saw forwards (None: not known)
    here = {"bucket": phase.destination.bucket, "prefix": phase.destination.prefix}
    if seen is None or here in seen or phase.prefix:  # a re-encryption's phases make their own forwards
        with contextlib.suppress(ObjectNotFound):
            ctx.store.delete(dst.location.bucket, dst.forward)
        crash_point(f"{phase.prefix}destination forward removed {item.ident}")
    if origin != phase.source:
        ctx.store.delete(src.location.bucket, src.forward)
        crash_point(f"{phase.prefix}source forward removed {item.ident}")


def _transfer(ctx: Context, phase: Phase, raw: bytes, src: Keys, dst: Keys, detail: dict[str, Any]) -> int:
    """Step 1's copy: S's objects to D, checked; a transform's new manifest is kept in `detail`."""
    manifest, _ = ctx.manifest(raw, src.location, src.manifest)
    if phase.transform is None:
        return _copy(ctx, manifest, src, dst)
    new_raw, moved = phase.transform(ctx, manifest, src, dst)
    detail["manifest"] = base64.b64encode(new_raw).decode("ascii")
    return moved  # sizes checked before the commit


def _new_manifest(ctx: Context, phase: Phase, raw: bytes, src: Keys, detail: dict[str, Any]) -> bytes:
    """The manifest to commit at D: the transform's, else S's rewritten to name D's keys."""
    if "manifest" in detail:
        return base64.b64decode(detail["manifest"])
    where = ctx.describe(src.location, src.manifest)
    return rekey_manifest(raw, where, ctx.keyring, location=phase.destination)


def _copy(ctx: Context, manifest: Manifest, src: Keys, dst: Keys) -> int:
    part = int(ctx.spec.option("copy_part_size", DEFAULT_COPY_PART_SIZE))
    sizes = {src.log: manifest.log.stored_size, src.indexes: indexes_size(manifest)}
    copied: list[int] = []

    def one(key_src: str, key_dst: str) -> None:
        try:
            copied.append(copy_object(ctx.store, src.location.bucket, key_src, dst.location.bucket, key_dst,
                                      part_size=part, on_bytes=ctx.on_bytes, size=sizes[key_src],
                                      link=bool(ctx.spec.option("file_links", True))))  # fmt: skip
        except ObjectNotFound:
            raise MigrateError(
                f"segment {manifest.segment.segment_id}: {ctx.describe(src.location, key_src)} is missing "
                "(the manifest names it); verify the source"
            ) from None

    ctx.both(lambda: one(src.log, dst.log), lambda: one(src.indexes, dst.indexes))
    crash_point(f"copied {dst.log} and .indexes")
    return sum(copied)  # sizes checked before the commit


def _sizes_match(ctx: Context, manifest: Manifest, keys: Keys, sizes: dict[str, int] | None = None) -> bool:
    """D's objects have the sizes the manifest records (``sizes``: listed already, else listed now)."""
    sizes = ctx.sizes(keys.location, keys.stem) if sizes is None else sizes
    return sizes.get(keys.log) == manifest.log.stored_size and sizes.get(keys.indexes) == indexes_size(
        manifest
    )


def _check_sizes(ctx: Context, manifest: Manifest, keys: Keys) -> None:
    if not _sizes_match(ctx, manifest, keys):
        raise MigrateError(
            f"segment {manifest.segment.segment_id}: the copy at {ctx.describe(keys.location, keys.stem)} "
            f"does not have the sizes its manifest records ({manifest.log.stored_size} and "
            f"{indexes_size(manifest)} bytes)"
        )


def _committed(ctx: Context, keys: Keys) -> Manifest | None:
    """The manifest at `keys`, when it is there, checks (parse, seal) and its objects have its sizes."""
    raw = ctx.get(keys.location, keys.manifest)
    if raw is None:
        return None
    try:
        manifest, _ = ctx.manifest(raw, keys.location, keys.manifest)
    except (ManifestError, RemoteStorageException) as exc:
        log.warning("%s does not check: %s", ctx.describe(keys.location, keys.manifest), exc)
        return None
    return manifest if _sizes_match(ctx, manifest, keys) else None


def _remove(ctx: Context, keys: Keys, label: str = "") -> None:
    """Delete a segment's objects at one location, the manifest first (readers never see half of it)."""
    ctx.store.delete(keys.location.bucket, keys.manifest)
    crash_point(f"deleted {label} {keys.manifest}")
    ctx.delete_many(keys.location, [keys.log, keys.indexes])
    crash_point(f"deleted {label} {keys.log} and .indexes")


def _gone(
    ctx: Context,
    item: PlanItem,
    phase: Phase,
    src: Keys,
    dst: Keys,
    record: Callable[..., None],
    *,
    before_forward: bool,
) -> str:
    """The source manifest is gone and D holds no committed copy.

    Before this item wrote its forward: the segment was deleted (retention), or another move took it
    elsewhere (a forward at S says where): nothing of this item's is left but copied objects at D. After:
    a delete through the old location ran (the broker's, following the forward): finish it at D.
    """
    forward = read_forward(ctx.store, phase.source, item.ref)
    if before_forward and forward is not None and forward.to != phase.destination:
        why = f"it was moved to {forward.to} by another run"
        record("skipped", why=why)
        return "skipped"
    if ctx.get(dst.location, dst.manifest) is None:
        for key in (dst.log, dst.indexes):
            ctx.store.delete(dst.location.bucket, key)
    if forward is not None:
        ctx.store.delete(src.location.bucket, src.forward)
    why = "it was deleted while being moved" if not before_forward else "its manifest is gone from the source"
    log.info("%s: not moved, %s", item.describe(), why)
    record("vanished", why=why)
    return "vanished"
