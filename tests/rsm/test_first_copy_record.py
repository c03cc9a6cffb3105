"""A topic id's first copy vouches for its location record (`rsm.store.first_copy`), in a store that older
segments keep unmarked (no `_scanned.json`).

Copies here hand the RSM the leader-epoch checkpoint Kafka does: its whole epoch cache up to the segment's
end, whose first entry starts at the log's start offset. Older stores are simulated as the other record
tests do: the record's directory removed after the copies (what a release before the record left).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.config.settings import RsmConfig
from rsm.store import first_copy, locations
from rsm.store.first_copy import starts_the_log, topic_id_dirs
from rsm.store.objects import ObjectStore
from rsm.stored.location_record import COMPLETE_MARKER, REGISTRY_DIR, SCANNED_MARKER


def _configs(tmp_path: Path) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}


def _registry(tmp_path: Path) -> Path:
    return tmp_path / "store" / "main" / REGISTRY_DIR.rstrip("/")


def _marker(tmp_path: Path, topic: str, tip: TopicIdPartition) -> Path:
    return _registry(tmp_path) / f"{topic}-{uuid_to_base64(tip.topic_id)}" / COMPLETE_MARKER


def _copy_like_kafka(log: PartitionLog, log_start: int = 0) -> None:
    """Roll a segment and copy it with Kafka's checkpoint: the epoch cache from the log's start offset up
    to the segment's end (tests/tiering.py hands only the segment's own epochs)."""
    md, data = log.roll(copy=False)
    entries = sorted((e, max(o, log_start)) for e, o in log.epochs.items() if o <= md.end_offset)
    checkpoint = f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)
    log.tier(md, dataclasses.replace(data, leader_epoch_index=checkpoint.encode()))


def _tier(
    tmp_path: Path,
    topic: str,
    segments: int = 2,
    *,
    topic_id: uuid.UUID | None = None,
    partition: int = 0,
    log_start: int = 0,
    **log_config: str,
) -> TopicIdPartition:
    """`segments` segments of 5 records copied by a broker's RSM (a process of its own), the first at
    `log_start`."""
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path))
    try:
        tip = TopicIdPartition(topic_id or uuid.uuid4(), topic, partition)
        log = PartitionLog(rsm, tip, tmp_path / "w" / f"{topic}-{partition}-{uuid.uuid4().hex[:6]}")
        log.next_offset = log_start
        log.epochs = {0: log_start}
        log.log_config = log_config or None
        for _ in range(segments):
            log.append(5)
            _copy_like_kafka(log, log_start)
        return tip
    finally:
        rsm.close()  # waits for the background vouching


def _older_store(tmp_path: Path) -> None:
    """A store an older release wrote: a topic's segments, no location record (so no marker)."""
    _tier(tmp_path, "old", 1, **{"unchecked.rsm.prefix": "x/"})
    shutil.rmtree(_registry(tmp_path))


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The buckets readers list whole (the real scan, observed)."""
    seen: list[str] = []
    real: Callable[..., Any] = locations.scan_bucket

    def observed(store: ObjectStore, bucket: str) -> Any:
        seen.append(bucket)
        return real(store, bucket)

    monkeypatch.setattr("rsm.catalog.catalog.scan_bucket", observed)
    return seen


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The buckets whose directories a copy's vouching walked (the real walk, observed)."""
    seen: list[str] = []
    real: Callable[..., Any] = first_copy.topic_id_dirs

    def observed(store: ObjectStore, bucket: str, topic_id: uuid.UUID, budget: int = 32) -> Any:
        seen.append(bucket)
        return real(store, bucket, topic_id, budget)

    monkeypatch.setattr(first_copy, "topic_id_dirs", observed)
    return seen


def _offsets(tmp_path: Path, topic: str) -> dict[int, tuple[int | None, int | None]]:
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    tid = catalog.live_topic_id(topic)
    return {p: (h.first_offset, h.next_offset) for p, h in catalog.histories(topic, tid).items()}


def test_a_topic_id_born_in_an_unmarked_store_is_marked_by_its_first_copy(
    tmp_path: Path, scans: list[str], walks: list[str]
) -> None:
    _older_store(tmp_path)
    new = _tier(tmp_path, "orders", 3, **{"unchecked.rsm.prefix": "y/"})
    assert not (_registry(tmp_path) / SCANNED_MARKER).exists()  # older segments: the store is unmarked
    marker = json.loads(_marker(tmp_path, "orders", new).read_bytes())
    assert marker["by"] == "copy" and marker["buckets"] == ["main"]
    assert walks == ["main"]  # once, for the first copy: its next ones wrote no entry
    # so plans of it list no bucket whole; the older topic's still do
    assert _offsets(tmp_path, "orders") == {0: (0, 15)}
    assert scans == []
    assert _offsets(tmp_path, "old") == {0: (0, 5)}
    assert scans == ["main"]


def test_a_topic_id_an_older_release_wrote_elsewhere_is_not_marked(tmp_path: Path, scans: list[str]) -> None:
    """Partition 1 tiered by an older release under another prefix (the default changed since), partition
    0's first segment copied now: the copy starts its own partition's log, but the id is not new."""
    tid = uuid.uuid4()
    _tier(tmp_path, "orders", 2, topic_id=tid, partition=1, **{"unchecked.rsm.prefix": "x/"})
    shutil.rmtree(_registry(tmp_path))
    tip = _tier(tmp_path, "orders", 2, topic_id=tid, partition=0)
    assert not _marker(tmp_path, "orders", tip).exists()
    assert _offsets(tmp_path, "orders") == {0: (0, 10), 1: (0, 10)}  # the scan still finds partition 1
    assert scans == ["main"]


def test_a_topic_id_an_older_release_wrote_where_its_record_points_is_marked(tmp_path: Path) -> None:
    """Everything an older release wrote of the id lies where the record now names: the record is whole,
    as `rsm store locate --record` would find it."""
    tid = uuid.uuid4()
    _tier(tmp_path, "orders", 2, topic_id=tid, partition=1)
    shutil.rmtree(_registry(tmp_path))
    tip = _tier(tmp_path, "orders", 1, topic_id=tid, partition=0)
    assert json.loads(_marker(tmp_path, "orders", tip).read_bytes())["by"] == "copy"
    assert _offsets(tmp_path, "orders") == {0: (0, 5), 1: (0, 10)}


def test_a_copy_past_its_partitions_log_start_vouches_for_nothing(tmp_path: Path, walks: list[str]) -> None:
    """Its checkpoint starts before it: earlier offsets of the partition were tiered (here by an older
    release, which recorded nothing), so the id is not new, and that is known without a request."""
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    log = PartitionLog(RemoteStorageManager(), tip, tmp_path / "w" / "orders")
    for release in ("older", "this"):
        log.rsm.configure(_configs(tmp_path))
        log.append(5)
        _copy_like_kafka(log)
        log.rsm.close()
        if release == "older":
            shutil.rmtree(_registry(tmp_path))
            walks.clear()
            log.rsm = RemoteStorageManager()
    assert not _marker(tmp_path, "orders", tip).exists()
    assert walks == []
    assert _offsets(tmp_path, "orders") == {0: (0, 10)}


def test_a_store_marked_whole_needs_no_topic_marker(tmp_path: Path, walks: list[str]) -> None:
    tip = _tier(tmp_path, "orders", 1)
    assert (_registry(tmp_path) / SCANNED_MARKER).exists()  # recorded from its first segment
    assert not _marker(tmp_path, "orders", tip).exists()
    assert walks == []  # the store-wide marker vouches already: nothing is walked


def test_the_checkpoint_tells_a_partitions_first_segment() -> None:
    assert starts_the_log(0, b"0\n1\n0 0\n")
    assert starts_the_log(120, b"0\n2\n3 120\n4 130\n")  # retention moved the log start to 120
    assert not starts_the_log(130, b"0\n2\n3 120\n4 130\n")
    assert not starts_the_log(0, b"0\n0\n")  # an empty checkpoint says nothing
    assert not starts_the_log(0, b"garbage")


def test_the_walk_lists_directory_names_only_and_within_its_budget(tmp_path: Path) -> None:
    store = ObjectStore.from_config(RsmConfig(_configs(tmp_path)))
    tid, other = uuid.uuid4(), uuid.uuid4()
    t, o = uuid_to_base64(tid), uuid_to_base64(other)
    for key in (
        f"a/b/orders-{t}/0/x.manifest",  # found under a deep prefix
        f"tenant-orders-{t}/1/x.manifest",  # a prefix without '/' runs into the name
        f"orders-{o}/0/x.manifest",  # another id: not entered
        f"_rsm/topic-locations/orders-{t}/e.json",  # the store's own documents: not entered
    ):
        store.put("main", key, b"{}")
    assert sorted(topic_id_dirs(store, "main", tid) or []) == [f"a/b/orders-{t}/", f"tenant-orders-{t}/"]
    before = store.stats.lists
    assert topic_id_dirs(store, "main", tid, budget=2) is None  # root, a/, a/b/: over the budget
    assert store.stats.lists - before == 3
