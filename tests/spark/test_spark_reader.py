"""format("kafka-tiered") on local[2]: the rows equal what a consumer of the tiered log reads.

Expected rows come from outside the reader: Kafka's own classes (the Java oracle writes every codec,
transactions included, and lists what it handed to Kafka) or `tiering.PartitionLog`, which keeps the
records it fed the segment writer. The reader must give exactly those rows, in Spark's Kafka source
schema.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import write_keyring
from tiering import BASE_TS, PartitionLog, tier_directory

from rsm import RemoteStorageManager, TopicIdPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _store(
    tmp_path: Path, *, keyring: Path | None = None, **extra: str
) -> tuple[RemoteStorageManager, dict[str, str]]:
    opts = {
        "storage.backend": "file",
        "storage.file.root": str(tmp_path / "store"),
        "bucket": "main",
        **extra,
    }
    if keyring is not None:
        opts["encryption.keyring.path"] = str(keyring)
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    return rsm, opts


def _read(spark, opts: dict[str, str], **options: str):  # noqa: ANN001, ANN202
    reader = spark.read.format("kafka-tiered")
    for k, v in {**opts, **options}.items():
        reader = reader.option(k, v)
    return reader.load()


def _micros(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).replace(tzinfo=None)


def _rows(df) -> list[tuple[Any, ...]]:  # noqa: ANN001
    has_headers = "headers" in df.columns
    out = []
    for r in df.collect():
        ts = r["timestamp"]
        ts_ms = int(round(ts.replace(tzinfo=dt.UTC).timestamp() * 1000)) if ts is not None else None
        row = (r["partition"], r["offset"], r["key"], r["value"], ts_ms)
        if has_headers:  # null when a record has none, as Spark's Kafka source gives
            hs = r["headers"]
            row += (None if hs is None else tuple((h["key"], h["value"]) for h in hs),)
        out.append(row)
    return sorted(out)


def _expected(
    logs: list[PartitionLog], read_committed: bool = False, headers: bool = True
) -> list[tuple[Any, ...]]:
    out = []
    for log in logs:
        for r in log.consumer_rows(read_committed):
            row = (log.tip.partition, r.offset, r.key, r.value, r.timestamp)
            out.append(row + (r.headers or None,) if headers else row)
    return sorted(out)


# -- every codec, Kafka-written, encrypted and not ----------------------------------------------------
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_equals_what_kafka_wrote(
    tiered_spark, java_oracle, tmp_path: Path, codec: str, encrypted: bool
) -> None:  # noqa: ANN001
    keyring = write_keyring(tmp_path / "keyring.json")
    rsm, opts = _store(tmp_path, keyring=keyring, **{"chunk.size": "16384"})
    tip = TopicIdPartition(uuid.uuid4(), f"t-{codec}", 0)
    out = tmp_path / "seg"
    java_oracle.write_segment(out, codec, records=400, transactional=True, seed=7)
    lc = {"unchecked.rsm.encryption.enabled": str(encrypted).lower(), "unchecked.rsm.encryption.key.id": "k1"}
    tier_directory(rsm, tip, out, lc)
    expected_records = [r for r in java_oracle.expected(out)["records"] if not r["isControl"]]

    def b64(v: str | None) -> bytes | None:
        return None if v is None else base64.b64decode(v)

    def expected(committed: bool) -> list[tuple[Any, ...]]:
        return sorted(
            (0, r["offset"], b64(r["key"]), b64(r["value"]), r["timestamp"],
             tuple((h["key"], b64(h["value"])) for h in r["headers"]) or None)
            for r in expected_records
            if not (committed and r["aborted"])
        )  # fmt: skip

    df = _read(tiered_spark, opts, subscribe=tip.topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]  # fmt: skip
    assert _rows(df) == expected(False)
    assert any(r["aborted"] for r in expected_records)
    committed = _read(
        tiered_spark,
        opts,
        subscribe=tip.topic,
        includeHeaders="true",
        **{"kafka.isolation.level": "read_committed"},
    )
    assert _rows(committed) == expected(True)
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {tip.topic}
    rsm.close()


# -- a multi-segment, multi-partition topic --------------------------------------------------------------
@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    base = tmp_path_factory.mktemp("orders")
    rsm, opts = _store(base, **{"chunk.size": "8192"})
    tid = uuid.uuid4()
    logs = []
    for p in range(2):
        log = PartitionLog(rsm, TopicIdPartition(tid, "orders", p), base / f"w{p}")
        for s in range(4):
            log.append(60, codec=4 if s % 2 else 0)
            # timestamps out of order inside a segment: the time options must follow Kafka, not sorting
            log.append(
                20, timestamps=[BASE_TS + log.next_offset + (500 if i == 3 else 0) + i for i in range(20)]
            )
            log.roll()
        logs.append(log)
    rsm.close()
    return opts, logs


def test_a_topic_reads_whole(tiered_spark, orders) -> None:  # noqa: ANN001
    opts, logs = orders
    assert _rows(_read(tiered_spark, opts, subscribe="orders", includeHeaders="true")) == _expected(logs)
    no_headers = _read(tiered_spark, opts, subscribe="orders")
    assert "headers" not in no_headers.columns
    # Spark's Kafka source (KafkaRecordToRowConverter) gives null, not an empty array, without headers
    with_headers = _read(tiered_spark, opts, subscribe="orders", includeHeaders="true")
    nulls = with_headers.where("headers is null").count()
    assert nulls == sum(1 for log in logs for r in log.records if not r.headers) > 0
    assert with_headers.where("size(headers) = 0").count() == 0
    assert no_headers.count() == sum(len(log.records) for log in logs)


def test_offset_options_return_exactly_their_records(tiered_spark, orders) -> None:  # noqa: ANN001
    opts, logs = orders
    df = _read(
        tiered_spark, opts, subscribe="orders",
        startingOffsets='{"orders":{"0":95,"1":-2}}', endingOffsets='{"orders":{"0":250,"1":-1}}',
    )  # fmt: skip
    want = [r for r in _expected(logs, headers=False) if (r[0] == 0 and 95 <= r[1] < 250) or r[0] == 1]
    assert _rows(df) == want
    assign = _read(tiered_spark, opts, assign='{"orders":[1]}', startingOffsets='{"orders":{"1":300}}')
    assert _rows(assign) == [r for r in _expected(logs, headers=False) if r[0] == 1 and r[1] >= 300]


def _first_at_or_after(log: PartitionLog, ts: int) -> int | None:
    return next((r.offset for r in log.records if r.timestamp >= ts), None)


def test_timestamp_options_follow_kafka_offsets_for_times(tiered_spark, orders) -> None:  # noqa: ANN001
    opts, logs = orders
    start_ts, end_ts = BASE_TS + 120, BASE_TS + 260
    df = _read(
        tiered_spark, opts, subscribe="orders", startingTimestamp=str(start_ts), endingTimestamp=str(end_ts)
    )
    want = []
    for log in logs:
        lo, hi = _first_at_or_after(log, start_ts), _first_at_or_after(log, end_ts)
        assert lo is not None and hi is not None
        want += [
            (log.tip.partition, r.offset, r.key, r.value, r.timestamp)
            for r in log.records
            if lo <= r.offset < hi
        ]
    assert _rows(df) == sorted(want)
    per = _read(
        tiered_spark,
        opts,
        subscribe="orders",
        startingOffsetsByTimestamp=f'{{"orders":{{"0":{start_ts},"1":{BASE_TS}}}}}',
    )
    lo0 = _first_at_or_after(logs[0], start_ts)
    assert _rows(per) == [r for r in _expected(logs, headers=False) if r[0] == 1 or r[1] >= lo0]


def test_pushed_filters_are_exact(tiered_spark, orders) -> None:  # noqa: ANN001
    opts, logs = orders
    df = _read(tiered_spark, opts, subscribe="orders")
    everything = _expected(logs, headers=False)
    q = df.where("partition = 1 and offset >= 70 and offset < 90")
    assert _rows(q) == [r for r in everything if r[0] == 1 and 70 <= r[1] < 90]
    q = df.where("offset in (0, 5, 159, 160, 319) and partition in (0)")
    assert _rows(q) == [r for r in everything if r[0] == 0 and r[1] in (0, 5, 159, 160, 319)]
    cut = _micros(BASE_TS + 200)
    q = df.where(df["timestamp"] >= cut).where(df["offset"] <= 260)
    assert _rows(q) == [r for r in everything if r[4] >= BASE_TS + 200 and r[1] <= 260]
    assert df.where("offset > 100000").count() == 0
    assert df.where("partition = 1 and partition = 0").count() == 0


def test_min_partitions_and_max_records_split_segments(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    """Big segments are cut at batch boundaries near chunk boundaries; the rows stay the same."""
    rsm, opts = _store(tmp_path, **{"chunk.size": "4096"})
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "wide", 0), tmp_path / "w")
    for _ in range(2):
        for _ in range(20):
            log.append(10)
        log.roll()
    rsm.close()
    whole = _read(tiered_spark, opts, subscribe="wide", includeHeaders="true")
    assert whole.rdd.getNumPartitions() == 2
    many = _read(tiered_spark, opts, subscribe="wide", includeHeaders="true", maxRecordsPerPartition="30")
    assert many.rdd.getNumPartitions() >= 8
    assert _rows(many) == _rows(whole) == _expected([log])
    more = _read(tiered_spark, opts, subscribe="wide", minPartitions="6")
    assert more.rdd.getNumPartitions() >= 6 and more.count() == 400


# -- histories ----------------------------------------------------------------------------------------
def test_retried_copies_and_an_unclean_election_read_once(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    import dataclasses

    rsm, opts = _store(tmp_path, **{"chunk.size": "4096"})
    tip = TopicIdPartition(uuid.uuid4(), "elections", 0)
    old = PartitionLog(rsm, tip, tmp_path / "old")
    old.append(100)
    md, data = old.roll()
    # the same segment tiered again under a new id (the broker died before recording the first)
    retry = dataclasses.replace(
        md, remote_log_segment_id=dataclasses.replace(md.remote_log_segment_id, id=uuid.uuid4())
    )
    old.tier(retry, data)
    old.append(50)
    old.roll()  # 100..149 in epoch 0: truncated away by the election below
    new = PartitionLog(rsm, tip, tmp_path / "new")
    new.append(100)
    new.new_epoch(1)
    new.append(80, value_size=30)
    new.roll()
    rows = _rows(_read(tiered_spark, opts, subscribe="elections", includeHeaders="true"))
    assert rows == _expected([new])
    assert [r[1] for r in rows] == list(range(180))
    rsm.close()


def test_read_committed_drops_a_transaction_spanning_two_segments(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    rsm, opts = _store(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "payments", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.append(10)
    log.append(5, producer_id=7, transactional=True)  # aborted in the next segment
    log.append(5, producer_id=8, transactional=True)  # committed
    log.roll()
    log.append(5, producer_id=7, transactional=True)
    log.end_txn(7, commit=False)
    log.end_txn(8, commit=True)
    log.append(10)
    log.roll()
    log.append(3, producer_id=9, transactional=True)  # still open when the segment rolled: past the LSO
    log.append(4)
    log.roll()
    uncommitted = _rows(_read(tiered_spark, opts, subscribe="payments", includeHeaders="true"))
    assert uncommitted == _expected([log])
    committed = _rows(
        _read(
            tiered_spark,
            opts,
            subscribe="payments",
            includeHeaders="true",
            **{"kafka.isolation.level": "read_committed"},
        )
    )
    assert committed == _expected([log], read_committed=True)
    assert len(uncommitted) - len(committed) == 10 + 7  # the aborted records, then all from the open txn on
    rsm.close()


def test_data_is_found_after_the_topic_bucket_changed(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    rsm, opts = _store(tmp_path)
    tip = TopicIdPartition(uuid.uuid4(), "moving", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.append(30)
    log.roll()
    log.log_config = {"unchecked.rsm.bucket": "archive", "unchecked.rsm.prefix": "cold/"}
    log.append(30)
    log.roll()
    assert (tmp_path / "store" / "archive" / "cold").is_dir()
    assert _rows(_read(tiered_spark, opts, subscribe="moving", includeHeaders="true")) == _expected([log])
    rsm.close()


# (an encrypted topic on S3, and on GCS and Azure: tests/spark/test_spark_reader_clouds.py)


# -- errors -------------------------------------------------------------------------------------------
def test_mistakes_get_one_line(tiered_spark, orders, tmp_path: Path) -> None:  # noqa: ANN001
    opts, _ = orders
    with pytest.raises(
        Exception, match=r"topic 'nope' has no tiered data in the location record file:main/_rsm/"
    ):
        _read(tiered_spark, opts, subscribe="nope").collect()
    with pytest.raises(
        Exception,
        match=r"unknown option 'startingoffset' for format kafka-tiered: did you mean startingOffsets\?",
    ):
        _read(tiered_spark, opts, subscribe="orders", startingOffset="earliest").collect()
    with pytest.raises(Exception, match="exactly one of the options subscribe, subscribePattern, assign"):
        _read(tiered_spark, opts).collect()
    with pytest.raises(Exception, match="cannot be latest"):
        _read(tiered_spark, opts, subscribe="orders", startingOffsets="latest").collect()
    # Spark's consumer options are accepted and ignored without kafka.bootstrap.servers (with it the source
    # also reads the brokers' live tail: tests/spark/test_kafka_hybrid.py): switching formats is a one-word change
    assert _read(tiered_spark, opts, subscribe="orders", **{"kafka.max.poll.records": "10"}).count() == 640


HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def _error(spark, opts: dict[str, str], **options: str) -> str:  # noqa: ANN001
    """The message Spark gives for a query with these options (it must fail)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark's exception types vary by stage
        _read(spark, opts, **options).collect()
    return str(caught.value)


def test_a_misspelled_option_gets_the_closest_one_in_a_short_error(tiered_spark, orders) -> None:  # noqa: ANN001
    """A misspelled option: `subscibe` -> "did you mean subscribe?", names as documented (Spark lowercases
    them), and the source's line is Spark's first line when tracebacks are hidden, else a one-frame one."""
    opts, _ = orders
    message = _error(tiered_spark, opts, subscibe="orders")
    assert "unknown option 'subscibe' for format kafka-tiered: did you mean subscribe?" in message
    assert len(message.splitlines()) <= 5, message  # Spark's line, one frame of ours, our line
    assert "options.py" not in message  # the parser's stack stays out
    message = _error(tiered_spark, opts, subscribe="orders", minpartitions="0")
    assert "option minPartitions must be a positive integer, got '0'" in message
    tiered_spark.conf.set(HIDE_TRACEBACK, "true")
    try:
        message = _error(tiered_spark, opts, subscibe="orders")
    finally:
        tiered_spark.conf.unset(HIDE_TRACEBACK)
    first = message.splitlines()[0]
    assert "did you mean subscribe?" in first and "Traceback" not in message, message


def test_the_store_options_are_checked_naming_the_key(tiered_spark, orders, tmp_path: Path) -> None:  # noqa: ANN001
    """Configuration mistakes (the reader's side): no store, a misspelled store key (an option or in the
    rsm.properties file) and a root that does not exist are each one line naming what to fix."""
    opts, _ = orders
    message = _error(tiered_spark, {}, subscribe="orders")
    assert "no store given: set the option rsm.properties" in message
    assert "storage.file.root" in message
    typo = {**opts, "storage.file.rot": opts["storage.file.root"]}
    del typo["storage.file.root"]
    message = _error(tiered_spark, typo, subscribe="orders")
    assert (
        "unknown store key 'storage.file.rot' for format kafka-tiered: did you mean storage.file.root?"
        in (message)
    )
    props = tmp_path / "rsm.properties"
    props.write_text(
        f"storage.backend=file\nstorage.file.root={opts['storage.file.root']}\nbukcet={opts['bucket']}\n"
    )
    message = _error(tiered_spark, {"rsm.properties": str(props)}, subscribe="orders")
    assert f"in rsm.properties {props}: unknown store key 'bukcet'" in message
    assert "did you mean bucket?" in message
    missing = tmp_path / "no-such-store"
    message = _error(tiered_spark, {**opts, "storage.file.root": str(missing)}, subscribe="orders")
    assert f"config storage.file.root {missing} does not exist" in message
    assert not missing.exists()  # a reader never makes the store it reads
    # a bucket that is not there is named as on a cloud, not read as a topic with no data
    message = _error(tiered_spark, {**opts, "bucket": "nosuchbucket"}, subscribe="orders")
    assert "bucket 'nosuchbucket' (bucket) does not exist in file at" in message, message


def test_an_s3_bucket_that_does_not_exist_is_named(tiered_spark, s3_server) -> None:  # noqa: ANN001
    """A bucket that does not exist (the reader's side): a missing bucket is refused naming it, not an empty table."""
    opts = s3_server.rsm_configs(bucket="no-such-bucket-26")
    message = _error(tiered_spark, opts, subscribe="orders")
    assert "bucket 'no-such-bucket-26' (bucket) does not exist in s3 at http" in message
    assert message.count("never created") == 1 and "does not create buckets" not in message  # said once
    assert s3_server.rsm_configs()["storage.s3.secret.access.key"] not in message


def test_a_key_missing_from_the_keyring_is_named(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    keyring = write_keyring(tmp_path / "keyring.json", ("k1", "gone"))
    rsm, opts = _store(
        tmp_path, keyring=keyring, **{"encryption.enabled": "true", "encryption.key.id": "gone"}
    )
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "locked", 0), tmp_path / "w")
    log.append(10)
    log.roll()
    rsm.close()
    write_keyring(tmp_path / "keyring.json", ("k1",))
    # refused while planning, in one line naming the key id and the keyring, before any task runs
    with pytest.raises(Exception, match=r"encrypted under key id 'gone', which the keyring .*keyring.json"):
        _read(tiered_spark, opts, subscribe="locked").collect()


def test_subscribe_pattern_and_topic_id(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    rsm, opts = _store(tmp_path)
    first = TopicIdPartition(uuid.uuid4(), "clicks", 0)
    a = PartitionLog(rsm, first, tmp_path / "a")
    a.append(5)
    a.roll()
    second = TopicIdPartition(uuid.uuid4(), "clicks", 0)  # deleted and re-created
    b = PartitionLog(rsm, second, tmp_path / "b")
    b.append(8)
    b.roll()
    other = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "views", 0), tmp_path / "c")
    other.append(3)
    other.roll()
    assert _read(tiered_spark, opts, subscribe="clicks").count() == 8
    from rsm.api.metadata import uuid_to_base64

    assert _read(tiered_spark, opts, subscribe="clicks", topicId=uuid_to_base64(first.topic_id)).count() == 5
    both = _read(tiered_spark, opts, subscribePattern="(clicks|views)")
    assert sorted(r["topic"] for r in both.select("topic").distinct().collect()) == ["clicks", "views"]
    assert _read(tiered_spark, opts, subscribePattern="cl.*").count() == 8
    rsm.close()


def test_a_start_past_the_end_and_a_partition_that_does_not_exist_are_refused(tiered_spark, orders) -> None:  # noqa: ANN001
    """As Spark's Kafka source refuses them, never an empty result: startingOffsets past a partition's end
    (naming the offsets it holds), and `assign` of a partition the topic does not have."""
    opts, logs = orders
    end = max(r.offset for r in logs[0].records) + 1
    message = _error(
        tiered_spark,
        opts,
        subscribe="orders",
        startingOffsets=json.dumps({"orders": {"0": end + 40000, "1": -2}}),
    )
    assert f"orders-0: startingOffsets {end + 40000} is after the end of its data, offset {end}" in message
    message = _error(tiered_spark, opts, assign=json.dumps({"orders": [0, 5]}))
    assert "assign: orders-5 has no tiered data" in message and "partitions [0" in message
    # the end itself is no error: nothing to read yet
    at_end = _read(
        tiered_spark, opts, subscribe="orders", startingOffsets=json.dumps({"orders": {"0": end, "1": -2}})
    )
    assert at_end.where("partition = 0").count() == 0
