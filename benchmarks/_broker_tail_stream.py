"""The streaming half of benchmarks/broker_tail.py: AvailableNow throughput, micro-batch latency, broker CPU.

Kept apart from the batch queries so each module stays one job; everything here runs in the benchmark's one
Spark session against its one broker, with Spark's own Kafka source measured in the same run:

* `available_now`: a stream of the whole broker-only topic, `Trigger.AvailableNow` with
  `maxOffsetsPerTrigger`, into Spark's `noop` sink (every row is produced, every column, nothing
  written): seconds, rows, micro-batches, and the broker JVM's CPU seconds while it ran;
  `available_now_rounds` runs it for each reader in interleaved rounds and keeps each one's best;
* `latency`: one stream per reader following a one-partition topic with a 1 s ProcessingTime trigger into
  a foreachBatch sink, while a producer writes one record every 0.5-1.5 s (random, so the records land at
  every phase of the trigger) holding its wall-clock send time; a sample is the time from that send to the
  end of the foreachBatch call that collected the row. The readers' streams run at once, on the same
  records, so each sees the same load;
* `BrokerCpu`: the broker JVM's user+system CPU from /proc/<pid>/stat (one process: the JVM's threads).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNAR = "spark.kafkaTiered.columnar.enabled"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class BrokerCpu:
    """The CPU seconds a process has used (user + system), read from /proc/<pid>/stat."""

    pid: int

    def seconds(self) -> float:
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime: fields 14 and 15


def stream_reader(spark: Any, name: str, store: Mapping[str, str], options: Mapping[str, str]) -> Any:  # noqa: ANN401
    """A streaming DataFrame of `name`'s reader (the columnar conf is read when the stream loads)."""
    if name.startswith("kafka-tiered"):
        spark.conf.set(COLUMNAR, str("columnar" in name).lower())
        return spark.readStream.format("kafka-tiered").options(**store, **options).load()
    return spark.readStream.format("kafka").options(**options).load()


@dataclass
class AvailableNowRun:
    seconds: float
    rows: int
    broker_cpu_s: float
    batches: int = 0  # micro-batches that read rows


def available_now(
    spark: Any,  # noqa: ANN401
    name: str,
    store: Mapping[str, str],
    options: Mapping[str, str],
    cpu: BrokerCpu,
    work: Path,
) -> AvailableNowRun:
    """One `Trigger.AvailableNow` run of the whole topic into the noop sink (a fresh checkpoint)."""
    checkpoint = work / f"an-{name.split()[-1].strip('()')}-{time.monotonic_ns()}"
    df = stream_reader(spark, name, store, options)
    cpu_before, start = cpu.seconds(), time.perf_counter()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed, cpu_used = time.perf_counter() - start, cpu.seconds() - cpu_before
    if query.exception() is not None:
        raise RuntimeError(f"{name} AvailableNow: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    shutil.rmtree(checkpoint, ignore_errors=True)
    return AvailableNowRun(elapsed, rows, cpu_used, batches)


@dataclass(frozen=True)
class AvailableNowBest:
    """A reader's best AvailableNow run over the rounds: seconds, broker CPU, micro-batches."""

    seconds: float
    broker_cpu_s: float
    batches: int


def available_now_rounds(
    spark: Any,  # noqa: ANN401
    readers: tuple[str, ...],
    store: Mapping[str, str],
    options: Mapping[str, str],
    cpu: BrokerCpu,
    work: Path,
    rounds: int,
    records: int,
    note: Callable[[str], None],
) -> dict[str, AvailableNowBest]:
    """`available_now` by each reader in interleaved rounds after a warm-up (round 0): each one's best
    (the least seconds and the least broker CPU over the rounds); every run must read `records` rows."""
    runs: dict[str, list[AvailableNowRun]] = {r: [] for r in readers}
    for round_ in range(rounds + 1):
        for name in readers:
            run = available_now(spark, name, store, options, cpu, work)
            if run.rows != records:
                raise RuntimeError(f"{name} AvailableNow read {run.rows} rows, not {records}")
            if round_:
                runs[name].append(run)
        done = ", ".join(f"{r} {v[-1].seconds:.2f} s" for r, v in runs.items() if v)
        note(f"  AvailableNow maxOffsetsPerTrigger {options['maxOffsetsPerTrigger']} round "
             f"{round_ or 'warm-up'}: {done or 'done'}")  # fmt: skip
    return {
        r: AvailableNowBest(
            min(x.seconds for x in v), min(x.broker_cpu_s for x in v), max(x.batches for x in v)
        )
        for r, v in runs.items()
    }


@dataclass
class _Sink:
    """A foreachBatch sink noting each row's latency (the end of the batch's collect minus its send time)."""

    samples: list[float] = field(default_factory=list)

    def __call__(self, df: Any, batch_id: int) -> None:  # noqa: ANN401
        rows = df.select("value").collect()
        now = time.time()
        self.samples.extend(now - float(r["value"].decode()) for r in rows)


def _producing(bootstrap: str, topic: str, samples: int, stop: threading.Event) -> Callable[[], None]:
    def run() -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
        rng = random.Random(7)
        for _ in range(samples):
            if stop.wait(rng.uniform(0.5, 1.5)):
                break
            producer.produce(topic, value=repr(time.time()).encode(), partition=0)
            producer.poll(0)
        producer.flush(30)

    return run


def latency(
    spark: Any,  # noqa: ANN401
    readers: tuple[str, ...],
    store: Mapping[str, str],
    bootstrap: str,
    topic: str,
    samples: int,
    work: Path,
) -> dict[str, list[float]]:
    """Each reader's produce-to-sink latencies (seconds) for `samples` records (see the module docstring)."""
    # the topic is new and empty: earliest is where it ends when the streams start
    options = {"subscribe": topic, "startingOffsets": "earliest", "kafka.bootstrap.servers": bootstrap}
    sinks = {name: _Sink() for name in readers}
    queries = []
    stop = threading.Event()
    try:
        for name in readers:
            query = (
                stream_reader(spark, name, store, options)
                .writeStream.foreachBatch(sinks[name])
                .option("checkpointLocation", str(work / f"lat-{len(queries)}"))
                .trigger(processingTime="1 second")
                .start()
            )
            queries.append(query)
        for name, query in zip(readers, queries, strict=True):  # each is running before the first record
            while not query.recentProgress:
                if query.exception() is not None:
                    raise RuntimeError(f"{name} latency stream: {query.exception()}")
                time.sleep(0.2)
        producer = threading.Thread(target=_producing(bootstrap, topic, samples, stop), daemon=True)
        producer.start()
        producer.join()
        deadline = time.monotonic() + 60
        while any(len(s.samples) < samples for s in sinks.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stop.set()
        for query in queries:
            query.stop()
    missing = {n: samples - len(s.samples) for n, s in sinks.items() if len(s.samples) != samples}
    if missing:
        raise RuntimeError(f"latency: rows missing (or doubled) in the sinks: {missing}")
    return {name: sink.samples for name, sink in sinks.items()}


def p50(values: list[float]) -> float:
    return statistics.median(values)
