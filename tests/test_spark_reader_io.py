"""What the source downloads: a narrow offset range reads a sliver of the topic, counted at the store.

Planning and reading run here in one process, through the very functions Spark calls on its Python
workers (`TieredBatchReader.partitions`, `read`), so the store's byte counters see every GET: manifests,
indexes and chunks.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from spark_reader import partition_reader
from spark_reader.filters import push_filters
from spark_reader.options import parse_options
from spark_reader.source import TieredBatchReader


def _stored_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_a_one_percent_offset_range_downloads_under_two_percent(tmp_path: Path) -> None:
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "chunk.size": "32768"}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "big", 0), tmp_path / "w")
    for _ in range(20):
        for _ in range(50):
            log.append(200, value_size=100, headers=False, incompressible=True)
        log.roll()
    rsm.close()
    total = _stored_bytes(tmp_path / "store")
    first, last = 100_000, 101_999  # 1% of the 200,000 offsets, in the middle of a segment
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThanOrEqual

    reader = TieredBatchReader(parse_options({**opts, "subscribe": "big"}))
    rejected = list(
        reader.pushFilters([GreaterThanOrEqual(("offset",), first), LessThanOrEqual(("offset",), last)])
    )
    assert rejected == []
    partition_reader._clients.clear()
    parts = reader.partitions()
    batches = [b for p in parts for b in reader.read(p)]
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(first, last + 1))
    assert table.column("value").to_pylist() == [r.value for r in log.records[first : last + 1]]
    ((store, _),) = partition_reader._clients.values()
    planning = reader.last_planner.catalog.store.stats.bytes_read  # manifests and indexes
    downloaded = store.stats.bytes_read + planning
    assert downloaded <= 0.02 * total, (store.stats.bytes_read, planning, total)


def test_filters_the_source_cannot_apply_go_back_to_spark() -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, StringStartsWith

    pushed, rejected = push_filters(
        [
            EqualTo(("partition",), 3),
            In(("offset",), (5, 9)),
            GreaterThan(("offset",), 4),
            EqualTo(("topic",), "x"),
            StringStartsWith(("key",), "a"),
            EqualTo(("offset",), 1.5),
        ]
    )
    assert [type(f).__name__ for f in rejected] == ["EqualTo", "StringStartsWith", "EqualTo"]
    assert pushed.partition.contains(3) and not pushed.partition.contains(2)
    assert pushed.offset.span() == (5, 9) and not pushed.offset.contains(6)
