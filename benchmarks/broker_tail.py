"""The live tail at the store's speed: a topic that never tiers, read by format("kafka-tiered") and "kafka".

    python benchmarks/broker_tail.py [--records 3000000] [--partitions 2] [--value-bytes 100]
                                     [--codec zstd] [--rounds 3] [--latency-samples 60]
                                     [--max-offsets-per-trigger 500000] [--small-trigger N]
                                     [--json out.json]

One run, everything real: a Kafka 4.4 broker (tests/harness, one node, Kafka's own JVM settings, no
tiered storage); a topic of ``--partitions`` partitions gets ``--records`` records from a confluent-kafka
producer (``--codec``, batch.size 64 KiB, linger.ms 10): ``--value-bytes`` values (a small JSON frame
around random base64 text), 8-byte keys. Nothing of it is tiered, so with ``kafka.bootstrap.servers`` and
an empty store `format("kafka-tiered")` reads every record from the broker: the tail path
(`spark_reader.tail`: Fetch responses' record batches through segment_format's columnar decoder).

One ``local[2]`` Spark session (the columnar scan's jar and Spark's Kafka source's jars in spark.jars)
runs ``count()`` and ``sum(crc32(value))`` over the same offset range (earliest to the ends produced), in
interleaved rounds after a warm-up (the fastest round of each counts), with

* ``kafka-tiered (columnar)``: the DataSource V2 scan handing Spark the decoder's Arrow batches (its
  ``count()`` from the batch headers);
* ``kafka-tiered (Python)``: the Python Data Source (the jar's scan turned off for that DataFrame);
* ``kafka``: Spark's own Kafka source, spark-sql-kafka-0-10_2.13 4.2.0 (Kafka's Java consumer).

Answers must agree across the three. Around each query the broker JVM's CPU (/proc/<pid>/stat) is read:
broker CPU µs per record read, per reader.

Then, in the same session (`benchmarks._broker_tail_stream`), each reader streams the same never-tiering
topic with ``Trigger.AvailableNow`` into the noop sink (every column of every row produced, nothing
written), in interleaved rounds after a warm-up, best of the rounds, broker CPU too:

* with ``maxOffsetsPerTrigger`` ``--max-offsets-per-trigger`` (default 500,000): the figure. An operator
  sizes a backfill's trigger so that a micro-batch is real work, seconds of reading rather than Spark's
  own per-batch bookkeeping (its offset and commit logs, ~100 ms a micro-batch here whatever the source):
  500,000 records of 100 bytes are ~50 MB a micro-batch, six micro-batches over the issue's 3 M records,
  each partition's task reading 250,000;
* with ``--small-trigger`` (default a forty-eighth of the records, 62,500 for 3 M: 48 micro-batches),
  reported as a note, so the fixed cost is not hidden: that run's time and ratio, and each reader's cost
  per extra micro-batch (the two runs read the same records, so their difference over the extra
  micro-batches is per-batch cost: Spark's bookkeeping, planning, task start; Spark's Kafka source keeps
  consumers and an admin client across micro-batches, and so does this source's fetch layer,
  `spark_reader.brokerwire.pool`).

Last, the three follow a one-partition topic at once with a 1 s trigger into foreachBatch sinks while
``--latency-samples`` records carrying their send time are produced: the p50 of produce-to-sink latency.
Prints rows/s and each reader's ratio to Spark's Kafka source, as measured in this run (the machine's
load average next to the stream figures: a shared machine's other work moves them); no target (a
measurement), exit status 0. Needs Java 17 and Maven for the broker and the jars, like the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the test harness: broker, Maven builds, Spark's Kafka jars

from benchmarks._broker_tail_stream import (  # noqa: E402
    AvailableNowBest,
    BrokerCpu,
    available_now_rounds,
    latency,
    p50,
)
from benchmarks._common import console, print_table  # noqa: E402
from benchmarks.broker_wire import BROKER_JVM, value_pool  # noqa: E402

TOPIC = "tail-bench"
LATENCY_TOPIC = "tail-latency"
COLUMNAR = "spark.kafkaTiered.columnar.enabled"
READERS = ("kafka-tiered (columnar)", "kafka-tiered (Python)", "kafka (Spark 4.2.0)")
QUERIES = ("count()", "sum(crc32(value))")


def produce(bootstrap: str, partitions: int, records: int, value_bytes: int, codec: str) -> dict[int, int]:
    """`records` records spread evenly over the partitions; returns each partition's end offset."""
    from confluent_kafka import Producer

    pool = value_pool(20_000, value_bytes)
    producer = Producer({
        "bootstrap.servers": bootstrap, "compression.type": codec, "batch.size": 64 << 10, "linger.ms": 10,
        "acks": "all", "queue.buffering.max.messages": 1_000_000,
    })  # fmt: skip
    for n in range(records):
        while True:
            try:
                producer.produce(
                    TOPIC, key=n.to_bytes(8, "big"), value=pool[n % len(pool)], partition=n % partitions
                )
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("records left unsent")
    return {p: records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def batch_queries(frames: dict[str, Any], args: argparse.Namespace, cpu: BrokerCpu) -> dict[str, Any]:
    """count() and sum(crc32(value)) by each reader, interleaved rounds after a warm-up; the broker JVM's
    CPU seconds per record read in each (its least over the rounds)."""
    run = {
        "count()": lambda df: df.count(),
        "sum(crc32(value))": lambda df: df.selectExpr("sum(crc32(value))").collect()[0][0],
    }
    times: dict[tuple[str, str], list[float]] = {(r, q): [] for r in READERS for q in QUERIES}
    cpus: dict[tuple[str, str], list[float]] = {(r, q): [] for r in READERS for q in QUERIES}
    answers: dict[tuple[str, str], Any] = {}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        for query in QUERIES:
            for name, df in frames.items():
                before = cpu.seconds()
                elapsed, answers[(name, query)] = timed(lambda df=df, q=query: run[q](df))
                if round_:
                    times[(name, query)].append(elapsed)
                    cpus[(name, query)].append(cpu.seconds() - before)
        done = ", ".join(f"{r} {q} {v[-1]:.2f} s" for (r, q), v in times.items() if v)
        console.print(f"  round {round_ or 'warm-up'}: {done or 'done'}", highlight=False)
    for query in QUERIES:
        theirs = answers[(READERS[-1], query)]
        for name in READERS:
            if answers[(name, query)] != theirs:
                raise RuntimeError(f"{name} {query} gave {answers[(name, query)]}, Spark's {theirs}")
    if answers[(READERS[-1], "count()")] != args.records:
        raise RuntimeError(f"count() gave {answers[(READERS[-1], 'count()')]}, not {args.records}")
    best = {k: min(v) for k, v in times.items()}
    cpu_us = {k: min(v) / args.records * 1e6 for k, v in cpus.items()}
    ratio = {(r, q): best[(READERS[-1], q)] / best[(r, q)] for r in READERS for q in QUERIES}
    cpu_ratio = {
        (r, q): cpu_us[(r, q)] / max(cpu_us[(READERS[-1], q)], 1e-9) for r in READERS for q in QUERIES
    }
    print_table(
        f"{args.records:,} records on the broker only, {args.value_bytes}-byte values, {args.codec}, "
        f"{args.partitions} partitions, local[2], best of {args.rounds}",
        ["reader", "query", "seconds", "M rows/s", "/ Spark's Kafka source", "broker CPU µs/rec", "/ Spark's"],
        [
            (r, q, f"{best[(r, q)]:.2f}", f"{args.records / best[(r, q)] / 1e6:.2f}", f"{ratio[(r, q)]:.2f}x",
             f"{cpu_us[(r, q)]:.3f}", f"{cpu_ratio[(r, q)]:.2f}x")
            for q in QUERIES
            for r in READERS
        ],
    )  # fmt: skip
    return {
        "seconds_best": {f"{r} {q}": s for (r, q), s in best.items()},
        "ratio_vs_kafka_source": {f"{r} {q}": x for (r, q), x in ratio.items()},
        "broker_cpu_us_per_record": {f"{r} {q}": x for (r, q), x in cpu_us.items()},
        "broker_cpu_ratio_vs_kafka_source": {f"{r} {q}": x for (r, q), x in cpu_ratio.items()},
    }


def micro_batch_cost(large: AvailableNowBest, small: AvailableNowBest) -> float:
    """Seconds each extra micro-batch costs a reader: both runs read the same records, so what the run
    with more micro-batches takes beyond the other is per-batch cost (Spark's offset and commit logs
    included, the same for every reader)."""
    extra = small.batches - large.batches
    return (small.seconds - large.seconds) / extra if extra > 0 else float("nan")


def stream_queries(
    spark: Any,  # noqa: ANN401
    args: argparse.Namespace,
    store: dict[str, str],
    offsets: dict[str, str],
    cpu: BrokerCpu,
    broker: Any,  # noqa: ANN401
    work: Path,
) -> dict[str, Any]:
    """AvailableNow over the topic with the operators' trigger and with the small one (best of the rounds,
    with the broker's CPU), then the micro-batch latency of a 1 s trigger (`benchmarks._broker_tail_stream`)."""
    base = {k: v for k, v in offsets.items() if k != "endingOffsets"}
    runs = {}
    for trigger in (args.max_offsets_per_trigger, args.small_trigger):
        opts = {**base, "maxOffsetsPerTrigger": str(trigger)}
        runs[trigger] = available_now_rounds(
            spark, READERS, store, opts, cpu, work, args.rounds, args.records,
            lambda line: console.print(line, highlight=False),
        )  # fmt: skip
    large, small = runs[args.max_offsets_per_trigger], runs[args.small_trigger]
    theirs = READERS[-1]
    speed = {r: large[theirs].seconds / large[r].seconds for r in READERS}
    small_speed = {r: small[theirs].seconds / small[r].seconds for r in READERS}
    cpu_us = {r: large[r].broker_cpu_s / args.records * 1e6 for r in READERS}
    per_batch = {r: micro_batch_cost(large[r], small[r]) for r in READERS}
    broker.create_topic(LATENCY_TOPIC, 1)
    lat = latency(spark, READERS, store, broker.bootstrap_servers, LATENCY_TOPIC, args.latency_samples, work)
    p50s = {r: p50(v) for r, v in lat.items()}
    load = os.getloadavg()
    print_table(
        f"streams, best of {args.rounds}: AvailableNow over the {args.records:,} records with "
        f"maxOffsetsPerTrigger {args.max_offsets_per_trigger:,} ({large[theirs].batches} micro-batches); "
        f"latency of a 1 s trigger, {args.latency_samples} records, the readers at once; load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        ["reader", "AvailableNow s", "speed / Spark's", "broker CPU µs/rec", "/ Spark's", "latency p50 ms",
         "/ Spark's"],
        [
            (r, f"{large[r].seconds:.2f}", f"{speed[r]:.2f}x", f"{cpu_us[r]:.3f}",
             f"{cpu_us[r] / max(cpu_us[theirs], 1e-9):.2f}x", f"{p50s[r] * 1000:.0f}",
             f"{p50s[r] / p50s[theirs]:.2f}x")
            for r in READERS
        ],
    )  # fmt: skip
    print_table(
        f"note, the fixed cost of a micro-batch: the same stream with maxOffsetsPerTrigger "
        f"{args.small_trigger:,} ({small[theirs].batches} micro-batches), and what each extra micro-batch "
        "costs (the two runs' difference per extra micro-batch, Spark's offset and commit logs included)",
        ["reader", "AvailableNow s", "speed / Spark's", "ms per micro-batch"],
        [
            (r, f"{small[r].seconds:.2f}", f"{small_speed[r]:.2f}x", f"{per_batch[r] * 1000:.0f}")
            for r in READERS
        ],
    )  # fmt: skip
    return {
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "available_now_seconds_best": {r: x.seconds for r, x in large.items()},
        "available_now_speed_vs_kafka_source": speed,
        "available_now_broker_cpu_us_per_record": cpu_us,
        "available_now_micro_batches": {r: x.batches for r, x in large.items()},
        "small_trigger": args.small_trigger,
        "small_trigger_seconds_best": {r: x.seconds for r, x in small.items()},
        "small_trigger_speed_vs_kafka_source": small_speed,
        "small_trigger_micro_batches": {r: x.batches for r, x in small.items()},
        "seconds_per_micro_batch": per_batch,
        "latency_p50_s": p50s,
        "latency_p50_ratio_vs_kafka_source": {r: p50s[r] / p50s[theirs] for r in READERS},
        "stream_load_average": load,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=3_000_000, help="records to produce (default 3 M)")
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (default 2: local[2])")
    parser.add_argument("--value-bytes", type=int, default=100, help="value size (default 100)")
    parser.add_argument("--codec", default="zstd", help="producer compression.type (default zstd)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per reader and query")
    parser.add_argument("--latency-samples", type=int, default=60, help="records timed end to end (60)")
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=500_000,
        help="AvailableNow's maxOffsetsPerTrigger (default 500,000: six micro-batches of the 3 M records)",
    )  # fmt: skip
    parser.add_argument(
        "--small-trigger", type=int, default=None,
        help="the small trigger of the per-micro-batch note (default: records / 48, 62,500 for 3 M)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    args.small_trigger = args.small_trigger or max(1, args.records // 48)
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            console.print(f"broker_tail: needs Java 17 and Maven on the PATH ({tool} is missing)")
            return 2
    # this checkout's packages in Spark's Python workers
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    from harness.kafka import KafkaBroker
    from harness.maven import build_test_java
    from harness.spark_kafka import kafka_source_jars

    import spark_reader
    from spark_reader.session import local_session

    work = Path(tempfile.mkdtemp(prefix="tailbench-", dir="/tmp"))
    broker = spark = None
    try:
        jars = [*map(str, kafka_source_jars()), spark_reader.jar_path()]
        broker = KafkaBroker(work / "broker", java_build=build_test_java(), jvm_opts=BROKER_JVM)
        broker.start()
        bootstrap = broker.bootstrap_servers
        broker.create_topic(TOPIC, args.partitions, {"retention.ms": "-1"})
        t = time.monotonic()
        ends = produce(bootstrap, args.partitions, args.records, args.value_bytes, args.codec)
        console.print(f"produced {args.records:,} records ({args.codec}) in {time.monotonic() - t:.1f} s")
        (work / "store" / "tiered").mkdir(parents=True)  # an empty store: the topic never tiers
        store = {"storage.backend": "file", "storage.file.root": str(work / "store"), "bucket": "tiered"}
        conf = {
            "spark.jars": ",".join(jars),
            # a busy machine may take longer than Spark's 15 s to start a Python worker (the streams')
            "spark.python.authenticate.socketTimeout": "120s",
        }
        spark = local_session("broker-tail-bench", "local[2]", conf)
        offsets = {
            "subscribe": TOPIC,
            "startingOffsets": "earliest",
            "endingOffsets": json.dumps({TOPIC: {str(p): e for p, e in ends.items()}}),
            "kafka.bootstrap.servers": bootstrap,
        }

        def reader(name: str) -> Any:  # noqa: ANN401 - a DataFrame
            if name.startswith("kafka-tiered"):
                spark.conf.set(COLUMNAR, str("columnar" in name).lower())  # read when the DataFrame loads
                return spark.read.format("kafka-tiered").options(**store, **offsets).load()
            return spark.read.format("kafka").options(**offsets).load()

        frames = {name: reader(name) for name in READERS}
        cpu = BrokerCpu(broker.pid)
        results = {
            "records": args.records,
            "partitions": args.partitions,
            "value_bytes": args.value_bytes,
            "codec": args.codec,
            **batch_queries(frames, args, cpu),
            **stream_queries(spark, args, store, offsets, cpu, broker, work),
            "load_average": os.getloadavg(),
        }
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
