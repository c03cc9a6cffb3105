"""No silently partial reads: holes in a partition's history and known locations that cannot be read.

Segments are tiered through the real RSM on the file store (`tiering.PartitionLog`); some are then deleted
behind the RSM's back (their objects removed from the store directly, as a lifecycle rule or a hand would),
others through the RSM as Kafka's retention does. The reader (planned and read in this process, batch and
stream), `rsm migrate verify`, `rsm store` and the catalog must all report what is missing, naming the
partition and the offsets, and never return a shorter result as if it were all.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from migrate_helpers import write_properties
from tiering import PartitionLog

from rsm import RemoteLogSegmentMetadata, RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import RemoteLogSegmentState, uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.catalog.holes import NO_SEGMENT
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.migrate.gc_records import StaleRecords
from rsm.store.layout import Location, SegmentKeys
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectStore
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.log_start import LOG_START
from spark_reader import partition_reader
from spark_reader.errors import DataLossError
from spark_reader.options import parse_options
from spark_reader.source import TieredBatchReader
from spark_reader.stream import TieredStreamReader

TOPIC = "orders"


def _configs(tmp_path: Path) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}


@pytest.fixture
def tiered(tmp_path: Path):  # noqa: ANN201
    """An RSM and a partition of four segments of ten records each: offsets 0..39."""
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path))
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), TOPIC, 0), tmp_path / "w")
    for _ in range(4):
        log.append(10)
        log.roll()
    yield rsm, log
    rsm.close()


def _behind_the_rsms_back(tmp_path: Path, md: RemoteLogSegmentMetadata) -> None:
    """Remove a segment's objects from the store directly: no delete through the RSM, no mark."""
    store = ObjectStore.from_config(RsmConfig(_configs(tmp_path)))
    for key in SegmentKeys.of(Location("main", ""), md).all():
        assert store.delete("main", key)


def _read(tmp_path: Path, **options: str) -> list[int]:
    """The offsets of every row the source gives, planned and read in this process."""
    partition_reader._clients.clear()
    reader = TieredBatchReader(parse_options({**_configs(tmp_path), "subscribe": TOPIC, **options}))
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    return sorted(pa.Table.from_batches(batches).column("offset").to_pylist()) if batches else []


def _cli(tmp_path: Path, *args: str) -> int:
    props = write_properties(tmp_path / "server.properties", _configs(tmp_path))
    return main([args[0], "--config", str(props), *args[1:]])


def _verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = _cli(tmp_path, "migrate", "verify", "--topic", TOPIC, "--json")
    return code, json.loads(capsys.readouterr().out)


def test_a_segment_deleted_behind_the_rsms_back_is_reported_never_read_around(
    tiered, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    _, log = tiered
    _behind_the_rsms_back(tmp_path, log.copied[1])  # offsets 10..19
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    (history,) = catalog.histories(TOPIC, log.tip.topic_id).values()
    (hole,) = catalog.holes(TOPIC, log.tip.topic_id, history)
    assert (hole.partition, hole.first_offset, hole.last_offset, hole.why) == (0, 10, 19, NO_SEGMENT)

    expected = (
        rf"^{TOPIC}-0: offsets 10\.\.19 are missing from the store \({NO_SEGMENT}; looked in file:main/\)"
    )
    with pytest.raises(DataLossError, match=expected):
        _read(tmp_path)
    with caplog.at_level(logging.WARNING, logger="spark_reader.planning"):
        assert _read(tmp_path, failOnDataLoss="false") == [*range(10), *range(20, 40)]
    assert f"{TOPIC}-0: offsets 10..19 are missing from the store" in caplog.text
    assert _read(tmp_path, startingOffsets=json.dumps({TOPIC: {"0": 20}})) == list(range(20, 40))

    code, report = _verify(tmp_path, capsys)
    assert code == 3 and report["ok"] is False and report["segments"] == 3
    (found,) = report["problems"]
    assert (found["kind"], found["partition"], found["first_offset"], found["last_offset"]) == (
        "hole",
        0,
        10,
        19,
    )
    assert found["why"] == NO_SEGMENT and found["object"] == "offsets 10..19"
    assert _cli(tmp_path, "migrate", "verify", "--topic", TOPIC) == 3  # the text report says it too
    text = " ".join(capsys.readouterr().out.split())
    assert f"hole │ {TOPIC}-0 │ offsets 10..19 │ {NO_SEGMENT}" in text and "problems found" in text


def test_a_start_moved_past_the_rsms_deletes_is_a_hole_retention_is_not(
    tiered, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    rsm, log = tiered
    tid = log.tip.topic_id
    rsm.delete_log_segment_data(log.copied[0])  # retention: the log starts at 10
    record_dir = f"{REGISTRY_DIR}{TOPIC}-{uuid_to_base64(tid)}/"
    assert ObjectStore.from_config(RsmConfig(_configs(tmp_path))).list("main", record_dir + LOG_START) == [
        f"{record_dir}{LOG_START}0-{10:020d}"
    ]
    _behind_the_rsms_back(tmp_path, log.copied[1])  # 10..19 gone without the RSM: the store starts at 20
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    assert catalog.recorded_starts(TOPIC, tid) == {0: 10}
    (history,) = catalog.histories(TOPIC, tid).values()
    (hole,) = catalog.holes(TOPIC, tid, history)
    assert (hole.first_offset, hole.last_offset) == (10, 19) and "moved the log start to 10 only" in hole.why

    # earliest, an offset inside the hole, and a range lying wholly in it: data loss naming the offsets
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 10\.\.19 are missing from the store \("):
        _read(tmp_path)
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 15\.\.19 are missing from the store"):
        _read(tmp_path, startingOffsets=json.dumps({TOPIC: {"0": 15}}))
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 10\.\.14 are missing from the store"):
        _read(tmp_path, endingOffsets=json.dumps({TOPIC: {"0": 15}}))
    with caplog.at_level(logging.WARNING, logger="spark_reader.planning"):
        assert _read(tmp_path, failOnDataLoss="false") == list(range(20, 40))
        # below the mark is retention's, named apart from the hole
        assert _read(tmp_path, failOnDataLoss="false", startingOffsets=json.dumps({TOPIC: {"0": 5}})) == list(
            range(20, 40)
        )
    assert "offsets 10..19 are missing from the store" in caplog.text
    assert f"{TOPIC}-0: offsets 5..9 are no longer in the store (earliest 20)" in caplog.text

    # a stream from earliest: its first offsets already report the hole
    opts = parse_options({**_configs(tmp_path), "subscribe": TOPIC, "startingOffsets": "earliest"})
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 10\.\.19 are missing from the store"):
        TieredStreamReader(opts).initialOffset()
    lenient = parse_options(
        {**_configs(tmp_path), "subscribe": TOPIC, "startingOffsets": "earliest", "failOnDataLoss": "false"}
    )
    assert TieredStreamReader(lenient).initialOffset() == {TOPIC: {"0": 20}}
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 10\.\.19 are missing from the store"):
        TieredStreamReader(opts).partitions({}, {TOPIC: {"0": 40}})  # a partition new to the query

    code, report = _verify(tmp_path, capsys)
    assert code == 3 and not report["ok"]
    assert [(h["kind"], h["first_offset"], h["last_offset"]) for h in report["problems"]] == [
        ("hole", 10, 19)
    ]
    assert _cli(tmp_path, "store", "ls", "--topic", TOPIC) == 0
    assert f"{TOPIC}-0: offsets 10..19 are missing from the store" in capsys.readouterr().out

    # retention reaching those offsets through the RSM (Kafka deletes a segment it saw copied): no hole any
    # more, and one mark per partition
    rsm.delete_log_segment_data(
        dataclasses.replace(log.copied[1], state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    )
    assert _read(tmp_path) == list(range(20, 40))
    code, report = _verify(tmp_path, capsys)
    assert code == 0 and report["ok"] and report["problems"] == []
    registry = LocationRegistry(ObjectStore.from_config(RsmConfig(_configs(tmp_path))), "main", "")
    assert registry.lookup(TOPIC, tid).log_starts == ((0, 20),)


def test_marks_only_rise_and_go_with_the_record(tiered, tmp_path: Path) -> None:  # noqa: ANN001
    rsm, log = tiered
    tid = log.tip.topic_id
    store = ObjectStore.from_config(RsmConfig(_configs(tmp_path)))
    registry = LocationRegistry(store, "main", "")
    rsm.delete_log_segment_data(log.copied[2])  # not the oldest (a copy Kafka abandoned): 30
    rsm.delete_log_segment_data(log.copied[0])  # a lower delete never lowers the mark
    assert registry.lookup(TOPIC, tid).log_starts == ((0, 30),)
    assert not registry.note_log_start(TOPIC, tid, 0, 11)
    # a mark hides loss below it (nothing is reported wrongly): the hole at 10..19 goes unreported
    _behind_the_rsms_back(tmp_path, log.copied[1])
    assert _read(tmp_path) == list(range(30, 40))
    # every segment deleted through the RSM: `rsm migrate gc` removes the marks with the record
    rsm.delete_log_segment_data(log.copied[3])
    rsm.delete_log_segment_data(log.copied[1])
    marks = [k for objs in registry.entries().values() for k in (o.key for o in objs) if LOG_START in k]
    assert marks == [f"{REGISTRY_DIR}{TOPIC}-{uuid_to_base64(tid)}/{LOG_START}0-{40:020d}"]
    records = StaleRecords(store, Location("main", ""))
    (orphan,) = records.scan()
    assert records.remove(orphan)
    assert store.list("main", f"{REGISTRY_DIR}{TOPIC}-{uuid_to_base64(tid)}/") == []


def test_a_known_location_that_cannot_be_read_is_reported(
    tiered, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    """The record names a location whose bucket is gone: its segments cannot be read, and every reader
    says so rather than return the rest as the whole topic."""
    _, log = tiered
    tid = log.tip.topic_id
    store = ObjectStore.from_config(RsmConfig(_configs(tmp_path)))
    LocationRegistry(store, "main", "").record(TOPIC, tid, Location("gone", "old/"))
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    assert sorted(catalog.histories(TOPIC, tid)) == [0]
    (lost,) = catalog.unreadable(TOPIC, tid)
    assert (lost.location, lost.named_by) == (Location("gone", "old/"), "its location record")
    assert lost.why.startswith("bucket 'gone' does not exist")

    line = (
        rf"^topic {TOPIC} \(id {uuid_to_base64(tid)}\): file:gone/old/, named by its location record, "
        r"cannot be read: bucket 'gone' does not exist"
    )
    with pytest.raises(DataLossError, match=line):
        _read(tmp_path)
    with caplog.at_level(logging.WARNING, logger="spark_reader.planning"):
        assert _read(tmp_path, failOnDataLoss="false") == list(range(40))
    assert "file:gone/old/, named by its location record, cannot be read" in caplog.text

    code, report = _verify(tmp_path, capsys)
    assert code == 3 and not report["ok"] and report["segments"] == 4
    assert [(u["kind"], u["bucket"], u["prefix"], u["named_by"]) for u in report["problems"]] == [
        ("unreadable-location", "gone", "old/", "its location record")
    ]
    for action in (["ls", "--topic", TOPIC], ["locate", "--topic", TOPIC], ["du"]):
        assert _cli(tmp_path, "store", *action) == 1, action
        err = capsys.readouterr().err
        assert err.count("cannot be read") == 1 and "file:gone/old/" in err, (action, err)
