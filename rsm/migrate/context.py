"""What every item of a migration runs with: the store, keyring, journal and a few shared helpers.

A `JobSpec` is the picklable description of a run (the store's configuration, the job id and run number,
options); `Context.of(spec)` builds the clients from it, once per process: on the driver for the local
engine, on each executor for the Spark engine (as `spark_reader` does for its reads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rsm.config.keyring import Keyring, keyring_for
from rsm.config.settings import RsmConfig
from rsm.fetch.reader import cipher_for
from rsm.migrate.journal import Journal
from rsm.migrate.plan import PlanItem
from rsm.store.home import catalog_home, data_default
from rsm.store.layout import INDEXES_SUFFIX, LOG_SUFFIX, MANIFEST_SUFFIX, Location, SegmentKeys
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.cipher import SegmentCipher
from rsm.stored.forward import FORWARD_SUFFIX, SegmentRef
from rsm.stored.manifest import Manifest

T = TypeVar("T")


class MigrateError(Exception):
    """An item cannot be carried out (one line naming the segment and the object)."""


@dataclass(frozen=True)
class JobSpec:
    """Everything an engine's worker needs to rebuild the clients and carry on the journal."""

    configs: tuple[tuple[str, str], ...] = field(repr=False)
    job: str
    run: int
    options: tuple[tuple[str, Any], ...] = ()
    # a move across stores: the source store's configuration (may hold credentials: never shown)
    source_configs: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


@dataclass
class ItemResult:
    """How one item ended: done, skipped, vanished (deleted meanwhile) or failed; bytes it moved;
    problems found (verify)."""

    item: PlanItem
    status: str
    bytes: int = 0
    message: str = ""
    problems: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "segment": self.item.describe(),
            "ident": self.item.ident,
            "source": str(self.item.source),
            "destination": None if self.item.destination is None else str(self.item.destination),
            "status": self.status,
            "bytes": self.bytes,
            "message": self.message,
            "problems": self.problems,
        }


class Context:
    """Clients for one process, shared by its threads."""

    def __init__(self, spec: JobSpec, store: ObjectStore | None = None) -> None:
        self.spec = spec
        self.config = RsmConfig(dict(spec.configs))
        self.store = store or ObjectStore.from_config(self.config)
        self.keyring: Keyring | None = keyring_for(self.config)
        self.default = data_default(self.config)  # where new segments go
        self.home = catalog_home(self.config)  # where the record and the journal live (rsm.store.home)
        self.registry = LocationRegistry(self.store, self.home.bucket, self.home.prefix)
        self.journal = Journal(self.store, self.home, spec.job, spec.run)
        self._on_bytes: Callable[[int], None] | None = None
        self._lock = threading.Lock()
        self._locations: dict[tuple[str, str], list[Location]] = {}
        self._side = ThreadPoolExecutor(8, thread_name_prefix="rsm-migrate-side")
        self._record_lock = threading.Lock()

    def record_location(self, topic: str, topic_id: str, location: Location) -> None:
        """`LocationRegistry.record`, once per location for all threads (its own memo fills only after it
        wrote: threads starting together would each look and write)."""
        with self._record_lock:
            self.registry.record(topic, topic_id, location)

    def topic_locations(self, item: PlanItem) -> list[Location]:
        """Every location recorded for the item's topic id (cached per process)."""
        key = (item.topic, item.topic_id)
        with self._lock:
            hit = self._locations.get(key)
        if hit is None:
            hit = [self.default, *self.registry.locations(item.topic, item.topic_id)]
            with self._lock:
                self._locations[key] = hit
        return hit

    def on_bytes(self, n: int) -> None:
        if self._on_bytes is not None:
            self._on_bytes(n)

    def set_progress(self, callback: Callable[[int], None] | None) -> None:
        self._on_bytes = callback

    def describe(self, location: Location, key: str) -> str:
        return self.store.describe(location.bucket, key)

    def get(self, location: Location, key: str) -> bytes | None:
        try:
            return self.store.get(location.bucket, key)
        except ObjectNotFound:
            return None

    def size(self, location: Location, key: str) -> int | None:
        try:
            return self.store.size(location.bucket, key)
        except ObjectNotFound:
            return None

    def sizes(self, location: Location, stem: str) -> dict[str, int]:
        """The objects of one stem and their sizes (`ObjectStore.stem_sizes`: one listing on S3, not a HEAD
        per object, whatever the number of segments beside it)."""
        suffixes = (LOG_SUFFIX, INDEXES_SUFFIX, MANIFEST_SUFFIX, FORWARD_SUFFIX)
        return self.store.stem_sizes(location.bucket, [stem + suffix for suffix in suffixes])

    def delete_many(self, location: Location, keys: list[str]) -> None:
        """Delete objects that may go in any order (one request on S3); missing ones are fine."""
        self.store.delete_many(location.bucket, keys)

    def clean_debris(self, location: Location, stem: str) -> int:
        """Remove what a killed write of one segment's objects left (`ObjectStore.unfinished_writes`:
        temporary files beside them, incomplete multipart uploads, staged blocks). Only for a segment this
        job was working on when it was killed: nothing else writes those keys meanwhile (the journal's lock
        keeps other runs out, and Kafka never copies a segment id twice). Returns how many."""
        suffixes = (LOG_SUFFIX, INDEXES_SUFFIX, MANIFEST_SUFFIX, FORWARD_SUFFIX)
        removed = 0
        for write in self.store.unfinished_writes(location.bucket, [stem + suffix for suffix in suffixes]):
            removed += bool(self.store.discard(write))
        return removed

    def side(self, work: Callable[[], T]) -> Future[T]:
        """One request started on the side while the caller makes another."""
        return self._side.submit(work)

    def both(self, first: Callable[[], object], second: Callable[[], object]) -> None:
        """Two independent requests at once (each a round trip to the store)."""
        future = self._side.submit(second)
        first()
        future.result()

    def manifest(self, raw: bytes, location: Location, key: str) -> tuple[Manifest, SegmentCipher | None]:
        """Parse a manifest and check its seal (an encrypted one's with the keyring)."""
        manifest = Manifest.from_bytes(raw, self.describe(location, key))
        return manifest, cipher_for(manifest, self.keyring)


_contexts: dict[JobSpec, Context] = {}
_contexts_lock = threading.Lock()


def context_of(spec: JobSpec) -> Context:
    """The context of a run, made once per process (Spark executors reuse it across tasks)."""
    with _contexts_lock:
        ctx = _contexts.get(spec)
        if ctx is None:
            ctx = _contexts[spec] = Context(spec)
        return ctx


@dataclass(frozen=True)
class Keys(SegmentKeys):
    """The objects of one segment at one location, its forward among them (`rsm.store.forward`)."""

    @classmethod
    def at(cls, ref: SegmentRef, location: Location) -> Keys:
        return cls(location, ref.stem(location))

    @property
    def forward(self) -> str:
        return self.stem + FORWARD_SUFFIX


def indexes_size(manifest: Manifest) -> int:
    """The size of a segment's `.indexes` object: its pieces back to back."""
    return max((e.offset + e.stored_size for e in manifest.indexes.values()), default=0)
