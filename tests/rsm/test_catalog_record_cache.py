"""A catalog reads a topic name's location record and overlays once, and again after this process wrote to
the record (`TopicCatalog` module docstring): the questions a plan asks (`topic_ids`, `live_topic_id`,
`locations`) cost one reading between them, and `rsm migrate`, which records new locations while its catalog
plans, never plans from a stale copy."""

from __future__ import annotations

import uuid
from pathlib import Path

from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.catalog import TopicCatalog
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location
from rsm.store.locations import LocationRegistry


def _configs(tmp_path: Path) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}


def _tier(tmp_path: Path, topic: str, topic_id: uuid.UUID | None = None) -> uuid.UUID:
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path))
    try:
        tip = TopicIdPartition(topic_id or uuid.uuid4(), topic, 0)
        log = PartitionLog(rsm, tip, tmp_path / "w" / f"{topic}-{uuid.uuid4().hex[:6]}")
        log.append(3)
        log.roll()
        return tip.topic_id
    finally:
        rsm.close()


def test_a_plans_questions_read_the_record_once(tmp_path: Path) -> None:
    tid = _tier(tmp_path, "orders")
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    assert catalog.live_topic_id("orders") == tid
    where = catalog.locations("orders", tid)
    read = catalog.store.stats.snapshot()
    for _ in range(3):
        assert catalog.topic_ids("orders").keys() == {tid}
        assert catalog.live_topic_id("orders") == tid
        assert catalog.locations("orders", tid) == where
    assert catalog.store.stats.snapshot() == read  # no request: answered from what was read


def test_a_location_recorded_meanwhile_is_seen_by_the_next_question(tmp_path: Path) -> None:
    tid = _tier(tmp_path, "orders")
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    assert Location("moved", "m/") not in catalog.locations("orders", tid)
    # as `rsm migrate move` does: its own registry of the same record, in the catalog's process
    LocationRegistry(catalog.store, "main", "").record("orders", tid, Location("moved", "m/"))
    assert Location("moved", "m/") in catalog.locations("orders", tid)


def test_a_name_reads_its_own_ids_only(tmp_path: Path) -> None:
    """Names that extend another's after a '-' share its listing prefix, never its ids."""
    orders = _tier(tmp_path, "orders")
    eu = _tier(tmp_path, "orders-eu")
    again = _tier(tmp_path, "orders")  # re-created: a second id, written last
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    assert catalog.topic_ids("orders").keys() == {orders, again}
    assert catalog.live_topic_id("orders") == again
    assert catalog.topic_ids("orders-eu").keys() == {eu}
    assert catalog.topic_names() == ["orders", "orders-eu"]
