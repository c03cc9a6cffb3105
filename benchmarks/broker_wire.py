"""The brokers' fetch layer (spark_reader.brokerwire) against a confluent-kafka consumer, in one process.

    python benchmarks/broker_wire.py [--records 1000000] [--value-bytes 100] [--codec lz4] [--rounds 3]
                                     [--bootstrap HOST:PORT] [--no-pin] [--json out.json]

A Kafka 4.4 broker (tests/harness, one node, with Kafka's own JVM settings rather than the tests' small
ones) unless ``--bootstrap`` names one; a one-partition topic gets ``--records`` records from a
confluent-kafka producer (``--codec``, batch.size 64 KiB, linger.ms 10): ``--value-bytes`` values (a
small JSON frame around random base64 text, as benchmarks/spark_read.py), 8-byte keys, no headers.
Then the whole partition is read three ways, in interleaved rounds (the fastest round of each counts):

- ``wire``: `read_arrow` (raw record batches from Fetch responses, decoded by segment_format's columnar
  decoder, every column of RECORD_SCHEMA);
- ``confluent (as tail)``: a librdkafka consumer set up as the reader's former tail was (8 MiB partition
  fetches, librdkafka's other defaults), `consume(10000)` until the last offset, each message's value
  taken (the Python object per record the tail pays);
- ``confluent (tuned)``: the same with `fetch.queue.backoff.ms` 10: librdkafka's default (1000 ms) pauses
  fetching for a second whenever its queue holds more than `queued.min.messages`, which an 8 MiB fetch of
  small records always does, so the consumer as the tail sets it up idles most of the time;
- ``confluent (tuned) -> Arrow``: the tuned consumer with the messages put into Arrow columns the way
  that tail did (one list comprehension per field; the tail now reads through this layer instead).

Both run in this process, pinned to one CPU unless ``--no-pin`` (librdkafka's threads share it, as a
Spark task's core would be shared). Prints rows/s and the ratios; exits 0 (no target: a measurement).
Needs Java 17 and Maven for the broker, like the test suite.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the test harness: broker, Maven builds

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from benchmarks._common import best_times, console, pin_to_one_cpu, print_table  # noqa: E402

TOPIC = "wire-bench"
BATCH_MESSAGES = 10_000
KEYS = ("wire", "confluent_as_tail", "confluent_tuned", "confluent_tuned_arrow")
# Kafka's own broker JVM settings (kafka-server-start.sh): C2 on, unlike the test harness's small JVMs
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
_HEADER_ITEMS = pa.struct([("key", pa.string()), ("value", pa.binary())])


def value_pool(count: int, size: int, seed: int = 11) -> list[bytes]:
    """Values of `size` bytes: a small JSON frame around random base64 text (compresses to about 3/4)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        head = f'{{"n":{n},"s":"'.encode()
        body = base64.b64encode(rng.randbytes(size)).rstrip(b"=")[: max(0, size - len(head) - 2)]
        out.append(head + body + b'"}')
    return out


def create_topic(bootstrap: str) -> None:
    """The benchmark's topic: one partition, kept (it must not exist yet: its records are counted)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={"retention.ms": "-1"})])
    finally:
        admin.close()
    time.sleep(1)  # CreateTopics answers before every broker's metadata has the topic


def produce(bootstrap: str, records: int, value_bytes: int, codec: str) -> None:
    from confluent_kafka import Producer

    pool = value_pool(20_000, value_bytes)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "batch.size": 64 << 10,
            "linger.ms": 10,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for n in range(records):
        while True:
            try:
                producer.produce(TOPIC, key=n.to_bytes(8, "big"), value=pool[n % len(pool)], partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "records left unsent"


def read_wire(bootstrap: str, records: int) -> tuple[int, dict[str, int]]:
    from spark_reader.brokerwire import BrokerWire, read_arrow

    with BrokerWire.from_kafka_params({"bootstrap.servers": bootstrap}) as client:
        rows = sum(b.num_rows for b in read_arrow(client, TOPIC, 0, 0, records))
        return rows, {"fetches": client.stats.fetches, "bytes": client.stats.record_bytes}


def _consumer(bootstrap: str, tuned: bool) -> Any:  # noqa: ANN401
    from confluent_kafka import Consumer, TopicPartition

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "wire-bench",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # as the reader's librdkafka tail was set up: one partition per consumer, 8 MiB fetches
        "max.partition.fetch.bytes": 8 << 20,
    }
    if tuned:
        conf["fetch.queue.backoff.ms"] = 10
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    return consumer


def _to_arrow(messages: list) -> pa.RecordBatch:
    """The librdkafka tail's conversion to Arrow (before its Spark schema step)."""
    stamps = np.array([m.timestamp() for m in messages], dtype=np.int64).reshape(-1, 2)
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(np.array([m.offset() for m in messages], dtype=np.int64)),
            "timestamp": pa.array(stamps[:, 1]),
            "key": pa.array([m.key() for m in messages], pa.binary()),
            "value": pa.array([m.value() for m in messages], pa.binary()),
            "headers": pa.array([m.headers() or [] for m in messages], pa.list_(_HEADER_ITEMS)),
        }
    )


def read_confluent(bootstrap: str, records: int, tuned: bool, arrow: bool) -> int:
    consumer = _consumer(bootstrap, tuned)
    rows = 0
    try:
        while rows < records:
            messages = consumer.consume(num_messages=min(BATCH_MESSAGES, records - rows), timeout=1.0)
            if not messages:
                continue
            if arrow:
                rows += _to_arrow(messages).num_rows
            else:
                rows += len([m.value() for m in messages])
    finally:
        consumer.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records to produce (default 1 M)")
    parser.add_argument("--value-bytes", type=int, default=100, help="value size (default 100)")
    parser.add_argument("--codec", default="lz4", help="producer compression.type (default lz4)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per reader (default 3)")
    parser.add_argument(
        "--bootstrap", help="use this broker (the topic must not exist) instead of starting one"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin this process to one CPU")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    broker, work = None, None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            if shutil.which("java") is None or shutil.which("mvn") is None:
                console.print("broker_wire: needs Java 17 and Maven on the PATH (or --bootstrap)")
                return 2
            from harness.kafka import KafkaBroker
            from harness.maven import build_test_java

            work = Path(tempfile.mkdtemp(prefix="wirebench-", dir="/tmp"))
            broker = KafkaBroker(work / "broker", java_build=build_test_java(), jvm_opts=BROKER_JVM)
            broker.start()
            bootstrap = broker.bootstrap_servers
        create_topic(bootstrap)
        t = time.monotonic()
        produce(bootstrap, args.records, args.value_bytes, args.codec)
        console.print(f"produced {args.records:,} records ({args.codec}) in {time.monotonic() - t:.1f} s")
        cpu = None if args.no_pin else pin_to_one_cpu()

        rows_wire, wire_stats = read_wire(bootstrap, args.records)  # warm-up, and the counts
        assert rows_wire == args.records, f"wire read {rows_wire} rows"
        variants = ((False, False), (True, False), (True, True))  # (tuned, arrow)
        for tuned, arrow in variants:
            assert read_confluent(bootstrap, args.records, tuned, arrow) == args.records
        readers = [lambda: read_wire(bootstrap, args.records)]
        readers += [lambda v=v: read_confluent(bootstrap, args.records, *v) for v in variants]
        times = best_times(readers, repeat=args.rounds)
        names = (
            "wire (raw batches + columnar decode)",
            "confluent (as tail), object per record",
            "confluent (tuned), object per record",
            "confluent (tuned) -> Arrow",
        )
        rates = [args.records / s for s in times]
        print_table(
            f"{args.records:,} records, {args.value_bytes}-byte values, {args.codec}, one partition"
            + (f", pinned to CPU {cpu}" if cpu is not None else ""),
            ["reader", "seconds", "M rows/s", "wire / this"],
            [
                (n, f"{s:.3f}", f"{r / 1e6:.2f}", f"{rates[0] / r:.2f}x")
                for n, s, r in zip(names, times, rates, strict=True)
            ],
        )
        mib = wire_stats["bytes"] / (1 << 20)
        console.print(f"wire: {wire_stats['fetches']} Fetch responses, {mib:.1f} MiB of record batches")
        results = {
            "records": args.records,
            "value_bytes": args.value_bytes,
            "codec": args.codec,
            "seconds": dict(zip(KEYS, times, strict=True)),
            **{f"wire_ratio_vs_{k}": rates[0] / r for k, r in zip(KEYS[1:], rates[1:], strict=True)},
        }
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    finally:
        if broker is not None:
            broker.stop()
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
