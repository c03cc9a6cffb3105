"""Spark reading a tiered topic: format("kafka-tiered") against Spark's own Kafka source and the ceiling.

    python benchmarks/spark_read.py [--records 5000000] [--partitions 2] [--segments 26] [--rounds 3]
                                    [--rss-segment-mib 256] [--json out.json]

One run, one topic, everything real:

- a Kafka 4.4 broker (KRaft, tests/harness) tiers to a file store through our JVM plugin and the Python
  bridge (encrypted, as README's broker config does); a topic of ``--partitions`` partitions gets
  ``--records`` records of 100-byte values (a small JSON frame around random base64 text: zstd leaves
  about two thirds of it), null keys, zstd, from Kafka's own producer-perf-test
  (org.apache.kafka.tools.ProducerPerformance, batch.size 64 KiB, linger.ms 10, acks=all); segment.bytes
  is chosen from the values' zstd ratio so the topic has about ``--segments`` segments;
- the active segments are then rolled (segment.ms 1 and one more record per partition, outside the range
  read), local.retention.ms set to 1 s, and the benchmark waits until every record of the range is tiered
  and its local segment deleted: the broker can then serve the range from the remote tier only, through
  the plugin;
- one ``local[2]`` Spark session (Spark's Kafka source jars from Maven Central in spark.jars) runs the same
  two queries on the same offset range, in interleaved rounds (the fastest round of each counts):
  ``count()`` and ``sum(crc32(value))`` (touches every value byte; its result must be equal across the two
  Kafka readers), over
  * ``kafka-tiered (columnar)``: this source with its jar on the class path (`spark_reader.jar_path()`):
    the DataSource V2 scan handing Spark the decoder's Arrow batches as ColumnarBatches;
  * ``kafka-tiered (Python)``: the Python Data Source (the jar's scan turned off for that DataFrame);
  * ``kafka``: Spark's own Kafka source, spark-sql-kafka-0-10_2.13 4.2.0 (4.3.0 is not on Maven Central;
    4.2.0 runs on PySpark 4.3.0), reading from the broker, which fetches the range from the remote tier;
  * the ceiling: a Python data source yielding prebuilt Arrow batches of the same schema, partitions and
    batch sizes from memory (benchmarks/_memory_source.py);
- and the columnar decoder alone, one thread, over the same input partitions' decoded chunks in memory;
- then the hybrid row (benchmarks/_hybrid.py): ``--records / 9`` more records that stay on the
  broker's disk (90% of the topic tiered, 10% local), and the whole topic read by ``kafka-tiered`` with
  ``kafka.bootstrap.servers`` (history from the store, tail from the broker) and by ``kafka``, with the
  broker's CPU seconds (its JVM and bridge, from /proc) during each read.

Then the columnar scan's own figures, from its workers' reports (benchmarks/_columnar.py): payloads
decompressed by a count(), and the peak RSS of a Python worker reading ``--rss-segment-mib`` segments (two
partitions of one such segment each, written without a broker).

Targets of the columnar scan, ratios in this one run: the columnar scan's sum(crc32(value)) >= 2.5x the Python Data
Source, >= 5x Spark's Kafka source, >= 0.5x the decode limit (the decoder alone, one thread, times the 2
cores of local[2]); its count() >= 10x Spark's Kafka source with zero payloads decompressed; a worker's
peak RSS on the big segments < 200 MiB. The Python Data Source's figures stay in the table.

Hybrid: >= 1.8x Spark's Kafka source, the broker's CPU during our read <= 1/5 of it during
Spark's.
Prints a table and a PASS/FAIL line per target; exits 1 if one fails.
Needs Java 17 and Maven (like the test suite); jars are cached under .cache/.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the test harness: broker, Maven builds

from benchmarks._columnar import STATS_ENV, big_segments_store, clear_stats, read_stats  # noqa: E402
from benchmarks._common import Target, console, finish, print_table  # noqa: E402

TOPIC = "spark-bench"
VALUE_SIZE = 100
PRODUCER_PROPS = {
    "compression.type": "zstd",
    "batch.size": str(64 << 10),
    "linger.ms": "10",
    "acks": "all",
}
# Kafka's own defaults for a broker (bin/kafka-server-start.sh, kafka-run-class.sh): C2 on, unlike the
# test harness's small JVMs
BROKER_JVM = (
    "-Xms1g",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
JARS_POM = REPO / "benchmarks" / "spark_read_pom.xml"
JARS_DIR = REPO / ".cache" / "spark-read"
M = 1e6


# -- jars ---------------------------------------------------------------------------------------------------
def resolve_jars() -> tuple[list[Path], Path]:
    """Spark's Kafka source jars (for spark.jars) and the kafka-tools jar, from Maven Central, cached."""
    from harness.maven import run_maven

    spark_dir, tools_dir = JARS_DIR / "spark-kafka", JARS_DIR / "kafka-tools"
    if not list(spark_dir.glob("spark-sql-kafka-*.jar")) or not list(tools_dir.glob("kafka-tools-*.jar")):
        run_maven(
            JARS_POM,
            ["dependency:copy-dependencies@spark-kafka", "dependency:copy@kafka-tools"],
            REPO / ".cache" / "logs" / "maven-spark-read.log",
            properties={"jars.dir": str(JARS_DIR)},
            offline_first=False,
        )
    return sorted(spark_dir.glob("*.jar")), next(tools_dir.glob("kafka-tools-*.jar"))


# -- the topic ----------------------------------------------------------------------------------------------
def value_pool(count: int, seed: int = 12) -> list[bytes]:
    """Distinct 100-byte values: a small JSON frame (event, id, amount) around random base64 text."""
    rng = random.Random(seed)
    events = ["click", "view", "purchase", "refund", "signup", "logout"]
    out = []
    for _ in range(count):
        head = f'{{"ev":"{rng.choice(events)}","id":{rng.randrange(10**9)},"amt":{rng.randrange(10**6) / 100},"d":"'
        pad = VALUE_SIZE - len(head) - 2
        text = base64.b64encode(rng.randbytes(pad)).decode()[:pad]
        out.append((head + text + '"}').encode())
        assert len(out[-1]) == VALUE_SIZE
    return out


def _varint(value: int) -> bytes:
    """Kafka's zig-zag varint."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def zstd_bytes_per_record(pool: list[bytes], seed: int = 3) -> float:
    """Bytes per record of these values in zstd batches of 64 KiB (~600 records), Kafka's record framing."""
    import cramjam

    rng = random.Random(seed)
    per_batch = 600
    total = records = 0
    for _ in range(20):
        body = bytearray()
        for i in range(per_batch):
            value = rng.choice(pool)
            # attributes, timestamp delta, offset delta, null key, value, no headers
            record = b"\0" + _varint(rng.randrange(20)) + _varint(i) + _varint(-1) + _varint(len(value))
            record += value + _varint(0)
            body += _varint(len(record)) + record
        total += len(cramjam.zstd.compress(bytes(body), level=3)) + 61  # + the batch header
        records += per_batch
    return total / records


def produce(tools_cp: str, bootstrap: str, records: int, payloads: Path, log_file: Path) -> str:
    """Kafka's producer-perf-test: ``records`` records, each value picked at random from ``payloads``."""
    props = [f"{k}={v}" for k, v in {"bootstrap.servers": bootstrap, **PRODUCER_PROPS}.items()]
    cmd = ["java", "-Xms512m", "-Xmx512m", "-cp", tools_cp, "org.apache.kafka.tools.ProducerPerformance",
           "--topic", TOPIC, "--num-records", str(records), "--throughput", "-1",
           "--payload-file", str(payloads), "--producer-props", *props]  # fmt: skip
    with log_file.open("w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    text = log_file.read_text(errors="replace")
    if rc != 0:
        raise RuntimeError(f"ProducerPerformance failed (rc={rc}):\n{text[-3000:]}")
    summary = [line for line in text.splitlines() if "records sent" in line]
    return summary[-1] if summary else text.strip().splitlines()[-1]


def local_logs(broker: Any, partition: int) -> list[int]:
    d = broker.partition_dir(TOPIC, partition)
    return sorted(int(p.stem) for p in d.glob("*.log"))


def roll_and_wait_tiered(
    broker: Any, partitions: int, topic_configs: dict[str, str], timeout: float
) -> dict[int, int]:
    """Roll every partition's active segment, wait until [0, end) is remote only; returns {partition: end}.

    Kafka rolls on append: with segment.ms=1 one more record per partition opens a new segment, so every
    produced record sits in a closed segment that gets tiered; local.retention.ms=1000 then deletes the
    local copies. (Set while producing, that local retention would roll segments early: records reach the
    broker more than a second after their CreateTime when the machine is busy.)
    """
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    ends = {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    consumer.close()
    admin = broker.admin_client()
    # AlterConfigs replaces the topic's whole config
    rolling = {**topic_configs, "segment.ms": "1", "local.retention.ms": "1000"}
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs=rolling)])
    admin.close()
    time.sleep(2)  # the new config reaches the log; the segments' age passes 1 ms
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    for p in range(partitions):
        producer.send(TOPIC, value=b"roll", partition=p).get(timeout=60)
    producer.close()

    deadline = time.monotonic() + timeout
    last = ""
    while True:
        state = {p: local_logs(broker, p) for p in range(partitions)}
        # (local retention may roll the new segment again, empty: what matters is that none is left below)
        if all(logs and logs[0] >= ends[p] for p, logs in state.items()):
            return ends
        now = f"local segments per partition: {[len(v) for v in state.values()]}"
        if now != last:
            console.print(f"  waiting for tiering: {now}", highlight=False)
            last = now
        if time.monotonic() > deadline:
            raise TimeoutError(f"not tiered after {timeout:.0f}s: {state}\n{broker.log_tail(30)}")
        time.sleep(2)


# -- measuring ----------------------------------------------------------------------------------------------
COLUMNAR = "spark.kafkaTiered.columnar.enabled"
COLUMNAR_READER = "kafka-tiered (columnar)"
PYTHON_READER = "kafka-tiered (Python)"


def columnar_figures(
    spark: Any, df: Any, stats: Path, rows: int, queries: dict[str, Callable[[Any], Any]]
) -> dict[str, Any]:
    """The columnar scan's workers' reports for one count() and one sum(crc32(value)) of `df`."""
    out: dict[str, Any] = {}
    for key, query in (("count", "count()"), ("sum", "sum(crc32(value))")):
        clear_stats(stats)
        queries[query](df)
        reports = read_stats(stats)
        out[f"{key}_decompressed"] = sum(r["decompressed"] for r in reports)
        out[f"{key}_rows_reported"] = sum(r["rows"] for r in reports)
        out[f"{key}_max_rss_mib"] = max(r["maxRssKiB"] for r in reports) / 1024
    if out["count_rows_reported"] != rows:
        raise RuntimeError(f"the count's workers reported {out['count_rows_reported']} rows, not {rows}")
    out["max_rss_mib"] = max(out["count_max_rss_mib"], out["sum_max_rss_mib"])
    return out


def big_segment_rss(spark: Any, work: Path, stats: Path, segment_mib: int, partitions: int) -> dict[str, Any]:
    """sum(crc32(value)) over big segments on the columnar scan (and on the Python source, which must agree):
    the peak RSS of the columnar scan's workers."""
    store, rows = big_segments_store(work, segment_mib, partitions)
    answers = {}
    elapsed = 0.0
    for columnar in (True, False):
        spark.conf.set(COLUMNAR, str(columnar).lower())
        df = spark.read.format("kafka-tiered").options(**store).option("subscribe", "big").load()
        clear_stats(stats)
        elapsed_, answers[columnar] = timed(
            lambda df=df: tuple(df.selectExpr("count(*)", "sum(crc32(value))").collect()[0])
        )
        if columnar:
            elapsed, reports = elapsed_, read_stats(stats)
    if answers[True] != answers[False] or answers[True][0] != rows:
        raise RuntimeError(f"big segments: columnar {answers[True]}, Python {answers[False]}, {rows} rows")
    return {
        "big_segment_mib": segment_mib,
        "big_rows": rows,
        "big_rows_per_s": rows / elapsed,
        "big_max_rss_mib": max(r["maxRssKiB"] for r in reports) / 1024,
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result
    finally:
        gc.enable()


def decoder_alone(parts: list[Any], rounds: int) -> tuple[float, int, list[list[int]]]:
    """Best time of the columnar decoder over the input partitions' decoded chunks in memory, one thread.

    Also returns the rows and each partition's batch sizes (what the source yields, before filtering).
    """
    from rsm.fetch.reader import SegmentReader, cipher_for
    from segment_format.columnar import iter_stream_record_batches
    from spark_reader.partition_reader import clients

    inputs = []
    for part in parts:
        split = part.split
        store, keyring = clients(part.settings.rsm_configs)
        reader = SegmentReader(store, split.bucket, split.manifest, cipher_for(split.manifest, keyring))
        cs = split.manifest.log.chunk_size
        start, end = split.start_position, split.end_position
        pieces = []
        for i in range(start // cs, (end - 1) // cs + 1):
            data = reader.chunk(i)
            lo = start - i * cs if i == start // cs else 0
            hi = end - i * cs if i == (end - 1) // cs else len(data)
            pieces.append(bytes(memoryview(data)[lo:hi]))
        inputs.append((pieces, start))

    def decode_all() -> list[list[int]]:
        return [
            [b.num_rows for b in iter_stream_record_batches(pieces, base_position=start)]
            for pieces, start in inputs
        ]

    best, sizes = float("inf"), []
    for _ in range(rounds):
        t, sizes = timed(decode_all)
        best = min(best, t)
    return best, sum(map(sum, sizes)), sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=5_000_000, help="records to produce (default 5 M)")
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (default 2: local[2])")
    parser.add_argument("--segments", type=int, default=26, help="about how many segments the topic gets")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per reader and query")
    parser.add_argument("--keep", action="store_true", help="keep the broker's and store's directory")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--rss-segment-mib", type=int, default=256, help="segment size of the memory run (0: skip it)"
    )
    parser.add_argument("--no-hybrid", action="store_true", help="skip the hybrid row (store + broker tail)")
    args = parser.parse_args(argv)

    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            console.print(f"spark_read: needs Java 17 and Maven on the PATH ({tool} is missing)")
            return 2
    # this checkout's packages in the bridge the broker starts and in Spark's Python workers
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )

    from harness.kafka import KafkaBroker
    from harness.maven import build_test_java
    from harness.ports import free_ports

    import spark_reader
    from rsm.bridge.client import BridgeClient
    from rsm.cli.bridge import build_plugin

    t0 = time.monotonic()
    spark_jars, tools_jar = resolve_jars()
    java_build = build_test_java()
    plugin_jar = build_plugin()
    columnar_jar = spark_reader.jar_path()
    load0 = os.getloadavg()

    work = Path(tempfile.mkdtemp(prefix="rsmspark-", dir="/tmp"))  # short: the bridge's socket path
    work.chmod(0o700)
    results: dict[str, Any] = {"records": args.records, "partitions": args.partitions}
    broker = spark = None
    try:
        keyring = work / "keyring.json"
        keyring.write_text(json.dumps({"k1": base64.b64encode(os.urandom(32)).decode()}))
        keyring.chmod(0o600)
        store = {
            "storage.backend": "file",
            "storage.file.root": str(work / "store"),
            "bucket": "tiered",
            "encryption.enabled": "true",
            "encryption.keyring.path": str(keyring),
            "encryption.key.id": "k1",
        }
        (work / "store").mkdir()
        sock = work / "bridge.sock"
        props = {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "io.tieredrsm.bridge.BridgeRemoteStorageManager",
            "remote.log.storage.manager.class.path": str(plugin_jar),
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "1000",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "1000",
            "log.initial.task.delay.ms": "0",
            **{f"rsm.config.{k}": v for k, v in store.items()},
            "rsm.config.bridge.socket.path": str(sock),
            "rsm.config.bridge.command": f"{sys.executable} -m rsm.cli.main bridge serve",
            "rsm.config.bridge.log.file": str(work / "bridge.log"),
        }
        broker = KafkaBroker(work / "broker", props, java_build=java_build, jvm_opts=BROKER_JVM)
        broker.port, broker.controller_port = free_ports(2)
        broker.extra_props["rsm.config.bridge.admin.bootstrap.servers"] = f"127.0.0.1:{broker.port}"
        broker.start()

        # the topic: segment.bytes from the values' zstd ratio, so it gets about --segments segments
        pool = value_pool(20_000)
        payloads = work / "payloads.txt"
        payloads.write_bytes(b"\n".join(pool))
        per_record = zstd_bytes_per_record(pool)
        segment_bytes = max(1 << 20, int(args.records * per_record / args.segments))
        topic_configs = {
            "remote.storage.enable": "true",
            "segment.bytes": str(segment_bytes),
            "retention.ms": "-1",
        }
        broker.create_topic(TOPIC, args.partitions, topic_configs)
        console.print(
            f"producing {args.records:,} records (100-byte values, zstd ~{per_record:.0f} B/record) to "
            f"{args.partitions} partition(s), segment.bytes {segment_bytes:,}",
            highlight=False,
        )
        t = time.monotonic()
        tools_cp = os.pathsep.join([str(java_build.kafka_libs / "*"), str(tools_jar)])
        summary = produce(tools_cp, broker.bootstrap_servers, args.records, payloads, work / "producer.log")
        produce_s = time.monotonic() - t
        console.print(f"  ProducerPerformance: {summary}", highlight=False)
        t = time.monotonic()
        ends = roll_and_wait_tiered(broker, args.partitions, topic_configs, timeout=1800)
        tier_s = time.monotonic() - t
        rows = sum(ends.values())
        if rows != args.records:
            raise RuntimeError(f"the topic holds {rows} records, not {args.records}: {ends}")
        manifests = list((work / "store").rglob("*.manifest"))
        tiered_bytes = sum(p.stat().st_size for p in (work / "store").rglob("*.log"))
        console.print(
            f"  tiered: {len(manifests)} segments, {tiered_bytes / M:,.0f} MB in the store, ends {ends} "
            f"({produce_s:.0f} s producing, {tier_s:.0f} s rolling + tiering)",
            highlight=False,
        )
        results |= {"segments": len(manifests), "store_bytes": tiered_bytes, "segment_bytes": segment_bytes,
                    "ends": ends, "produce_s": produce_s, "tier_s": tier_s}  # fmt: skip

        # one Spark session for every Spark figure; the columnar scan's workers report to `stats`
        from benchmarks._memory_source import MemoryBatchesDataSource
        from spark_reader.options import parse_options
        from spark_reader.session import local_session
        from spark_reader.source import TieredBatchReader

        stats = work / "worker-stats"
        clear_stats(stats)
        os.environ[STATS_ENV] = str(stats)
        spark = local_session(
            "spark-read-bench",
            "local[2]",
            {"spark.jars": ",".join(map(str, [*spark_jars, columnar_jar])), "spark.driver.memory": "2g"},
        )
        spark_reader.register(spark)
        spark.dataSource.register(MemoryBatchesDataSource)
        ending = json.dumps({TOPIC: {str(p): e for p, e in ends.items()}})
        offsets = {"subscribe": TOPIC, "startingOffsets": "earliest", "endingOffsets": ending}

        tiered_opts = {**store, **offsets}
        parts = TieredBatchReader(parse_options({k.lower(): v for k, v in tiered_opts.items()})).partitions()
        decode_s, decoded_rows, batch_sizes = decoder_alone(parts, max(3, args.rounds))
        if decoded_rows != rows:
            raise RuntimeError(f"the decoder gave {decoded_rows} rows, not {rows}")
        console.print(
            f"  kafka-tiered plans {len(parts)} input partitions, {sum(map(len, batch_sizes))} batches",
            highlight=False,
        )

        def tiered(columnar: bool) -> Any:
            spark.conf.set(COLUMNAR, str(columnar).lower())  # read when the DataFrame is loaded
            return spark.read.format("kafka-tiered").options(**tiered_opts).load()

        readers = {
            COLUMNAR_READER: tiered(True),
            PYTHON_READER: tiered(False),
            "kafka (Spark 4.2.0)": spark.read.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .options(**offsets)
            .load(),
            "ceiling (memory)": spark.read.format("bench-memory-batches")
            .option("batches", json.dumps(batch_sizes))
            .option("topic", TOPIC)
            .load(),
        }
        queries: dict[str, Callable[[Any], Any]] = {
            "count()": lambda df: df.count(),
            "sum(crc32(value))": lambda df: tuple(
                df.selectExpr("count(*) AS n", "sum(crc32(value)) AS s").collect()[0]
            ),
        }
        bridge = BridgeClient(sock)

        def streamed() -> int:
            return int(bridge.health().get("bytes_streamed") or 0)

        times: dict[tuple[str, str], list[float]] = {(r, q): [] for r in readers for q in queries}
        answers: dict[tuple[str, str], Any] = {}
        remote_bytes: list[int] = []
        console.print(
            f"Spark {spark.version} local[2]: one warm-up and {args.rounds} rounds", highlight=False
        )
        for round_ in range(args.rounds + 1):
            for reader, df in readers.items():
                for query, run in queries.items():
                    before = streamed()
                    elapsed, answer = timed(lambda df=df, run=run: run(df))
                    if reader.startswith("kafka ("):
                        remote_bytes.append(streamed() - before)
                    answers[(reader, query)] = answer
                    if round_:  # round 0 warms up: JIT, Python workers, page cache
                        times[(reader, query)].append(elapsed)
            console.print(
                f"  round {round_ or 'warm-up'}: "
                + ", ".join(f"{r} {q} {v[-1]:.2f} s" for (r, q), v in times.items() if v),
                highlight=False,
            )
        load1 = os.getloadavg()

        # the three Kafka readers read the same records
        for query in queries:
            a, b = answers[(COLUMNAR_READER, query)], answers[("kafka (Spark 4.2.0)", query)]
            c = answers[(PYTHON_READER, query)]
            if not a == b == c:
                raise RuntimeError(f"{query}: columnar {a}, Python {c}, Spark's Kafka source {b}")
        if answers[(COLUMNAR_READER, "count()")] != rows or answers[("ceiling (memory)", "count()")] != rows:
            raise RuntimeError(f"counts differ from {rows}: {answers}")
        columnar = columnar_figures(spark, readers[COLUMNAR_READER], stats, rows, queries)
        if args.rss_segment_mib:
            columnar |= big_segment_rss(spark, work, stats, args.rss_segment_mib, args.partitions)
        if min(remote_bytes) < tiered_bytes // 2:
            raise RuntimeError(f"the broker streamed {remote_bytes} bytes from the remote tier per read")

        rate = {k: rows / min(v) for k, v in times.items()}
        table = []
        for (reader, query), v in times.items():
            table.append(
                [
                    f"{reader}, {query}",
                    f"{rate[(reader, query)] / M:,.2f}",
                    " ".join(f"{rows / x / M:.2f}" for x in v),
                ]
            )
        table.append(["columnar decoder alone, 1 thread", f"{rows / decode_s / M:,.2f}", ""])
        limit = rows / decode_s * 2  # the decode limit: one thread's rate times local[2]'s cores
        print_table(
            f"{rows:,} records, {len(manifests)} tiered segments, {args.partitions} partitions, local[2] "
            f"(load average {load0[0]:.2f} before, {load1[0]:.2f} after)",
            ["reader, query", "M rows/s (best)", "M rows/s per round"],
            table,
        )
        console.print(
            f"Spark's Kafka source: the broker streamed {min(remote_bytes) / M:,.0f} MB from the remote tier "
            f"per read (store holds {tiered_bytes / M:,.0f} MB)",
            highlight=False,
        )
        console.print(
            f"columnar scan: count() decompressed {columnar['count_decompressed']} record payloads "
            f"(sum(crc32(value)): {columnar['sum_decompressed']}); Python worker peak RSS "
            f"{columnar['max_rss_mib']:.0f} MiB here"
            + (f", {columnar['big_max_rss_mib']:.0f} MiB on {args.rss_segment_mib} MiB segments "
               f"({columnar['big_rows_per_s'] / M:.2f} M rows/s)" if args.rss_segment_mib else ""),
            highlight=False,
        )  # fmt: skip
        crc, cnt = "sum(crc32(value))", "count()"
        kafka = "kafka (Spark 4.2.0)"
        targets = [
            Target(f"columnar / Python Data Source, {crc}", rate[(COLUMNAR_READER, crc)] / rate[(PYTHON_READER, crc)],
                   2.5, unit="x"),
            Target(f"columnar / Spark's Kafka source, {crc}", rate[(COLUMNAR_READER, crc)] / rate[(kafka, crc)],
                   5.0, unit="x"),
            Target(f"columnar / decode limit (decoder alone x 2 cores), {crc}", rate[(COLUMNAR_READER, crc)] / limit,
                   0.5, unit="x"),
            Target(f"columnar / Spark's Kafka source, {cnt}", rate[(COLUMNAR_READER, cnt)] / rate[(kafka, cnt)],
                   10.0, unit="x"),
            Target(f"columnar, {cnt}: record payloads decompressed", columnar["count_decompressed"], 0,
                   at_least=False),
        ]  # fmt: skip
        if args.rss_segment_mib:
            targets.append(
                Target(f"columnar, Python worker peak RSS on {args.rss_segment_mib} MiB segments",
                       columnar["big_max_rss_mib"], 200, at_least=False, unit=" MiB")
            )  # fmt: skip
        if not args.no_hybrid:
            from benchmarks._hybrid import add_local_tail, run_hybrid_row

            tail_records = args.records // 9
            add_local_tail(
                broker, TOPIC, topic_configs,
                lambda n: produce(tools_cp, broker.bootstrap_servers, n, payloads, work / "producer-tail.log"),
                tail_records,
            )  # fmt: skip
            hybrid, hybrid_targets = run_hybrid_row(
                spark, broker, TOPIC, store, args.rounds, timed, columnar_conf=COLUMNAR
            )
            targets += hybrid_targets
            results["hybrid"] = hybrid
            print_table(
                f"hybrid: {hybrid['rows']:,} records, {rows:,} tiered + {tail_records:,} on the broker only",
                ["reader, sum(crc32(value))", "M rows/s (best)", "broker CPU s per read (JVM + bridge)"],
                [
                    [r, f"{hybrid['rows_per_s'][r] / M:,.2f}", f"{hybrid['broker_cpu_s_per_read'][r]:.2f}"]
                    for r in hybrid["seconds_best"]
                ],
            )
        results |= {
            "rows_per_s": {f"{r} / {q}": x for (r, q), x in rate.items()},
            "seconds_per_round": {f"{r} / {q}": v for (r, q), v in times.items()},
            "decoder_rows_per_s": rows / decode_s,
            "columnar": columnar,
            "input_partitions": len(parts),
            "remote_bytes_per_kafka_read": min(remote_bytes),
            "load_average": {"before": load0, "after": load1},
            "answers": {f"{r} / {q}": a for (r, q), a in answers.items()},
            "targets": [{"name": t.name, "value": t.value, "threshold": t.threshold, "passed": t.passed}
                        for t in targets],
            "wall_s": time.monotonic() - t0,
        }  # fmt: skip
        return finish(targets, results, args.json)
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        if args.keep:
            console.print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
