"""Planning that does not grow with history: a narrow plan reads the manifests of its range.

The planner's store counts its requests (`IOStats`: GETs and listing pages), so these tests count what a
plan costs, through the very functions Spark calls (`TieredBatchReader.partitions`, the stream reader's
`latestOffset` and `partitions`), and check that the ranged answers are the whole history's: the same
slices and gaps for every range, with retried copies, an unclean election, compacted offsets and a hole.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from tiering import BASE_TS, PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.catalog import TopicCatalog
from rsm.catalog.splits import SegmentIndexes
from rsm.config.settings import RsmConfig
from spark_reader.options import parse_options
from spark_reader.source import TieredBatchReader
from spark_reader.stream import TieredStreamReader


def _store(tmp_path: Path) -> tuple[RemoteStorageManager, dict[str, str]]:
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    return rsm, opts


def _long_history(
    tmp_path: Path, segments: int, per_segment: int = 5
) -> tuple[RemoteStorageManager, dict[str, str], PartitionLog]:
    rsm, opts = _store(tmp_path)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "history", 0), tmp_path / "w")
    for _ in range(segments):
        log.append(per_segment, value_size=20, headers=False)
        log.roll()
    return rsm, opts, log


def _plan(opts: dict[str, str], **options: str) -> tuple[TieredBatchReader, list[object], dict[str, int]]:
    reader = TieredBatchReader(parse_options({**opts, "subscribe": "history", **options}))
    parts = list(reader.partitions())
    assert reader.last_planner is not None
    return reader, parts, reader.last_planner.catalog.store.stats.snapshot()


def _offsets(reader: TieredBatchReader, parts: list[object]) -> list[int]:
    table = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
    return table.column("offset").to_pylist()


def test_a_narrow_plan_reads_the_manifests_of_its_range(tmp_path: Path) -> None:
    rsm, opts, log = _long_history(tmp_path, 200)
    rsm.close()
    full_reader, full_parts, full = _plan(opts)
    assert _offsets(full_reader, full_parts) == list(range(1000))
    assert full["reads"] >= 200  # every manifest

    first, last = 500, 539  # 4% of the offsets: 8 segments
    narrow_reader, parts, narrow = _plan(
        opts,
        startingOffsets=json.dumps({"history": {"0": first}}),
        endingOffsets=json.dumps({"history": {"0": last + 1}}),
    )
    assert _offsets(narrow_reader, parts) == list(range(first, last + 1))
    # 8 segments' manifests and offset indexes, a base before, the first and last copies, the newest
    # copies and the newest copy's epoch checkpoint: a constant over the range, not the 200 segments
    assert narrow["reads"] <= 2 * 8 + 16, narrow
    assert narrow["reads"] * 5 < full["reads"], (narrow, full)
    assert narrow["lists"] == full["lists"], (narrow, full)  # the same listings: records, overlays, keys

    # a timestamp finds its segment by bisection: log2(200) manifests, not a scan
    ts_reader, ts_parts, by_time = _plan(
        opts, startingTimestamp=str(BASE_TS + 700), endingOffsets=json.dumps({"history": {"0": 705}})
    )
    assert _offsets(ts_reader, ts_parts) == list(range(700, 705))
    assert by_time["reads"] <= 8 + 2 * 2 + 16, by_time


def test_a_stream_trigger_reads_what_is_new_whatever_lies_behind(tmp_path: Path) -> None:
    costs = []
    for segments in (40, 400):
        rsm, opts, log = _long_history(tmp_path / str(segments), segments)
        reader = TieredStreamReader(
            parse_options({**opts, "subscribe": "history", "startingOffsets": "latest"})
        )
        start = reader.initialOffset()
        for _ in range(3):  # the segments this trigger finds
            log.append(5, value_size=20, headers=False)
            log.roll()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        before = reader.last_planner.catalog.store.stats.snapshot()
        parts = reader.partitions(start, end)
        trigger = reader.last_planner.catalog.store.stats.snapshot()
        rows = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
        assert rows.column("offset").to_pylist() == list(range(segments * 5, segments * 5 + 15))
        costs.append((before["reads"] + trigger["reads"], before["lists"] + trigger["lists"]))
        rsm.close()
    (small_reads, small_lists), (big_reads, big_lists) = costs
    assert big_reads <= small_reads + 2 and big_lists == small_lists, costs


def test_the_columnar_scans_stream_requests_remember_where_to_list_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on the columnar scan's path: the JVM asks for a trigger's offsets and plan in requests of
    their own (`jvm_ops`), and the worker keeps the stream reader between them, so each of the trigger's
    listings starts from where the last request left off (`TieredStreamReader._after`), not at the
    partition's first key. (On a file store a listing is one request whatever it returns, so the costs
    above cannot tell; what the listings are told to skip can.)"""
    import pickle

    from spark_reader import jvm_ops
    from spark_reader.partition_reader import read_partition

    told: list = []
    after = TieredStreamReader._after

    def recorded(self: TieredStreamReader, begin):  # noqa: ANN001, ANN202
        told.append(after(self, begin))
        return told[-1]

    monkeypatch.setattr(TieredStreamReader, "_after", recorded)
    rsm, opts, log = _long_history(tmp_path, 40)
    header = {"options": {**opts, "subscribe": "history", "startingOffsets": "latest"}}
    start = jvm_ops.call("stream.initial", header, b"")[0]["offset"]
    for _ in range(3):
        log.append(5, value_size=20, headers=False)
        log.roll()
    told.clear()
    end = jvm_ops.call("stream.latest", {**header, "start": start}, b"")[0]["offset"]
    _, blobs = jvm_ops.call("stream.partitions", {**header, "start": start, "end": end}, b"")
    rows = pa.Table.from_batches([b for blob in blobs for b in read_partition(pickle.loads(blob))])
    assert rows.column("offset").to_pylist() == list(range(200, 215))
    assert len(told) == 2 and all(t and all(base > 0 for base in t.values()) for t in told), told
    rsm.close()


def _tricky_partition(tmp_path: Path) -> tuple[RemoteStorageManager, dict[str, str], TopicIdPartition]:
    """Retried copies, an unclean election, compacted offsets and a segment lost from the store."""
    rsm, opts = _store(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "history", 0)
    old = PartitionLog(rsm, tip, tmp_path / "old")
    for i in range(6):
        old.append(10, value_size=20)
        if i == 2:
            old.compact_away(4)
        md, data = old.roll()
        if i % 2 == 0:  # tiered again under a new id (the broker died before recording the first)
            old.tier(
                dataclasses.replace(
                    md, remote_log_segment_id=dataclasses.replace(md.remote_log_segment_id, id=uuid.uuid4())
                ),
                data,
            )
    # an unclean election: the new leader had offsets up to 35 only, its epoch 1 starts there
    new = PartitionLog(rsm, tip, tmp_path / "new")
    for _ in range(3):
        new.append(10, value_size=20)
        if new.next_offset == 20:
            new.compact_away(4)
        new.roll(copy=False)
    new.append(2, value_size=20)
    new.new_epoch(1)
    for _ in range(5):
        new.append(9, value_size=20)
        new.roll()
    lost = new.copied[2]  # a segment of the new leader's whose manifest is gone: a hole
    rsm.delete_log_segment_data(lost)
    return rsm, opts, tip


@pytest.mark.parametrize("probe", [False, True], ids=["listed", "probed"])
def test_ranged_answers_are_the_whole_history_s(tmp_path: Path, probe: bool) -> None:
    rsm, opts, tip = _tricky_partition(tmp_path)
    rsm.close()
    catalog = TopicCatalog(RsmConfig(opts))  # type: ignore[arg-type]
    full = catalog.histories("history", tip.topic_id)[0]
    assert full.gaps, "the deleted segment leaves a hole"

    def cache(seg):  # noqa: ANN001, ANN202
        return SegmentIndexes(catalog.store, seg, None).leader_epochs()

    def view():  # noqa: ANN202
        return catalog.ranged_histories("history", tip.topic_id, epoch_cache=cache, probe=probe)[0]

    def shape(slices):  # noqa: ANN001, ANN202
        return [(s.first_offset, s.last_offset, s.segment.end_offset) for s in slices]

    ranged = view()
    assert (ranged.first_offset, ranged.next_offset) == (full.first_offset, full.next_offset)
    end = full.next_offset
    assert end is not None
    for lo in range(0, end, 3):
        for hi in range(lo, end, 7):
            fresh = view()  # nothing cached from another range
            assert shape(fresh.between(lo, hi)) == shape(full.between(lo, hi)), (lo, hi)
            assert fresh.gaps_between(lo, hi) == full.gaps_between(lo, hi), (lo, hi)
    for ts in (BASE_TS - 1, BASE_TS + 17, BASE_TS + 40, BASE_TS + 70, BASE_TS + 10_000):
        got, want = view().first_at_timestamp(ts), full.first_at_timestamp(ts)
        assert (got is None) == (want is None) and (got is None or shape([got]) == shape([want])), ts
    # the whole-history questions still get the whole history
    assert shape(view().slices) == shape(full.slices) and view().gaps == full.gaps


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_narrow_read_committed_plan_bounds_its_transaction_search(tmp_path: Path, isolation: str) -> None:
    rsm, opts = _store(tmp_path)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "history", 0), tmp_path / "w")
    for i in range(60):
        if i == 30:
            log.append(5, producer_id=7, transactional=True)  # aborted three segments later
            log.roll()
            for _ in range(2):
                log.append(5)
                log.roll()
            log.end_txn(7, commit=False)
        log.append(5)
        log.roll()
    rsm.close()
    start = 150
    reader, parts, stats = _plan(
        opts,
        startingOffsets=json.dumps({"history": {"0": start}}),
        endingOffsets=json.dumps({"history": {"0": start + 10}}),
        **{"kafka.isolation.level": isolation},
    )
    got = _offsets(reader, parts)
    expected = [r.offset for r in log.consumer_rows(read_committed=isolation == "read_committed")]
    assert got == [o for o in expected if start <= o < start + 10]
    if isolation == "read_committed":
        assert stats["reads"] <= 40, stats  # indexes up to the abort marker, not the 60 segments


def test_a_manifest_named_without_its_base_offset_is_planned_from_every_manifest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rsm, opts, log = _long_history(tmp_path, 12)
    rsm.close()
    manifest = sorted((tmp_path / "store" / "main").rglob("*.manifest"))[5]
    manifest.rename(manifest.with_name("legacy-" + manifest.name.split("-", 1)[1]))
    reader, parts, _ = _plan(opts, startingOffsets=json.dumps({"history": {"0": 27}}))
    assert _offsets(reader, parts) == list(range(27, 60))
    assert "carry no base offset; this partition is planned from every manifest" in caplog.text


def test_pushed_offset_filters_narrow_what_planning_reads(tmp_path: Path) -> None:
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from spark_reader.source import FilteringBatchReader

    rsm, opts, log = _long_history(tmp_path, 200)
    rsm.close()
    reader = FilteringBatchReader(parse_options({**opts, "subscribe": "history"}))
    assert list(reader.pushFilters([GreaterThanOrEqual(("offset",), 700), LessThan(("offset",), 720)])) == []
    parts = list(reader.partitions())
    assert _offsets(reader, parts) == list(range(700, 720))
    assert reader.last_planner is not None
    assert reader.last_planner.catalog.store.stats.snapshot()["reads"] <= 2 * 4 + 16


def test_probed_listings_find_ranges_ends_and_timestamps_in_a_long_history(tmp_path: Path) -> None:
    rsm, opts, log = _long_history(tmp_path, 300, per_segment=7)
    rsm.close()
    catalog = TopicCatalog(RsmConfig(opts))  # type: ignore[arg-type]
    tid = log.tip.topic_id
    full = catalog.histories("history", tid)[0]

    def shape(slices):  # noqa: ANN001, ANN202
        return [(s.first_offset, s.last_offset, s.segment.start_offset) for s in slices]

    for lo, hi in [(0, 6), (5, 30), (700, 720), (1043, 1049), (2093, 2099), (1500, 2099)]:
        view = catalog.ranged_histories("history", tid, probe=True)[0]
        assert (view.first_offset, view.next_offset) == (0, 2100)
        assert shape(view.between(lo, hi)) == shape(full.between(lo, hi)), (lo, hi)
        assert view.listed_from_start is False or hi - lo > 500  # a narrow range lists around itself
    view = catalog.ranged_histories("history", tid, probe=True)[0]
    got = view.first_at_timestamp(BASE_TS + 1000)
    assert got is not None and shape([got]) == shape([full.first_at_timestamp(BASE_TS + 1000)])
    walked = catalog.ranged_histories("history", tid, probe=True)[0].walk(2000)
    assert [s.segment.start_offset for s in walked] == [s.segment.start_offset for s in full.walk(2000)]


def test_a_probed_timestamp_lookup_lists_no_partition_whole(tmp_path: Path) -> None:
    """Bisection over offsets, a probe of a few keys a step (S3's way), in a history of 300 segments."""
    rsm, opts, log = _long_history(tmp_path, 300, per_segment=7)
    rsm.close()
    catalog = TopicCatalog(RsmConfig(opts))  # type: ignore[arg-type]
    full = catalog.histories("history", log.tip.topic_id)[0]
    asked: list[int] = []
    for ts in (BASE_TS, BASE_TS + 7, BASE_TS + 1000, BASE_TS + 1049, BASE_TS + 2099, BASE_TS + 5000):
        view = catalog.ranged_histories("history", log.tip.topic_id, probe=True)[0]
        probe = view._probe  # noqa: SLF001 - the probes it makes, counted
        assert probe is not None

        def counted(base: int | None, limit: int, probe=probe) -> tuple[list, int]:  # noqa: ANN001
            asked.append(limit)
            return probe(base, limit)

        view._probe = counted  # noqa: SLF001
        got, want = view.first_at_timestamp(ts), full.first_at_timestamp(ts)
        assert (got is None) == (want is None), ts
        assert got is None or (got.first_offset, got.segment.start_offset) == (
            want.first_offset,
            want.segment.start_offset,
        ), ts
        assert not view.listed_from_start, ts  # the whole partition was never listed
    # each lookup: its first copies, its last (from their end), then a probe of 60 keys a bisection step
    # (log2 of 300 segments / 20 copies a probe): at most 8, none a whole listing
    assert max(asked) <= 1000 and len(asked) <= 6 * 8, asked
