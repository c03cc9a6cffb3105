"""The RSM records the locations it fetches from and deletes in, so readers follow a default that moved.

Every copy records where it writes (`rsm.store.locations`), in the record kept under the broker's
default location. When an operator changes that default (`rsm.config.bucket` / `prefix`), the brokers copy
new segments to the new default and keep fetching and deleting the older ones where Kafka's custom metadata
says they are; but the older locations are recorded only under the old default, which readers given the
new configuration (the Spark reader, `rsm migrate`, `rsm store`) no longer look at. So whenever the RSM
fetches from or deletes in a location other than its default, it records that location under its current
default (`found_by` `fetch` or `delete`): the first fetch or delete of each topic's old location puts it
in the new record. Data no broker touches after the change is added by the operator's step, `rsm store
locate --record --bucket OLD` (README).

Cost: nothing for segments at the default location; otherwise one set lookup per manifest read from the
store (not per fetch: manifests are cached), and one HEAD (plus a PUT the first time) per topic id and
location per process. A fetch never waits for it (a background thread does it) and never fails because of
it (a failure is logged, and the next manifest read of that location tries again).

The same thread vouches for the record of a topic id whose first copy a copy recorded
(`rsm.store.first_copy`): that walks the buckets' directories, which a copy must not wait for.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from rsm.api.metadata import RemoteLogSegmentMetadata
from rsm.store.first_copy import vouch_for_first_copy
from rsm.store.layout import Location
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectNotFound
from rsm.stored.location_record import FoundBy

log = logging.getLogger(__name__)


class LocationNotes:
    """Records non-default locations found by fetches and deletes into the current default's record."""

    def __init__(self, registry: LocationRegistry, default: Location | None = None) -> None:
        self.registry = registry
        # where new segments go (`bucket` / `prefix`); the record itself lives at the catalog home
        self.default = default if default is not None else Location(registry.bucket, registry.prefix)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._warned_missing = False

    def _wanted(self, location: Location) -> bool:
        return location != self.default

    def fetched(self, metadata: RemoteLogSegmentMetadata, location: Location) -> None:
        """A manifest was read at `location`: record it in the background (a fetch never waits)."""
        tip = metadata.remote_log_segment_id.topic_id_partition
        if not self._wanted(location) or self.registry.known(tip.topic_id, location):
            return
        self._submit(self._note, metadata, location, FoundBy.FETCH)

    def first_copy(self, topic: str, topic_id: uuid.UUID, buckets: Callable[[], Iterable[str]]) -> None:
        """A copy wrote its topic id's entry and starts its partition's log (`rsm.store.first_copy`'s
        first step): the rest in the background, never failing nor delaying the copy."""
        self._submit(self._vouch, topic, topic_id, buckets)

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        with self._lock:
            if self._closed:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="rsm-location-notes")
            self._pool.submit(fn, *args)

    def _vouch(self, topic: str, topic_id: uuid.UUID, buckets: Callable[[], Iterable[str]]) -> None:
        try:
            vouch_for_first_copy(self.registry, topic, topic_id, buckets())
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not fail Kafka's operation
            log.warning("could not tell whether the location record of %s is complete (readers scan for it "
                        "instead): %s: %s", topic, type(exc).__name__, exc)  # fmt: skip

    def deleted(self, metadata: RemoteLogSegmentMetadata, locations: list[Location]) -> None:
        """A delete is about to remove the segment at these locations: record them first (the topic's
        other segments there must stay findable), never failing the delete."""
        for location in locations:
            if self._wanted(location):
                self._note(metadata, location, FoundBy.DELETE)

    def _note(self, metadata: RemoteLogSegmentMetadata, location: Location, how: FoundBy) -> None:
        tip = metadata.remote_log_segment_id.topic_id_partition
        try:
            self.registry.record(tip.topic, tip.topic_id, location, found_by=how)
        except (ObjectNotFound, FileNotFoundError):
            # no default bucket (every topic names its own): said once, as the copy says it
            if not self._warned_missing:
                self._warned_missing = True
                log.warning("the default location %s does not exist: locations are not recorded there",
                            self.registry.describe())  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not fail Kafka's operation
            log.warning(
                "could not record location %s of topic %s in %s (the next %s tries again): %s: %s",
                location, tip.topic, self.registry.describe(), how.value, type(exc).__name__, exc,
            )  # fmt: skip

    def close(self) -> None:
        """Finish the records under way (each is a HEAD and maybe a PUT)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
