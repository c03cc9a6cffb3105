"""What the source downloads: a narrow offset range reads a sliver of the topic, counted at the store.

Planning and reading run here in one process, through the very functions Spark calls on its Python
workers (`FilteringBatchReader.partitions`, `read`), so the store's byte counters see every GET: manifests,
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
from spark_reader.source import FilteringBatchReader


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

    reader = FilteringBatchReader(parse_options({**opts, "subscribe": "big"}))
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
    print(
        f"downloaded {downloaded:,} of {total:,} stored bytes ({downloaded / total:.2%}): chunks {store.stats.bytes_read:,}, planning {planning:,}"
    )
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


def _read_all(reader: FilteringBatchReader) -> pa.Table:
    return pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])


def test_violations_include_drop_or_flag(tmp_path: Path) -> None:
    """A segment tiered with a violation report: readers include, drop or flag the records it names."""
    opts = {
        "storage.backend": "file",
        "storage.file.root": str(tmp_path / "store"),
        "record.validation.policy.class.name": "rsm.validation:RequireHeaderValidationPolicy",
    }
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "checked", 0), tmp_path / "w")
    log.log_config = {
        "unchecked.record.validation.policy": "h",
        "unchecked.rsm.record.validation.on.violation": "tier",
    }
    log.append(30)  # records at offsets divisible by 3 carry header "h"; the others violate the policy
    log.roll()
    rsm.close()
    read_opts = {k: v for k, v in opts.items() if not k.startswith("record.")}
    bad = [o for o in range(30) if o % 3]

    def read(mode: str) -> pa.Table:
        return _read_all(
            FilteringBatchReader(parse_options({**read_opts, "subscribe": "checked", "violations": mode}))
        )

    assert read("include").column("offset").to_pylist() == list(range(30))
    assert read("drop").column("offset").to_pylist() == [o for o in range(30) if o % 3 == 0]
    flagged = read("flag")
    reasons = dict(
        zip(flagged.column("offset").to_pylist(), flagged.column("violation").to_pylist(), strict=True)
    )
    assert [o for o, why in reasons.items() if why] == bad
    assert "requires records to contain a header with key: h" in reasons[1]


def test_a_segment_deleted_after_planning_fails_or_is_skipped(tmp_path: Path) -> None:
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "shrinking", 0), tmp_path / "w")
    for _ in range(2):
        log.append(10)
        log.roll()
    import pytest

    from spark_reader.errors import DataLossError

    for fail in ("true", "false"):
        reader = FilteringBatchReader(
            parse_options({**opts, "subscribe": "shrinking", "failOnDataLoss": fail})
        )
        parts = reader.partitions()
        if fail == "false":
            rsm.delete_log_segment_data(log.copied[0])
        if fail == "true":
            (tmp_path / "store").joinpath(
                "kafka-tiered-storage", parts[0].split.manifest.location["log"]
            ).unlink()
            with pytest.raises(
                DataLossError,
                match=r"shrinking-0: segment file:.*\.log was deleted after the query was planned",
            ):
                list(reader.read(parts[0]))
        else:
            assert [b.num_rows for b in reader.read(parts[0])] == []
            assert sum(b.num_rows for b in reader.read(parts[1])) == 10
    rsm.close()


def test_a_corrupt_chunk_is_named_and_yields_no_rows(tmp_path: Path) -> None:
    import pytest

    from spark_reader.errors import ReaderError

    opts = {
        "storage.backend": "file",
        "storage.file.root": str(tmp_path / "store"),
        "compression.enabled": "false",
    }
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "rotten", 0), tmp_path / "w")
    log.append(50)
    log.roll()
    rsm.close()
    (log_object,) = (tmp_path / "store").rglob("*.log")
    data = bytearray(log_object.read_bytes())
    data[len(data) // 2] ^= 0x40
    log_object.write_bytes(bytes(data))
    reader = FilteringBatchReader(parse_options({**opts, "subscribe": "rotten"}))
    (part,) = reader.partitions()
    rows = []
    with pytest.raises(ReaderError, match=r"corrupt data in file:kafka-tiered-storage/rotten-.*\.log"):
        rows += list(reader.read(part))
    assert rows == []
