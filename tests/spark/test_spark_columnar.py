"""The columnar scan: what it adds over the Python Data Source, beyond the shared reader tests
(tests/spark/test_spark_reader*.py run every case on both paths).

- `count()` from batch headers: `counting.count_partition` equals `counting.reference_count` (the reader
  itself) on every split of plans that cut batches, drop transactions and filter offsets, and decompresses
  nothing where headers suffice; in Spark, a count reports zero decompressed payloads in its SQL metrics;
- both paths give identical rows for pruned columns, filters and counts, and `explain()` says which path;
- a DataFrame queried twice plans afresh (the Python path's replayed pushdown does not exist here);
- `Trigger.AvailableNow` honours `maxOffsetsPerTrigger` (several micro-batches, same rows).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tiering import BASE_TS, PartitionLog, tier_mixed_topic

from rsm import RemoteStorageManager, TopicIdPartition

TOPIC = "columnar"


@pytest.fixture(scope="module")
def both(spark):  # noqa: ANN001, ANN201
    """The suite's session with the source registered; each test picks the path (`use_path`) itself."""
    from harness.spark import use_path

    import spark_reader

    spark_reader.register(spark)
    yield spark
    use_path(spark, "python")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[PartitionLog]]:
    base = tmp_path_factory.mktemp("columnar-store")
    opts = {"storage.backend": "file", "storage.file.root": str(base / "store"), "bucket": "main"}
    logs = tier_mixed_topic(base, TOPIC, opts, records=90, tail_records=40, txn_partition=1)
    return opts, logs


def _plan(opts: dict[str, str], filters: list | None = None, **options: str) -> list:
    from spark_reader.options import parse_options
    from spark_reader.source import FilteringBatchReader

    reader = FilteringBatchReader(parse_options({**opts, "subscribe": TOPIC, **options}))
    list(reader.pushFilters(filters or []))
    return list(reader.partitions())


def test_counts_from_headers_equal_the_reader_and_decompress_nothing(store) -> None:  # noqa: ANN001
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from segment_format.columnar import decompressed_sections
    from spark_reader.counting import count_partition, reference_count

    opts, logs = store
    plans = {
        "whole": _plan(opts),
        "read_committed": _plan(opts, **{"kafka.isolation.level": "read_committed"}),
        "small splits": _plan(opts, maxRecordsPerPartition="50"),
        "mid-batch offsets": _plan(opts, startingOffsets=f'{{"{TOPIC}":{{"0":7,"1":101,"2":-2}}}}'),
        "offset filter": _plan(opts, [GreaterThanOrEqual(("offset",), 33), LessThan(("offset",), 250)]),
        "timestamps": _plan(opts, startingTimestamp=str(BASE_TS + 150)),
    }
    for name, parts in plans.items():
        assert parts, name
        for part in parts:
            before = decompressed_sections()
            counted = count_partition(part)
            by_headers = decompressed_sections() - before
            assert counted == reference_count(part), (name, part)
            if name in ("whole", "read_committed"):
                assert by_headers == 0, (name, part)
    whole = sum(count_partition(p) for p in plans["whole"])
    assert whole == sum(len(log.consumer_rows(False)) for log in logs)
    committed = sum(count_partition(p) for p in plans["read_committed"])
    assert committed == sum(len(log.consumer_rows(True)) for log in logs) < whole
    before = decompressed_sections()
    sum(reference_count(p) for p in plans["whole"])
    assert decompressed_sections() > before  # the reader does decompress: the counter counts


def _read(spark, opts: dict[str, str], **options: str):  # noqa: ANN001, ANN202
    return (
        spark.read.format("kafka-tiered").options(**opts).option("subscribe", TOPIC).options(**options).load()
    )


def _run(df) -> tuple[list, str, dict[str, int]]:  # noqa: ANN001
    """(the rows, the executed plan, the scan's SQL metrics) of `df`, run with adaptive execution off (so
    the executed plan is the one that ran, not a wrapper)."""
    rows = _sorted(df.collect())
    plan = df._jdf.queryExecution().executedPlan()
    text = plan.toString()
    leaves = plan.collectLeaves()
    metrics = {}
    for i in range(leaves.size()):
        node = leaves.apply(i)
        it = node.metrics().iterator()
        while it.hasNext():
            pair = it.next()
            metrics[pair._1()] = int(pair._2().value())
    return rows, text, metrics


def _sorted(rows: list) -> list:  # noqa: ANN001
    return sorted((tuple(r) for r in rows), key=repr)


def test_both_paths_give_the_same_rows_and_explain_says_which(both, store) -> None:  # noqa: ANN001
    from harness.spark import use_path

    opts, _ = store
    spark = both
    queries = {
        "values": lambda df: df.select("value", "offset", *(["headers"] if "headers" in df.columns else [])),
        "no value": lambda df: df.select("partition", "offset", "timestamp", "timestampType", "topic").where(
            "offset % 7 = 3"
        ),
        "filtered": lambda df: df.where("partition = 1 and offset >= 95 and offset < 240").select(
            "key", "offset"
        ),
        "count": lambda df: df.groupBy().count(),
        "count filtered": lambda df: df.where("offset in (1, 50, 160)").groupBy().count(),
    }
    # one set of options (the reader tests run every option on both paths): headers, aborted records dropped
    options = [{"includeHeaders": "true", "kafka.isolation.level": "read_committed"}]
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    results: dict[str, dict] = {}
    try:
        for path in ("python", "columnar"):
            use_path(spark, path)
            got = results[path] = {}
            for i, extra in enumerate(options):
                for name, query in queries.items():
                    df = query(_read(spark, opts, **extra))
                    got[(i, name)], text, metrics = _run(df)
                    assert ("KafkaTieredColumnarScan" in text) == (path == "columnar"), text
                    if path == "columnar" and name == "count":
                        assert "countFromHeaders" in text and metrics["decompressedSections"] == 0, metrics
                    if path == "columnar" and name == "values":
                        assert metrics["decompressedSections"] > 0  # the codecs are mixed: values are read
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
        use_path(spark, "python")
    assert results["python"] == results["columnar"]
    assert results["columnar"][(0, "count")] == [(len(results["columnar"][(0, "values")]),)]


def test_a_dataframe_queried_again_plans_afresh(both, store) -> None:  # noqa: ANN001
    """The Python path with pushdown on replays a filtered plan (spark_reader/pushdown.py); the columnar
    scan plans per query, whatever that setting."""
    from harness.spark import use_path

    opts, logs = store
    use_path(both, "columnar")
    both.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = _read(both, opts)
        assert df.where("offset < 10").count() == 30
        assert df.count() == sum(len(log.consumer_rows(False)) for log in logs)
    finally:
        both.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_available_now_honours_max_offsets_per_trigger(both, tmp_path: Path) -> None:  # noqa: ANN001
    """A backfill with Trigger.AvailableNow runs in micro-batches of maxOffsetsPerTrigger on the columnar
    scan and on the Python Data Source (both SupportsTriggerAvailableNow) and stops at the end it saw when
    it started; the rows and the micro-batches are the same on both paths."""
    from harness.spark import use_path

    rsm = RemoteStorageManager()
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "backfill", 0), tmp_path / "w")
    for _ in range(3):
        log.append(100)
        log.roll()
    rsm.close()
    written = {}
    batches = {}
    for path in ("python", "columnar"):
        use_path(both, path)
        out, checkpoint = tmp_path / f"out-{path}", tmp_path / f"cp-{path}"
        stream = (
            both.readStream.format("kafka-tiered").options(**opts)
            .option("subscribe", "backfill").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "70").load()
        )  # fmt: skip
        query = (
            stream.select("offset", "value").writeStream.format("parquet").option("path", str(out))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(300)
        batches[path] = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        written[path] = sorted(tuple(r) for r in both.read.parquet(str(out)).collect())
    assert written["python"] == written["columnar"]
    assert [w[0] for w in written["columnar"]] == list(range(300))
    assert batches["columnar"] == batches["python"] == [70, 70, 70, 70, 20], batches


def test_violations_and_corrupt_data_are_the_same_on_both_paths(both, tmp_path: Path) -> None:  # noqa: ANN001
    """violations=include|drop|flag give the same rows and counts on both paths (a count with dropped
    records is counted by reading: headers cannot say which offsets were dropped), and a corrupt segment is
    the same one-line error."""
    from harness.spark import use_path

    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(
        {**opts, "record.validation.policy.class.name": "rsm.validation:RequireHeaderValidationPolicy"}
    )
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "checked", 0), tmp_path / "w")
    log.log_config = {
        "unchecked.record.validation.policy": "h",
        "unchecked.rsm.record.validation.on.violation": "tier",
    }
    log.append(30, codec=4)  # offsets divisible by 3 carry header "h"; the others violate the policy
    log.roll()
    rsm.close()
    rsm = RemoteStorageManager()
    rsm.configure({**opts, "compression.enabled": "false"})  # the flipped bit lands in a batch as stored
    rotten = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "rotten", 0), tmp_path / "r")
    rotten.append(50)
    rotten.roll()
    rsm.close()
    (log_object,) = [p for p in (tmp_path / "store").rglob("*.log") if "rotten" in str(p)]
    data = bytearray(log_object.read_bytes())
    data[len(data) // 2] ^= 0x40
    log_object.write_bytes(bytes(data))

    def read(**options: str):  # noqa: ANN202
        return both.read.format("kafka-tiered").options(**opts).options(**options).load()

    got: dict[str, dict] = {}
    try:
        for path in ("python", "columnar"):
            use_path(both, path)
            out = got[path] = {}
            for mode in ("include", "drop", "flag"):
                df = read(subscribe="checked", violations=mode)
                out[mode] = _sorted(df.drop("timestamp").collect())
                out[f"{mode} count"] = df.count()
            with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark's exception types vary by path
                read(subscribe="rotten").collect()
            message = str(caught.value)
            assert "corrupt data in file:kafka-tiered-storage/rotten-" in message, message
            out["error"] = next(line for line in message.splitlines() if "corrupt data in file:" in line)
    finally:
        use_path(both, "python")
    for key in ("include", "drop", "flag", "include count", "drop count", "flag count"):
        assert got["python"][key] == got["columnar"][key], key
    assert got["columnar"]["drop count"] == 10 and got["columnar"]["include count"] == 30
    flagged = {r[4]: r[-1] for r in got["columnar"]["flag"]}
    assert [o for o, why in sorted(flagged.items()) if why] == [o for o in range(30) if o % 3]
    # the same one line, whichever path (Spark words the frame around it its own way)
    line = got["columnar"]["error"]
    assert line[line.index("corrupt data in file:") :] in got["python"]["error"]
