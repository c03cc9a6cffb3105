"""format("kafka-tiered") on a Spark standalone cluster gives what it gives on local[2].

A topic tiered into a file store (a path every process on this machine sees) is read by the same
queries (a full read with headers, a read_committed aggregate that shuffles, an offset range with a
filter) twice: on the session's local[2] and from a driver connected to a master with two workers,
whose executors run this interpreter and import this checkout of the project. This file is also that
driver: ``python tests/spark/test_spark_cluster.py MASTER_URL OPTIONS_JSON`` prints the results as JSON (only
one SparkContext fits in a JVM, and the test session already holds the local one).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "clustered"
DRIVER_TIMEOUT_S = 180
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _b64(v: bytes | bytearray | None) -> str | None:
    return None if v is None else base64.b64encode(bytes(v)).decode()


def rows(df: DataFrame) -> list[list[Any]]:
    """Every column of every row, JSON-able (bytes in base64, timestamps in ms), by partition and offset."""
    cols = ["partition", "offset", "key", "value", "topic", "unix_millis(timestamp)", "timestampType"]
    has_headers = "headers" in df.columns
    out = []
    for r in df.selectExpr(*cols, *(["headers"] if has_headers else [])).collect():
        row = [r[0], r[1], _b64(r[2]), _b64(r[3]), r[4], r[5], r[6]]
        if has_headers:
            row.append(None if r[7] is None else [[h["key"], _b64(h["value"])] for h in r[7]])
        out.append(row)
    return sorted(out, key=lambda row: (row[0], row[1]))


def run_queries(spark: SparkSession, store: dict[str, str]) -> dict[str, Any]:
    """The queries both sessions run; every result JSON-able."""
    import pyspark.sql.functions as F

    import spark_reader

    spark_reader.register(spark)

    def read(**options: str) -> DataFrame:
        return (
            spark.read.format("kafka-tiered")
            .options(**store)
            .option("subscribe", TOPIC)
            .options(**options)
            .load()
        )

    full = read(includeHeaders="true")
    committed = read(**{"kafka.isolation.level": "read_committed"})
    aggregate = (
        committed.groupBy("partition")
        .agg(
            F.count("*").alias("records"),
            F.min("offset").alias("first"),
            F.max("offset").alias("last"),
            F.sum(F.length("value")).alias("value_bytes"),
            F.count("key").alias("keys"),
            F.min("timestamp").cast("long").alias("min_ts"),
        )
        .orderBy("partition")
    )
    ranged = read(
        startingOffsets=json.dumps({TOPIC: {"0": 150, "1": -2, "2": 420}}),
        endingOffsets=json.dumps({TOPIC: {"0": 480, "1": 333, "2": -1}}),
        includeHeaders="true",
    ).where("offset % 5 = 0 or key is null")
    return {
        "full": rows(full),
        "aggregate": [list(r) for r in aggregate.collect()],
        "ranged": rows(ranged),
    }


def _executor_view(_: int) -> list[str]:
    """Where a task runs: its Python, where it imports the project from, its executor's directory."""
    import os as worker_os
    import sys as worker_sys
    import time as worker_time

    import spark_reader

    worker_time.sleep(0.5)  # keep both executors busy, so each takes tasks
    return [worker_sys.executable, spark_reader.__file__, worker_os.getcwd()]


def cluster_driver(master: str, store: dict[str, str], path: str = "python") -> dict[str, Any]:
    """Connect to ``master``, wait for its two executors, run the queries; the results and the executors'
    view of themselves. ``path`` "columnar": with the columnar scan's jar in ``spark.jars``."""
    from pyspark.sql import SparkSession

    quiet = ROOT / "spark_reader" / "log4j2-quiet.properties"
    # a plain session (filter pushdown as Spark ships it: run_queries' register turns it on), sized for
    # two 1-core workers of 512 MiB on a small machine
    conf = {
        "spark.driver.memory": "512m",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        # short-lived JVMs: the C1 compiler alone starts them sooner on a small machine
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{quiet} {QUICK_JVM}",
        "spark.executor.extraJavaOptions": QUICK_JVM,
        # executors import this checkout, whatever the interpreter's installed copy points at
        "spark.executorEnv.PYTHONPATH": str(ROOT),
    }
    if path == "columnar":
        from spark_reader.jar import jar_path

        conf["spark.jars"] = jar_path()
    builder = SparkSession.builder.master(master).appName("kafka-tiered-cluster")
    for key, value in conf.items():
        builder = builder.config(key, value)
    started = time.monotonic()
    spark = builder.getOrCreate()
    print(f"driver: session {time.monotonic() - started:.1f}s", file=sys.stderr)
    try:
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # the driver's block manager too
        deadline = time.monotonic() + 90
        while status().size() < 3:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {status().size() - 1} executors registered after 90s")
            time.sleep(0.2)
        print(f"driver: executors registered {time.monotonic() - started:.1f}s", file=sys.stderr)
        views = spark.sparkContext.parallelize(range(8), 8).map(_executor_view).collect()
        print(f"driver: executors probed {time.monotonic() - started:.1f}s", file=sys.stderr)
        results = run_queries(spark, store)
        print(f"driver: queries run {time.monotonic() - started:.1f}s", file=sys.stderr)
        results["executors"] = sorted({tuple(v) for v in views})
        results["master"] = spark.sparkContext.master
        plan = spark.read.format("kafka-tiered").options(**store).option("subscribe", TOPIC).load()
        results["columnar"] = (
            "KafkaTieredColumnarScan" in plan._jdf.queryExecution().executedPlan().toString()
        )
        return results
    finally:
        spark.stop()


@pytest.fixture(scope="module")
def tiered_topic(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[Any]]:
    """A 3-partition topic of 3 segments each in a file store: codecs, headers, null keys, a committed
    and an aborted transaction."""
    from tiering import tier_mixed_topic

    base = tmp_path_factory.mktemp("cluster-store")
    store = {"storage.backend": "file", "storage.file.root": str(base / "store"), "bucket": "shared"}
    logs = tier_mixed_topic(base, TOPIC, store)
    return store, logs


@pytest.mark.parametrize("path", ["python", "columnar"])
def test_a_standalone_cluster_reads_what_local_reads(
    spark, spark_cluster, tiered_topic, tmp_path, path
) -> None:  # noqa: ANN001
    from harness.procs import dies_with_parent
    from harness.spark import use_path

    store, logs = tiered_topic
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    # one after the other: on a 2-core machine, running both at once makes each slower than the pair
    started = time.monotonic()
    out, err = tmp_path / "driver.out", tmp_path / "driver.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        driver = subprocess.Popen(
            dies_with_parent([sys.executable, __file__, spark_cluster.master_url, json.dumps(store), path]),
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        rc = driver.wait(timeout=DRIVER_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    cluster_s = time.monotonic() - started
    started = time.monotonic()
    use_path(spark, path)
    try:
        local = json.loads(json.dumps(run_queries(spark, store)))  # tuples to lists, as the driver's JSON
    finally:
        use_path(spark, "python")
    local_s = time.monotonic() - started
    if rc != 0:
        pytest.fail(
            f"cluster driver failed (rc={rc}):\n{err.read_text()[-6000:]}\n{spark_cluster.log_tail()}"
        )
    on_cluster = json.loads(out.read_text().strip().splitlines()[-1])
    timings = [line for line in err.read_text().splitlines() if line.startswith("driver: ")]
    print(
        f"cluster up in {spark_cluster.start_seconds:.1f}s; cluster driver {cluster_s:.1f}s "
        f"({'; '.join(timings)}); local[2] queries {local_s:.1f}s",
        file=sys.stderr,
    )

    # the cluster ran it: two executors on two workers, this interpreter, this checkout of the project
    assert on_cluster.pop("master") == spark_cluster.master_url
    assert on_cluster.pop("columnar") == (path == "columnar")
    executors = on_cluster.pop("executors")
    assert {python for python, _, _ in executors} == {sys.executable}
    assert {Path(module) for _, module, _ in executors} == {ROOT / "spark_reader" / "__init__.py"}
    worker_dirs = {spark_cluster.worker_dir(n).resolve(): n for n in range(2)}
    workers = {n for *_, cwd in executors for d, n in worker_dirs.items() if d in Path(cwd).parents}
    assert workers == {0, 1}, executors

    # the queries give the same answers, and those are the topic's records
    assert on_cluster.keys() == local.keys()
    for name in local:
        assert on_cluster[name] == local[name], name
    want = sorted(
        [log.tip.partition, r.offset, _b64(r.key), _b64(r.value), TOPIC, r.timestamp, 0,
         [[k, _b64(v)] for k, v in r.headers] or None]
        for log in logs
        for r in log.consumer_rows()
    )  # fmt: skip
    assert local["full"] == want
    assert [row[1] for row in local["aggregate"]] == [len(log.consumer_rows(True)) for log in logs]
    in_range = {0: range(150, 480), 1: range(0, 333), 2: range(420, 10**9)}
    assert local["ranged"] == [
        row for row in want if row[1] in in_range[row[0]] and (row[1] % 5 == 0 or row[2] is None)
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout first, whatever the installed copy points at
    print(json.dumps(cluster_driver(sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:4])))
