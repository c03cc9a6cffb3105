"""The whole topic in one query: history from the store, the live tail from a real Kafka 4.4 broker.

One broker (KRaft) tiers through our JVM plugin and the Python bridge to a file store. A topic's local
retention (`local.retention.bytes`) leaves its oldest segments in the store only, the newest tiered ones
both in the store and on the broker's disk, and the active segment on the broker only. Transactions that
start in a tiered segment and end (one aborted, one committed) in the active one span the boundary.

- batch: `format("kafka-tiered")` with `kafka.bootstrap.servers` gives exactly the rows and columns of
  Spark's own `format("kafka")` under read_uncommitted and read_committed, while the plugin's fetch
  counters and Kafka's RemoteFetchRequestsPerSec do not move (the broker serves no remote read);
- stream: a `spark-submit` application streams from `earliest` on a topic being produced to; the query
  catches up from the store, follows the topic while segments keep tiering, is SIGKILLed mid-stream, and
  after a restart from its checkpoint (on the columnar scan) the file sink holds every produced record
  exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import KafkaBroker, tiered_storage_props
from harness.ports import free_ports
from harness.waiting import wait_until
from test_bridge_plugin import bridge_command, bridge_plugin_jar  # noqa: F401 - session fixture
from test_kafka_metrics_jmx import PLUGIN, Jmx

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "hybrid-batch"
LIVE = "hybrid-live"
VALUE = 1000
SEGMENT = 1 << 20  # Kafka 4's smallest segment.bytes
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": str(SEGMENT),
    # the newest tiered segments stay on the broker's disk too; older ones are in the store only
    "local.retention.bytes": str(2 * SEGMENT),
    "retention.ms": "-1",
}
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="%s"'
ROOT = Path(__file__).resolve().parents[2]
FOLLOW = ROOT / "tests" / "spark_apps" / "follow_topic.py"
COLUMNS = "key, value, topic, partition, offset, timestamp, timestampType, headers"


@pytest.fixture(scope="module")
def broker(
    bridge_plugin_jar: Path,  # noqa: F811
    java_build,  # noqa: ANN001
    kafka_dump_log: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[KafkaBroker, Path, Jmx]]:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"hyb-{os.getpid()}"  # unix socket paths stay short
    work.mkdir(parents=True, exist_ok=True)
    store = tmp_path_factory.mktemp("hybrid-store")
    rsm = {
        "storage.backend": "file", "storage.file.root": str(store), "bucket": "tiered",
        "chunk.size": str(64 * 1024),
        "bridge.socket.path": str(work / "b.sock"), "bridge.command": bridge_command(),
        "bridge.log.file": str(work / "bridge.log"), "bridge.metrics.poll.ms": "500",
    }  # fmt: skip
    props = tiered_storage_props("io.tieredrsm.bridge.BridgeRemoteStorageManager", rsm)
    props |= {
        "remote.log.storage.manager.class.path": str(bridge_plugin_jar),
        "log.segment.delete.delay.ms": "500",
    }
    b = KafkaBroker(tmp_path_factory.mktemp("hybrid-broker"), extra_props=props, java_build=java_build)
    b.port, b.controller_port, jmx_port, b.sasl_port = free_ports(4)
    # a second listener, SASL PLAIN: the kafka.* security settings reach the tail's client
    b.extra_props |= {
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port},"
        f"CONTROLLER://127.0.0.1:{b.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS % ("admin", "admin-pw")
        + ' user_admin="admin-pw" user_app="app-pw";',
    }
    b.jvm_opts += Jmx.broker_flags(jmx_port)
    b.start()
    try:
        yield b, store, Jmx(kafka_dump_log, jmx_port)
    finally:
        b.stop()
        shutil.rmtree(work, ignore_errors=True)


def _value(tag: str) -> bytes:
    """A tagged value of random bytes: incompressible, so the topic has as many segments as it looks."""
    head = tag.encode() + b"|"
    return head + os.urandom(VALUE - len(head))


def _produce(bootstrap: str, topic: str, partition: int, start: int, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4", "acks": "all"})
    for n in range(start, start + count):
        headers = [("n", str(n).encode()), ("null", None)] if n % 3 == 0 else None
        value = None if n % 17 == 0 else _value(f"{partition}-{n}")
        p.produce(topic, key=f"k{n % 50}".encode() if n % 5 else None, value=value, partition=partition,
                  headers=headers)  # fmt: skip
        if n % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _transaction(bootstrap: str, txn_id: str, partition: int, n: int):  # noqa: ANN202
    """A transactional producer with an open transaction of `n` records on `partition` (ended by the caller)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(n):
        p.produce(TOPIC, key=f"{txn_id}-{i}".encode(), value=_value(txn_id), partition=partition)
    p.flush(30)
    return p


def _store_next(store: Path, topic: str, partition: int) -> int:
    ends = [
        json.loads(m.read_bytes())["segment"]["end_offset"]
        for m in store.rglob(f"{topic}-*/{partition}/*.manifest")
    ]
    return max(ends) + 1 if ends else 0


def _local_bases(b: KafkaBroker, topic: str, partition: int) -> list[int]:
    return sorted(int(p.stem) for p in b.partition_dir(topic, partition).glob("*.log"))


def _rows(df: Any) -> list[tuple]:  # noqa: ANN401
    out = []
    for r in df.selectExpr(*COLUMNS.split(", ")).collect():
        headers = None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"])
        out.append((r["partition"], r["offset"], r["key"], r["value"], r["topic"], r["timestamp"],
                    r["timestampType"], headers))  # fmt: skip
    return sorted(out, key=lambda t: (t[0], t[1]))


def _fetch_counters(jmx: Jmx) -> tuple[float, float]:
    kafka = f"kafka.server:type=BrokerTopicMetrics,name=RemoteFetchRequestsPerSec,topic={TOPIC}"
    v = jmx.read(f"{PLUGIN},*", kafka)
    plugin = v.get(f"{PLUGIN},topic={TOPIC}:segment-fetch-total", 0.0)
    return plugin, v.get(f"{kafka}:Count", 0.0)


def _first_difference(got: list[tuple], want: list[tuple]) -> str:
    for g, w in zip(got, want, strict=False):
        if g != w:
            return f"first difference: {g[:2]} {g[2:4]!r:.120} vs {w[:2]} {w[2:4]!r:.120}"
    return f"{len(got)} vs {len(want)} rows"


def test_a_hybrid_read_returns_what_sparks_kafka_source_returns_without_remote_reads(
    broker, spark, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    from harness.spark import use_path
    from harness.spark_kafka import add_kafka_source

    import spark_reader
    from spark_reader.filters import PushedFilters
    from spark_reader.hybrid import plan_batch
    from spark_reader.offsets import ending_spec, starting_spec
    from spark_reader.options import parse_options
    from spark_reader.planning import Planner
    from spark_reader.tail import BrokerTailPartition

    b, store, jmx = broker
    bootstrap = b.bootstrap_servers
    b.create_topic(TOPIC, 2, TOPIC_CONFIGS)
    for p in range(2):
        _produce(bootstrap, TOPIC, p, 0, 2500)
    early = _transaction(bootstrap, "early", 0, 40)
    early.abort_transaction(30)
    # transactions starting in what gets tiered and ending in the active segment: aborted on 0, committed on 1
    spans = [_transaction(bootstrap, "span-abort", 0, 60), _transaction(bootstrap, "span-commit", 1, 60)]
    for p in range(2):
        _produce(bootstrap, TOPIC, p, 2500, 1200)  # rolls the segment holding the transactions' start
    spans[0].abort_transaction(30)
    spans[1].commit_transaction(30)
    for p in range(2):
        _produce(bootstrap, TOPIC, p, 3700, 300)  # the live tail, in the active segment

    del early, spans  # their producers' connections close

    def layout_now() -> dict[int, tuple[list[int], int]]:
        return {p: (_local_bases(b, TOPIC, p), _store_next(store, TOPIC, p)) for p in range(2)}

    def split_ready() -> bool:
        return all(bases and bases[0] > 0 and nxt == bases[-1] for bases, nxt in layout_now().values())

    try:
        wait_until("every closed segment tiered, the oldest gone locally", split_ready, 120, 1)
    except AssertionError:
        raise AssertionError(
            f"local segments and the store's next offset per partition: {layout_now()}"
        ) from None
    layout = layout_now()
    for _, (bases, _) in layout.items():
        assert len(bases) >= 2, f"no offsets both in the store and on the broker's disk: {layout}"

    spark_reader.register(spark)
    add_kafka_source(spark)
    store_opts = {"rsm.properties": str(b.config_file), "subscribe": TOPIC, "includeHeaders": "true"}
    store_only = _rows(spark.read.format("kafka-tiered").options(**store_opts).load())
    # planning asks the broker for offsets once and never fetches: the client's own account (kafka-python
    # logs each request it sends at DEBUG). One Metadata request names the topic (its partitions and their
    # leaders, which the ListOffsets request goes by); the bootstrap's Metadata names no topic (it learns
    # the brokers' addresses); nothing else (no group, so no coordinator lookup)
    parsed = parse_options({**store_opts, "kafka.bootstrap.servers": bootstrap})
    with caplog.at_level(logging.DEBUG, logger="kafka.net.connection"):
        parts = plan_batch(
            Planner(parsed), PushedFilters(), starting_spec(parsed, False), ending_spec(parsed)
        )
    sent = [
        m.groups()
        for r in caplog.records
        if (m := re.search(r" Request \d+: (\w+)Request\((.*)", r.getMessage()))
    ]
    kinds = Counter(kind for kind, _ in sent)
    metadata = [args for kind, args in sent if kind == "Metadata"]
    named = [args for args in metadata if "topics=[]" not in args]
    assert kinds["ListOffsets"] == 1 and kinds["Fetch"] == 0, kinds
    assert set(kinds) <= {"ApiVersions", "Metadata", "ListOffsets"}, kinds
    assert len(named) == 1 and f"name='{TOPIC}'" in named[0], metadata
    assert len(metadata) == 2, metadata  # and the bootstrap's, of no topic
    tails = sorted((t.partition, t.start) for t in parts if isinstance(t, BrokerTailPartition))
    assert tails == [(p, nxt) for p, (_, nxt) in sorted(layout.items())]  # split at the store's end
    # read_committed: the transactions open at the store's end are read from their start by the consumer
    parsed = parse_options(
        {**store_opts, "kafka.bootstrap.servers": bootstrap, "kafka.isolation.level": "read_committed"}
    )
    parts = plan_batch(Planner(parsed), PushedFilters(), starting_spec(parsed, False), ending_spec(parsed))
    starts = {t.partition: t.start for t in parts if isinstance(t, BrokerTailPartition)}
    # before the store's end where a transaction is still open there; where the broker rolled a segment past
    # the marker meanwhile (segments roll by size here), the whole transaction is tiered and the tail starts
    # at the store's end: either way the rows below must equal Spark's Kafka source's
    assert all(starts[p] <= nxt for p, (_, nxt) in layout.items()), (starts, layout)
    before = _fetch_counters(jmx)
    mine = {}
    for level in ("read_uncommitted", "read_committed"):
        for path in ("python", "columnar"):  # both Spark paths plan and read through the same Python
            use_path(spark, path)
            df = (
                spark.read.format("kafka-tiered")
                .options(**store_opts)
                .option("kafka.bootstrap.servers", bootstrap)
                .option("kafka.isolation.level", level)
                .load()
            )
            got = _rows(df)
            assert got == mine.setdefault(level, got), f"{level}: the columnar scan's rows differ"
            if path == "columnar":
                assert df.count() == len(got), f"{level}: the columnar count() differs"
        use_path(spark, "python")
    time.sleep(1.5)  # the bridge's metrics reach the plugin every 500 ms
    after = _fetch_counters(jmx)
    assert after == before, f"the broker read its remote tier during the hybrid read: {before} -> {after}"

    committed = mine["read_committed"]
    for level, got in mine.items():
        want = _rows(
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", level)
            .load()
        )
        assert got == want, f"{level}: {_first_difference(got, want)}"
    # the same through the SASL listener (Spark's Java client settings, as Spark's Kafka source takes them)
    sasl = {
        "kafka.bootstrap.servers": f"127.0.0.1:{b.sasl_port}",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": JAAS % ("app", "app-pw") + ";",
        "kafka.isolation.level": "read_committed",
    }
    assert _rows(spark.read.format("kafka-tiered").options(**store_opts, **sasl).load()) == committed
    wrong = {
        **sasl,
        "kafka.sasl.jaas.config": JAAS % ("app", "wrong") + ";",
        "kafka.default.api.timeout.ms": "8000",
    }
    with pytest.raises(
        Exception, match=rf"authentication to the Kafka brokers 127.0.0.1:{b.sasl_port} failed"
    ):
        spark.read.format("kafka-tiered").options(**store_opts, **wrong).load().count()

    # the counters are live: Spark's Kafka source read the oldest offsets through the remote tier
    wait_until(
        "the remote-fetch counters moving for format('kafka')",
        lambda: all(a > b for a, b in zip(_fetch_counters(jmx), before, strict=True)),
        30,
        1,
    )
    committed, uncommitted = mine["read_committed"], mine["read_uncommitted"]
    # the boundary: the tail was read, the aborted spanning transaction dropped, the committed one kept
    assert len(store_only) < len(uncommitted)
    keys = {r[2] for r in committed}
    assert b"span-commit-0" in keys and b"span-abort-0" not in keys and b"early-0" not in keys
    assert {b"span-abort-0", b"span-commit-0"} <= {r[2] for r in uncommitted}
    # a starting timestamp past everything the store holds: the brokers' offsetsForTimes places it
    t = next(r[5] for r in uncommitted if r[0] == 0 and r[1] >= layout[0][1] + 200)
    millis = int(t.timestamp() * 1000)
    by_time = {
        fmt: _rows(
            spark.read.format(fmt)
            .options(
                **(store_opts if fmt == "kafka-tiered" else {"subscribe": TOPIC, "includeHeaders": "true"})
            )
            .option("kafka.bootstrap.servers", bootstrap)
            .option("startingTimestamp", str(millis))
            .load()
        )
        for fmt in ("kafka-tiered", "kafka")
    }
    assert by_time["kafka-tiered"] == by_time["kafka"] and by_time["kafka"], _first_difference(
        by_time["kafka-tiered"], by_time["kafka"]
    )
    spans_at = min(r[1] for r in uncommitted if r[2] == b"span-abort-0")
    assert spans_at < layout[0][1], (
        f"the spanning transaction starts at {spans_at}, past the store's end {layout}"
    )


def _checkpointed(checkpoint: Path, kind: str) -> dict[int, Path]:
    """The checkpoint's batch files of one kind ("offsets": planned, "commits": done), by batch id."""
    folder = checkpoint / kind
    return {int(f.name): f for f in folder.iterdir() if f.name.isdigit()} if folder.is_dir() else {}


def _batch_end(offsets_file: Path) -> int:
    """A planned batch's end offset on LIVE's partition 0: the last line is the source's offsets JSON."""
    text = offsets_file.read_text().strip().splitlines()
    return int(json.loads(text[-1]).get(LIVE, {}).get("0", -1)) if len(text) >= 3 else -1


def _follow(args: list[str], tmp_path: Path, log_name: str) -> subprocess.Popen:
    """`spark-submit tests/spark_apps/follow_topic.py ...` in its own process group (so a kill takes the
    driver JVM, its Python driver and every Python worker with it)."""
    from harness.spark_cluster import spark_home, submit_env

    env = submit_env(sys.executable, PYTHONPATH=str(ROOT))
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]", *args]
    log = (tmp_path / log_name).open("w")
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def test_a_hybrid_stream_catches_up_follows_and_survives_a_kill_exactly_once(
    broker, spark, tmp_path: Path
) -> None:  # noqa: ANN001
    """A user's streaming application (spark-submit, the Python source) follows a topic being produced to;
    it is SIGKILLed mid-stream (a batch in flight when the test catches one), and restarted from its
    checkpoint with `--jars` (the columnar scan resumes the Python source's offsets JSON). The file sink
    then holds every produced record exactly once."""
    import spark_reader

    b, store, _ = broker
    bootstrap = b.bootstrap_servers
    b.create_topic(LIVE, 1, {**TOPIC_CONFIGS, "local.retention.bytes": str(SEGMENT)})
    _produce(bootstrap, LIVE, 0, 0, 3000)
    wait_until("the first segments tiered", lambda: _store_next(store, LIVE, 0) > 0, 120, 1)
    tiered_at_start = _store_next(store, LIVE, 0)
    total = 6000
    producer = threading.Thread(
        target=lambda: [_produce(bootstrap, LIVE, 0, n, 500) for n in range(3000, total, 500)]
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = json.dumps({
        "rsm.properties": str(b.config_file), "kafka.bootstrap.servers": bootstrap, "subscribe": LIVE,
        "startingOffsets": "earliest", "maxOffsetsPerTrigger": "1500",
    })  # fmt: skip
    app = [str(FOLLOW), options, str(out), str(checkpoint)]
    first = _follow(app, tmp_path, "first.log")
    in_flight = False
    try:
        producer.start()

        def past_the_store() -> bool:
            if first.poll() is not None:
                raise AssertionError(f"the application ended: {(tmp_path / 'first.log').read_text()[-4000:]}")
            done = _checkpointed(checkpoint, "commits")
            return any(_batch_end(f) > tiered_at_start for n, f in _checkpointed(checkpoint, "offsets").items()
                       if n in done)  # fmt: skip

        wait_until("a committed micro-batch past the store", past_the_store, 180, 0.3)
        # kill while a batch is planned but not committed, if one comes by within 20 s
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not in_flight:
            planned, done = _checkpointed(checkpoint, "offsets"), _checkpointed(checkpoint, "commits")
            in_flight = bool(planned) and max(planned) not in done
            if not in_flight:
                time.sleep(0.02)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    producer.join(120)
    assert first.returncode == -signal.SIGKILL
    wait_until(
        "more segments tiered during the query", lambda: _store_next(store, LIVE, 0) > tiered_at_start, 120, 1
    )
    second = _follow(
        ["--jars", str(spark_reader.jar_path()), *app, "--until", str(total)], tmp_path, "second.log"
    )
    try:
        rc = second.wait(300)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    second_log = (tmp_path / "second.log").read_text()
    assert rc == 0, second_log[-6000:]
    assert "scan: columnar" in second_log.splitlines()
    rows = spark.read.parquet(str(out)).collect()
    offsets = sorted(r["offset"] for r in rows)
    assert offsets == list(range(total)), f"{len(offsets)} rows, {len(set(offsets))} distinct of {total}"
    assert all((r["value"] is None) == (r["offset"] % 17 == 0) for r in rows)
    print(f"killed with a batch in flight: {in_flight}")


def test_a_topic_the_broker_does_not_have_is_read_from_the_store_with_one_warning(
    broker, spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    """A topic deleted from the brokers (or never on them) while the store keeps its history."""
    import logging
    import uuid

    from tiering import PartitionLog

    from rsm import RemoteStorageManager, TopicIdPartition
    from spark_reader.filters import PushedFilters
    from spark_reader.hybrid import plan_batch
    from spark_reader.offsets import ending_spec, starting_spec
    from spark_reader.options import parse_options
    from spark_reader.planning import Planner

    b, _, _ = broker
    opts = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "gone", 0), tmp_path / "w")
    log.append(30)
    log.roll()
    rsm.close()
    options = {**opts, "subscribe": "gone", "kafka.bootstrap.servers": b.bootstrap_servers}
    rows = spark.read.format("kafka-tiered").options(**options).load().select("offset").collect()
    assert sorted(r["offset"] for r in rows) == list(range(30))
    parsed = parse_options(options)
    with caplog.at_level(logging.WARNING, logger="spark_reader.broker"):
        for _ in range(2):  # on the driver: the warning is logged once per process
            plan_batch(Planner(parsed), PushedFilters(), starting_spec(parsed, False), ending_spec(parsed))
    warned = [r.getMessage() for r in caplog.records if "gone" in r.getMessage()]
    assert len(warned) == 1
    assert all("does not exist on the Kafka brokers" in w and "store only" in w for w in warned)


def test_offsets_the_brokers_no_longer_hold_are_data_loss_in_the_tail(broker, spark) -> None:  # noqa: ANN001
    """A start below the brokers' log start (records deleted there, nothing in the store): failOnDataLoss.
    The topic stamps LogAppendTime: the tail's timestampType is Spark's Kafka source's."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    import spark_reader

    b, _, _ = broker
    topic = "hybrid-deleted"
    b.create_topic(topic, 1, {"segment.bytes": str(SEGMENT), "message.timestamp.type": "LogAppendTime"})
    _produce(b.bootstrap_servers, topic, 0, 0, 100)
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    (future,) = admin.delete_records([TopicPartition(topic, 0, 40)]).values()
    future.result(30)
    spark_reader.register(spark)

    def read(**extra: str) -> list[int]:
        df = (
            spark.read.format("kafka-tiered")
            .option("rsm.properties", str(b.config_file))
            .option("kafka.bootstrap.servers", b.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {"0": 10}}))
            .options(**extra)
            .load()
        )
        return sorted(r["offset"] for r in df.select("offset").collect())

    with pytest.raises(
        Exception, match=rf"{topic}-0: offsets 10\.\.39 are neither in the store nor on the Kafka"
    ):
        read()
    assert read(failOnDataLoss="false") == list(range(40, 100))
    assert read(startingOffsets="earliest") == list(range(40, 100))  # earliest: the brokers' log start
    # every column as Spark's Kafka source gives it, timestampType LogAppendTime (1) included
    from harness.spark_kafka import add_kafka_source

    add_kafka_source(spark)
    rows = {
        fmt: _rows(
            spark.read.format(fmt)
            .options(**({"rsm.properties": str(b.config_file)} if fmt == "kafka-tiered" else {}))
            .option("kafka.bootstrap.servers", b.bootstrap_servers)
            .options(subscribe=topic, includeHeaders="true")
            .load()
        )
        for fmt in ("kafka-tiered", "kafka")
    }
    assert rows["kafka-tiered"] == rows["kafka"] and {r[6] for r in rows["kafka"]} == {1}
