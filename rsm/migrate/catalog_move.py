"""`rsm migrate catalog`: move the store's documents (the catalog home) to another bucket or prefix.

The catalog home (`rsm.store.home`) holds what the store knows beside its segments: topic overlays, pending
overlays, location records, the topics' encryption memory, migration journals. Moving it is one explicit,
resumable step, in this order, so that no broker, reader or tool ever works from half a catalog:

1. `<new home>_rsm/catalog-moving.json` (from: the old home): the new home is refused until step 5;
2. every document under `<old home>_rsm/` is copied to the new home (one already there with the same bytes
   is skipped, so a re-run after a kill copies only the rest);
3. `<old home>_rsm/catalog-moved.json` (to: the new home): from now on every RSM and tool still configured
   for the old home refuses to use it, naming the setting to change (within `topic.overlay.cache.ms`);
4. after that time, a second pass copies what brokers wrote to the old home meanwhile (a location entry of a
   copy that had just begun, an overlay set at the last moment);
5. the moving pointer is removed: the new home is in use.

Between 3 and the brokers' restart with `catalog.bucket` / `catalog.prefix` naming the new home, copies are
refused with that line and Kafka retries them (segments stay on the brokers' disks meanwhile); fetches and
deletes go on. The old home's documents are left where they are, beside its pointer: the move deletes
nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rsm.store.home import CatalogHome
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.home import HOME_DIR, MOVED_POINTER, MOVING_POINTER

log = logging.getLogger(__name__)

POINTERS = frozenset({MOVED_POINTER, MOVING_POINTER})

__all__ = ["CatalogMoveError", "CatalogMoveReport", "move_catalog"]


class CatalogMoveError(Exception):
    """The move cannot start or go on (one line: what is in the way)."""


@dataclass
class CatalogMoveReport:
    """What a move did (or, dry, would do)."""

    source: str
    destination: str
    documents: int = 0
    copied: int = 0
    skipped: int = 0
    bytes: int = 0
    late: int = 0  # copied by the second pass
    state: str = "moved"  # moved | already moved | would move
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "destination": self.destination,
            "documents": self.documents,
            "copied": self.copied,
            "skipped": self.skipped,
            "bytes": self.bytes,
            "copied_late": self.late,
            "state": self.state,
        }


def _documents(store: ObjectStore, home: Location) -> list[str]:
    """The relative names (under the home's prefix) of the home's documents, pointers left out."""
    base = home.prefix + HOME_DIR
    try:
        keys = store.list(home.bucket, base)
    except (FileNotFoundError, ObjectNotFound):
        return []
    out = []
    for key in keys:
        relative = key[len(home.prefix) :]
        if relative not in POINTERS:
            out.append(relative)
    return sorted(out)


def _copy_pass(store: ObjectStore, source: Location, dest: Location, report: CatalogMoveReport) -> int:
    copied = 0
    for relative in _documents(store, source):
        try:
            raw = store.get(source.bucket, source.prefix + relative)
        except ObjectNotFound:
            continue  # removed meanwhile (a finished journal's lock): nothing to carry
        try:
            there = store.get(dest.bucket, dest.prefix + relative)
        except (ObjectNotFound, FileNotFoundError):
            there = None
        if there == raw:
            report.skipped += 1
            continue
        store.put(dest.bucket, dest.prefix + relative, raw)
        report.bytes += len(raw)
        copied += 1
    return copied


def move_catalog(
    store: ObjectStore,
    source: Location,
    dest: Location,
    *,
    settle_s: float,
    dry_run: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> CatalogMoveReport:
    """Move the catalog home from `source` to `dest` (see the module docstring); resumable."""
    if source == dest:
        raise CatalogMoveError(f"the catalog is already at {store.describe(dest.bucket, dest.prefix)}")
    old, new = CatalogHome(store, source, ttl_ms=0), CatalogHome(store, dest, ttl_ms=0)
    report = CatalogMoveReport(old.describe(), new.describe())
    moved_to = old.moved_to()
    if moved_to is not None and moved_to != dest:
        raise CatalogMoveError(
            f"the catalog at {old.describe()} was moved to {store.describe(moved_to.bucket, moved_to.prefix)} "
            "already: move it from there"
        )
    moving_from = new.moving_from()
    if moving_from is not None and moving_from != source:
        raise CatalogMoveError(
            f"{new.describe()} is being filled from {store.describe(moving_from.bucket, moving_from.prefix)}: "
            "finish that move first"
        )
    if moved_to == dest and moving_from is None:
        report.state = "already moved"
        return report
    if new.moved_to() is not None:
        raise CatalogMoveError(f"{new.describe()} was itself moved away: it cannot take a catalog")
    resuming = moving_from == source
    if not resuming:
        present = _documents(store, dest)
        if present:
            raise CatalogMoveError(
                f"{new.describe()} holds {len(present)} catalog document(s) already (first: {present[0]}): "
                "a catalog is moved only into an empty place"
            )
    if dry_run:
        report.documents = len(_documents(store, source))
        report.state = "would move"
        return report
    if not resuming:
        new.write_pointer(MOVING_POINTER, "from", "started_ms", source)
    report.documents = len(_documents(store, source))
    report.copied += _copy_pass(store, source, dest, report)
    if moved_to is None:
        old.write_pointer(MOVED_POINTER, "to", "moved_ms", dest)
    # RSMs read the pointer at most every topic.overlay.cache.ms: what they wrote before noticing it comes now
    sleep(settle_s)
    report.late = _copy_pass(store, source, dest, report)
    report.copied += report.late
    store.delete(dest.bucket, dest.prefix + MOVING_POINTER)
    log.info(
        "catalog moved from %s to %s: %d document(s) copied (%d in the second pass), %d already there",
        report.source, report.destination, report.copied, report.late, report.skipped,
    )  # fmt: skip
    return report
