"""`OffsetResolver`: every position rule of batch, stream and hybrid reads, without Spark or a broker.

Stores are written through the real RSM on the file store (`tiering.PartitionLog`); the store's facts are
gathered by `StoreFacts` from the planner's own selection. The brokers' side is given as the facts the
hybrid source gathers from them (their latest offset, log start, offsetsForTimes answers): what the
brokers say and how it is asked is tests/spark/test_kafka_hybrid.py's, against a real broker.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from tiering import BASE_TS, PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.config.settings import RsmConfig
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore
from spark_reader import partition_reader
from spark_reader.errors import DataLossError, ReaderError
from spark_reader.filters import PushedFilters
from spark_reader.hybrid import cut_range, tail_settings
from spark_reader.offset_resolver import OffsetResolver, PartitionFacts, StoreFacts
from spark_reader.offsets import Kind, Position
from spark_reader.options import parse_options
from spark_reader.planning import Planner

TOPIC = "orders"
EARLIEST, LATEST = Position(Kind.EARLIEST), Position(Kind.LATEST)


def _offset(n: int) -> Position:
    return Position(Kind.OFFSET, n)


def _at(ms: int) -> Position:
    return Position(Kind.TIMESTAMP, ms)


def _configs(tmp_path: Path) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}


def _tier(tmp_path: Path, *, open_txn: bool = False) -> PartitionLog:
    """Four segments of ten records, offsets 0..39, record n at BASE_TS + n; `open_txn`: a fifth segment
    of five records (40..44) of a transaction still open when it was tiered."""
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path))
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), TOPIC, 0), tmp_path / "w")
    for _ in range(4):
        log.append(10)
        log.roll()
    if open_txn:
        log.append(5, producer_id=7, transactional=True)
        log.roll()
    rsm.close()
    return log


def _resolver(tmp_path: Path, **options: str) -> tuple[OffsetResolver, PartitionFacts]:
    partition_reader._clients.clear()
    planner = Planner(parse_options({**_configs(tmp_path), "subscribe": TOPIC, **options}))
    (facts,) = StoreFacts(planner.select(PushedFilters())).gather().values()
    return OffsetResolver(planner), facts


def _span(resolver: OffsetResolver, facts: PartitionFacts, start: Position, end: Position) -> tuple[int, int]:
    resolved = resolver.range(facts, start, end)
    return resolved.start, resolved.end


def test_store_facts_resolve_every_kind_of_start_and_end(tmp_path: Path) -> None:
    _tier(tmp_path)
    resolver, facts = _resolver(tmp_path)
    assert (facts.key, facts.first_offset, facts.next_offset, facts.on_brokers) == ((TOPIC, 0), 0, 40, False)
    assert _span(resolver, facts, EARLIEST, LATEST) == (0, 40)
    assert _span(resolver, facts, _offset(25), _offset(33)) == (25, 33)
    assert _span(resolver, facts, _offset(25), _offset(400)) == (25, 40)  # an end past the store: its end
    # a timestamp is placed at the segment that reaches it; the task reading it cuts at the record
    at = resolver.range(facts, _at(BASE_TS + 25), _at(BASE_TS + 33))
    assert (at.start, at.start_timestamp, at.start_slice.segment.start_offset) == (20, BASE_TS + 25, 20)
    assert (at.end, at.end_timestamp, at.end_slice.segment.start_offset) == (40, BASE_TS + 33, 30)
    rows = [
        b.column("offset").to_pylist()
        for p in resolver.planner.plan([resolver.planner.store_range(at)], PushedFilters())
        for b in partition_reader.read_partition(p)
    ]
    assert sum(rows, []) == list(range(25, 33))
    # a stream's first offsets: the same rules, a timestamp found exactly by reading its segment
    starts = [EARLIEST, LATEST, _offset(7), _at(BASE_TS + 25), _at(BASE_TS - 1)]
    assert [resolver.resolve_start(facts, p) for p in starts] == [0, 40, 7, 25, 0]
    # a stream takes an offset as given (the micro-batch reading it checks it), a batch starts at the store's
    assert resolver.resolve_start(facts, _offset(400)) == 400


def test_a_timestamp_past_every_record_follows_the_strategy(tmp_path: Path) -> None:
    _tier(tmp_path)
    past = _at(BASE_TS + 1000)
    resolver, facts = _resolver(tmp_path)  # startingOffsetsByTimestampStrategy=error, Spark's default
    message = rf"^{TOPIC}-0: no tiered record has a timestamp >= {BASE_TS + 1000} \(startingOffsetsByTimestampStrategy=error\)$"
    with pytest.raises(ReaderError, match=message):
        resolver.range(facts, past, LATEST)
    with pytest.raises(ReaderError, match=message):
        resolver.resolve_start(facts, past)
    # the brokers asked and without an answer: their record, not the store's, is missing
    asked = PartitionFacts.of(
        facts.key, facts.store, on_brokers=True, latest=50, times={BASE_TS + 1000: None}
    )
    with pytest.raises(ReaderError, match=rf"^{TOPIC}-0: no record has a timestamp >= {BASE_TS + 1000} "):
        resolver.resolve_start(asked, past)
    resolver, facts = _resolver(tmp_path, startingOffsetsByTimestampStrategy="latest")
    assert _span(resolver, facts, past, LATEST) == (40, 40)
    assert resolver.resolve_start(facts, past) == 40
    # an end timestamp past every record: the end
    assert _span(resolver, facts, EARLIEST, past) == (0, 40)


def test_hybrid_facts_take_the_brokers_latest_log_start_and_times(tmp_path: Path) -> None:
    _tier(tmp_path)
    resolver, store = _resolver(tmp_path, **{"kafka.bootstrap.servers": "b:9092"})
    settings = tail_settings(resolver.planner.opts)
    facts = PartitionFacts.of(
        store.key, store.store, on_brokers=True, latest=55, times={BASE_TS + 47: 47, BASE_TS + 52: 52}
    )
    assert resolver.resolve_start(facts, LATEST) == 55 and resolver.resolve_start(facts, EARLIEST) == 0
    assert resolver.resolve_start(facts, _at(BASE_TS + 47)) == 47  # past the store: offsetsForTimes'
    assert _span(resolver, facts, _at(BASE_TS + 47), _at(BASE_TS + 52)) == (47, 52)
    assert _span(resolver, facts, _offset(3), _offset(400)) == (3, 55)
    # cut: what the store holds from the store, the rest one tail from the brokers
    pr, tails = cut_range(resolver, resolver.range(facts, EARLIEST, LATEST), settings, PushedFilters())
    assert (pr.start, pr.end) == (0, 40) and [(t.start, t.end) for t in tails] == [(40, 55)]
    # a timestamp end the store answers ends the read in the store
    pr, tails = cut_range(
        resolver, resolver.range(facts, EARLIEST, _at(BASE_TS + 12)), settings, PushedFilters()
    )
    assert (pr.start, pr.end, pr.end_timestamp, tails) == (0, 20, BASE_TS + 12, [])
    # a partition the store lacks: from the brokers' log start, all a tail
    lacking = PartitionFacts.of((TOPIC, 1), None, on_brokers=True, log_start=7, latest=12)
    assert resolver.resolve_start(lacking, EARLIEST) == 7
    pr, tails = cut_range(resolver, resolver.range(lacking, EARLIEST, LATEST), settings, PushedFilters())
    assert pr is None and [(t.start, t.end) for t in tails] == [(7, 12)]
    # the brokers' partition is not there (a topic the brokers lost): the store's end, no tail
    gone = PartitionFacts.of(store.key, store.store, on_brokers=False)
    pr, tails = cut_range(resolver, resolver.range(gone, EARLIEST, LATEST), settings, PushedFilters())
    assert (pr.start, pr.end, tails) == (0, 40, [])


def _hole_at_the_start(tmp_path: Path, log: PartitionLog) -> None:
    """Retention through the RSM to 10 (its mark), then 10..19 removed behind its back: the store starts
    at 20 and offsets 10..19 are a hole."""
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path))
    rsm.delete_log_segment_data(log.copied[0])
    rsm.close()
    store = ObjectStore.from_config(RsmConfig(_configs(tmp_path)))
    for key in SegmentKeys.of(Location("main", ""), log.copied[1]).all():
        assert store.delete("main", key)


def test_holes_before_the_store_are_data_loss_per_fail_on_data_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _hole_at_the_start(tmp_path, _tier(tmp_path))
    missing = rf"^{TOPIC}-0: offsets 10\.\.19 are missing from the store \("
    resolver, facts = _resolver(tmp_path)
    assert facts.first_offset == 20
    # a read from the start carries the hole: data loss where the plan reads (a stream's start: at once)
    earliest = resolver.range(facts, EARLIEST, LATEST)
    assert (earliest.start, earliest.hole_before.first_offset, earliest.hole_before.last_offset) == (
        20,
        10,
        19,
    )
    with pytest.raises(DataLossError, match=missing):
        resolver.planner.plan([resolver.planner.store_range(earliest)], PushedFilters())
    with pytest.raises(DataLossError, match=missing):
        resolver.resolve_start(facts, EARLIEST)
    with pytest.raises(DataLossError, match=missing):  # the store's first segment answers the timestamp
        resolver.resolve_start(facts, _at(BASE_TS))
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 15\.\.19 are missing from the store"):
        resolver.range(facts, _offset(15), LATEST)  # an offset inside the hole
    with pytest.raises(DataLossError, match=rf"^{TOPIC}-0: offsets 10\.\.14 are missing from the store"):
        resolver.planner.store_range(resolver.range(facts, EARLIEST, _offset(15)))  # a range wholly in it
    assert resolver.range(facts, _offset(25), LATEST).hole_before is None  # past it: nothing to say

    resolver, facts = _resolver(tmp_path, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="spark_reader.planning"):
        assert _span(resolver, facts, _offset(5), LATEST) == (20, 40)
        assert resolver.resolve_start(facts, EARLIEST) == 20
    assert f"{TOPIC}-0: offsets 10..19 are missing from the store" in caplog.text
    # below the RSM's mark is retention's, named apart from the hole
    assert f"{TOPIC}-0: offsets 5..9 are no longer in the store (earliest 20)" in caplog.text

    # the brokers' log start, when the hybrid read asked it, is measured instead of the RSM's mark
    resolver, store = _resolver(tmp_path, **{"kafka.bootstrap.servers": "b:9092"})
    facts = PartitionFacts.of(store.key, store.store, on_brokers=True, log_start=12, latest=60)
    with pytest.raises(
        DataLossError, match=rf"^{TOPIC}-0: offsets 12\.\.19 .*brokers b:9092 say the log starts at 12"
    ):
        resolver.resolve_start(facts, EARLIEST)


def test_read_committed_stops_at_the_transaction_open_at_the_stores_end(tmp_path: Path) -> None:
    _tier(tmp_path, open_txn=True)
    resolver, facts = _resolver(tmp_path)
    assert resolver.store_end(facts) == 45 and _span(resolver, facts, EARLIEST, LATEST) == (0, 45)
    resolver, facts = _resolver(tmp_path, **{"kafka.isolation.level": "read_committed"})
    assert facts.next_offset == 45 and resolver.store_end(facts) == 40
    assert _span(resolver, facts, EARLIEST, LATEST) == (0, 40)
    assert _span(resolver, facts, _offset(10), _offset(44)) == (10, 40)
    assert resolver.resolve_start(facts, LATEST) == 40
    # with the brokers (their latest is their last stable offset): the store's part stops at the open
    # transaction and the tail reads it whole, with its marker, from the brokers
    resolver, store = _resolver(
        tmp_path, **{"kafka.isolation.level": "read_committed", "kafka.bootstrap.servers": "b:9092"}
    )
    hybrid = PartitionFacts.of(store.key, store.store, on_brokers=True, latest=50)
    settings = tail_settings(resolver.planner.opts)
    pr, tails = cut_range(resolver, resolver.range(hybrid, EARLIEST, LATEST), settings, PushedFilters())
    assert (pr.start, pr.end) == (0, 40) and [(t.start, t.end) for t in tails] == [(40, 50)]
