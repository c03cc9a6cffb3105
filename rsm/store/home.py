"""The catalog home: where the store's own documents live, apart from where new segments go.

The store keeps documents of its own beside the segments: topic overlays (`rsm.store.overlays`), pending
overlays (`rsm.policy.pending`), location records (`rsm.store.locations`), the topics' encryption memory
(`rsm.copy.downgrade`) and migration journals (`rsm.migrate.journal`), all under

    <catalog.bucket>/<catalog.prefix>_rsm/...

`catalog.bucket` and `catalog.prefix` default to `bucket` and `prefix`, the place these documents always
lived, so existing stores keep working. Why apart: `bucket` is where *new* segments go, and an operator moves
it (a new bucket, a new region) expecting old segments to stay readable where they are. Had the documents
moved with it, a topic's overlay (its encryption, its key id) would have been left behind, and the next
copies tiered with the broker's defaults: in plaintext. So the documents stay at their home whatever
`bucket` says, once `catalog.bucket` names it; README's "Moving the default bucket" says which settings
change freely (`bucket`, `prefix`) and which need a step (`catalog.*`).

Moving the home itself is the explicit, resumable step `rsm migrate catalog` (`rsm.migrate.catalog`). It
leaves two pointers, both small JSON documents (their names and JSON: `rsm.stored.home`):

    <new home>_rsm/catalog-moving.json  {"version": 1, "from": {"bucket", "prefix"}, "started_ms"}
        written first, removed last: a home whose move has not finished is refused by every user
    <old home>_rsm/catalog-moved.json   {"version": 1, "to": {"bucket", "prefix"}, "moved_ms"}
        written once every document is copied: a configuration still naming the old home is refused,
        with the setting to change

so a broker, a reader or a tool configured for either place during the move refuses to run there rather than
reading half a catalog. The RSM reads the pointers at most every `topic.overlay.cache.ms` (one GET each).
A change of `bucket` without `catalog.bucket` moves the home silently; the copy notices it
(`rsm.copy.downgrade`) and refuses with a line naming this procedure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rsm.api.errors import ConfigException
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location
from rsm.store.objects import ObjectNotFound, ObjectStore
from rsm.stored.home import HOME_DIR, MOVED_POINTER, MOVING_POINTER, CatalogPointer

log = logging.getLogger(__name__)

PROCEDURE = "README: Moving the default bucket"

__all__ = [
    "CatalogHome",
    "CatalogMoved",
    "PROCEDURE",
    "catalog_home",
    "data_default",
]


def catalog_home(config: RsmConfig) -> Location:
    """Where the configuration keeps the store's documents (`catalog.bucket` / `catalog.prefix`)."""
    return Location(config.catalog_bucket, config.catalog_prefix)


def data_default(config: RsmConfig) -> Location:
    """Where new segments of a topic without its own bucket or prefix go (`bucket` / `prefix`)."""
    return Location(str(config.get("bucket")), str(config.get("prefix")))


class CatalogMoved(ConfigException):
    """The configured home was moved away (or is being moved to): its documents must not be used."""


def _parse_pointer(raw: bytes, where: str, field: str, stamp: str) -> CatalogPointer:
    try:
        return CatalogPointer.from_bytes(raw, field, stamp)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigException(f"catalog pointer {where} is unreadable ({exc}): see {PROCEDURE}") from None


class CatalogHome:
    """The home of one configuration: its location, its pointers, and the refusal to use a moved one.

    `check()` raises `CatalogMoved` (one line naming the setting) when the home was moved away or a move
    into it has not finished; answers are cached for `ttl_ms` (0: every call), refusals never (a broker
    restarted with the new setting must not wait).
    """

    def __init__(
        self,
        store: ObjectStore,
        location: Location,
        *,
        ttl_ms: int = 5000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.location = location
        self.ttl = ttl_ms / 1000.0
        self._clock = clock
        self._checked_until = 0.0
        self._lock = threading.Lock()

    @property
    def bucket(self) -> str:
        return self.location.bucket

    @property
    def prefix(self) -> str:
        return self.location.prefix

    def key(self, relative: str) -> str:
        return self.location.prefix + relative

    def describe(self, relative: str = HOME_DIR) -> str:
        return self.store.describe(self.location.bucket, self.key(relative))

    def _read(self, relative: str) -> bytes | None:
        try:
            return self.store.get(self.location.bucket, self.key(relative))
        except (ObjectNotFound, FileNotFoundError):
            return None

    def moved_to(self) -> Location | None:
        """Where this home was moved (its `catalog-moved.json`), or None."""
        raw = self._read(MOVED_POINTER)
        if raw is None:
            return None
        return _parse_pointer(raw, self.describe(MOVED_POINTER), "to", "moved_ms").location

    def moving_from(self) -> Location | None:
        """The home a move into this one, not finished yet, comes from (its `catalog-moving.json`), or None."""
        raw = self._read(MOVING_POINTER)
        if raw is None:
            return None
        return _parse_pointer(raw, self.describe(MOVING_POINTER), "from", "started_ms").location

    def check(self) -> None:
        """Refuse a home that was moved away or that a move has not finished filling (see the module)."""
        now = self._clock()
        with self._lock:
            if now < self._checked_until:
                return
        moved = self.moved_to()
        if moved is not None:
            raise CatalogMoved(
                f"the catalog at {self.describe()} was moved to {self.store.describe(moved.bucket, moved.prefix)} "
                f"(rsm migrate catalog): set catalog.bucket={moved.bucket} catalog.prefix={moved.prefix}"
            )
        source = self.moving_from()
        if source is not None:
            raise CatalogMoved(
                f"the catalog move from {self.store.describe(source.bucket, source.prefix)} to {self.describe()} "
                "has not finished: run the same `rsm migrate catalog` again"
            )
        if self.ttl > 0:
            with self._lock:
                self._checked_until = now + self.ttl

    def write_pointer(self, relative: str, field: str, stamp: str, location: Location) -> None:
        body = CatalogPointer(location, int(time.time() * 1000)).to_bytes(field, stamp)
        self.store.put(self.location.bucket, self.key(relative), body)

    def invalidate(self) -> None:
        with self._lock:
            self._checked_until = 0.0
