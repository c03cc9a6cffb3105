"""The shared planner (rsm.catalog): locations, committed segments and one history per partition.

Segments are tiered through the real RSM (file store) by `tiering.PartitionLog`, which also keeps what a
consumer of the final log would read; the catalog must reproduce exactly the offsets of that log.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.catalog import TopicCatalog
from rsm.catalog.history import resolve_history
from rsm.catalog.segments import CatalogError
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location
from rsm.store.locations import LocationRegistry
from rsm.stored.location_record import REGISTRY_DIR


def _configs(root: Path, **extra: str) -> dict[str, str]:
    return {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "bucket": "main",
        "chunk.size": "8192",
        **extra,
    }


@pytest.fixture
def rsm(tmp_path: Path):
    manager = RemoteStorageManager()
    manager.configure(_configs(tmp_path / "store"))
    yield manager
    manager.close()


def _catalog(tmp_path: Path, **kw: object) -> TopicCatalog:
    return TopicCatalog(RsmConfig(_configs(tmp_path / "store")), **kw)  # type: ignore[arg-type]


def _offsets(history) -> list[tuple[int, int]]:
    return [(s.first_offset, s.last_offset) for s in history.slices]


def test_contiguous_segments_make_one_history(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 3)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    for _ in range(3):
        log.append(40)
        log.roll()
    cat = _catalog(tmp_path)
    assert cat.topic_names() == ["orders"]
    assert cat.live_topic_id("orders") == tip.topic_id
    h = cat.histories("orders", tip.topic_id)[3]
    assert _offsets(h) == [(0, 39), (40, 79), (80, 119)]
    assert h.first_offset == 0 and h.next_offset == 120 and not h.gaps and not h.superseded


def test_a_retried_copy_is_read_once(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.append(30)
    md, data = log.roll()
    log.tier(
        md.__class__(
            **{**md.__dict__, "remote_log_segment_id": md.remote_log_segment_id.__class__(tip, uuid.uuid4())}
        ),
        data,
    )
    log.append(30)
    log.roll()
    h = _catalog(tmp_path).histories("orders", tip.topic_id)[0]
    assert _offsets(h) == [(0, 29), (30, 59)]
    assert len(h.superseded) == 1 and "held by another copy" in h.superseded[0][1]


def test_an_unclean_election_branch_is_cut_at_the_new_epoch(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    """The old leader tiered offsets 100..149 of epoch 0; the new leader (epoch 1) started at 100."""
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    old = PartitionLog(rsm, tip, tmp_path / "old")
    old.append(100)
    old.roll()
    old.append(50)
    old.roll()  # 100..149 in epoch 0: the branch that loses
    new = PartitionLog(rsm, tip, tmp_path / "new")
    new.append(100)
    new.new_epoch(1)
    new.append(80)
    new.roll(copy=True)  # 0..179 with chain {0: 0, 1: 100}
    h = _catalog(tmp_path).histories("orders", tip.topic_id)[0]
    assert h.lineage == ((0, 0), (1, 100))
    assert h.first_offset == 0 and h.next_offset == 180
    # every offset from 100 on comes from the new leader's copy
    for s in h.slices:
        if s.last_offset >= 100:
            assert s.segment.max_epoch == 1
    branch = [seg for seg, why in h.superseded if "truncated" in why]
    assert [(b.start_offset, b.end_offset) for b in branch] == [(100, 149)]


def test_a_missing_segment_is_a_gap(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    for _ in range(3):
        log.append(10)
        log.roll()
    rsm.delete_log_segment_data(log.copied[1])
    h = _catalog(tmp_path).histories("orders", tip.topic_id)[0]
    assert _offsets(h) == [(0, 9), (20, 29)] and h.gaps == ((10, 19),)


def test_locations_are_recorded_and_found_after_a_bucket_change(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    tip = TopicIdPartition(uuid.uuid4(), "payments", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.append(10)
    log.roll()
    log.log_config = {"unchecked.rsm.bucket": "pci-bucket", "unchecked.rsm.prefix": "pci/"}
    log.append(10)
    log.roll()
    registry = LocationRegistry(rsm.store, "main", "")
    assert registry.locations("payments", tip.topic_id) == [
        Location("main", ""),
        Location("pci-bucket", "pci/"),
    ]
    cat = _catalog(tmp_path, scan=False)  # the record alone finds both
    h = cat.histories("payments", tip.topic_id)[0]
    assert _offsets(h) == [(0, 9), (10, 19)]
    assert {s.segment.bucket for s in h.slices} == {"main", "pci-bucket"}


def test_a_store_without_records_is_scanned(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    """Stores tiered before the record existed: the buckets the configuration and overlays name are listed."""
    tip = TopicIdPartition(uuid.uuid4(), "legacy", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.log_config = {"unchecked.rsm.prefix": "tenant-"}  # prefix and topic run together: tenant-legacy-<id>
    log.append(10)
    log.roll()
    shutil.rmtree(tmp_path / "store" / "main" / REGISTRY_DIR.rstrip("/"))
    assert _catalog(tmp_path, scan=False).topic_ids("legacy") == {}
    cat = _catalog(tmp_path)
    assert cat.topic_names() == ["legacy"]
    assert cat.locations("legacy", tip.topic_id) == [Location("main", ""), Location("main", "tenant-")]
    assert _offsets(cat.histories("legacy", tip.topic_id)[0]) == [(0, 9)]
    assert cat.topic_ids("tenant-legacy") == {}  # the name the key suggests is confirmed by the manifest


def test_a_recreated_topic_reads_its_newest_id(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    first = TopicIdPartition(uuid.uuid4(), "events", 0)
    log = PartitionLog(rsm, first, tmp_path / "a")
    log.append(5)
    log.roll()
    import time

    time.sleep(0.01)
    second = TopicIdPartition(uuid.uuid4(), "events", 0)
    log2 = PartitionLog(rsm, second, tmp_path / "b")
    log2.append(7)
    log2.roll()
    cat = _catalog(tmp_path)
    assert set(cat.topic_ids("events")) == {first.topic_id, second.topic_id}
    assert cat.live_topic_id("events") == second.topic_id
    assert cat.histories("events", first.topic_id)[0].next_offset == 5


def test_a_manifest_under_the_wrong_key_is_refused(rsm: RemoteStorageManager, tmp_path: Path) -> None:
    a = TopicIdPartition(uuid.uuid4(), "a", 0)
    log = PartitionLog(rsm, a, tmp_path / "w")
    log.append(5)
    log.roll()
    manifest = next((tmp_path / "store").rglob("*.manifest"))
    forged = manifest.parent.parent / "1" / manifest.name
    forged.parent.mkdir()
    shutil.copy(manifest, forged)
    with pytest.raises(CatalogError, match=r"describes a-0 .* not what its key says"):
        _catalog(tmp_path).histories("a", a.topic_id)


def test_history_of_nothing_is_empty() -> None:
    h = resolve_history(0, [])
    assert h.slices == () and h.first_offset is None and h.next_offset is None


def test_an_end_offset_past_the_last_batch_does_not_hide_the_next_segment(tmp_path: Path) -> None:
    """A manifest whose metadata end offset lies past its last batch (a compacted tail; or a copy made
    before end offsets were checked) must not swallow the offsets of the segment after it."""
    import json

    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path / "store"))
    tip = TopicIdPartition(uuid.uuid4(), "holes", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    for _ in range(2):
        log.append(10)
        log.roll()
    rsm.close()
    from rsm.catalog.segments import StoredSegment
    from rsm.stored.manifest import Manifest

    first = min((tmp_path / "store").rglob("*.manifest"))
    doc = json.loads(first.read_bytes())
    doc["segment"]["end_offset"] = 15  # claims 10..15, which the next segment holds
    doc.pop("seal", None)
    doc["version"] = 1
    manifest = Manifest.from_json(doc)
    a = StoredSegment(Location("main", ""), "a", manifest)
    b = _catalog(tmp_path).segments("holes", tip.topic_id)[1]
    h = resolve_history(0, [a, b])
    assert _offsets(h) == [(0, 9), (10, 19)] and h.gaps == ()


def test_an_older_segment_with_several_epochs_is_read_whole(
    rsm: RemoteStorageManager, tmp_path: Path
) -> None:
    """Epochs 0 then 3 in one segment, 5 in the next: every epoch of the older segment is in the lineage
    (its epochs were once taken lowest first, so epoch 0 hid epoch 3 and its records were never read)."""
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.append(30)
    log.new_epoch(3)
    log.append(30)
    log.roll()
    log.new_epoch(5)
    log.append(30)
    log.roll()
    h = _catalog(tmp_path).histories("orders", tip.topic_id)[0]
    assert h.lineage == ((0, 0), (3, 30), (5, 60))
    assert _offsets(h) == [(0, 59), (60, 89)] and not h.gaps and not h.superseded
