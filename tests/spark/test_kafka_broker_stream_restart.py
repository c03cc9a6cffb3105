"""A stream following a broker-only topic live, killed with kill -9 and restarted from its checkpoint.

A two-partition topic on the session's broker is never tiered (an empty store), so `format("kafka-tiered")`
reads every record from the brokers. A producer writes numbered records to it, 50 a second, while a
streaming application (tests/spark_apps/follow_broker_topic.py, its own Python process and Spark
driver JVM) follows it with a 1 s ProcessingTime trigger into a foreachBatch sink that writes one file per
batch id. Once a few batches are in, the whole process group is killed with SIGKILL (a batch may be half
run), the producer goes on for a few seconds, then stops; the application is started again on the same checkpoint and runs until its offsets reach what was
produced. Every record the producer had acknowledged is then in the sink exactly once, at the offset the
broker acknowledged it with: nothing lost across the kill, nothing doubled by the replayed batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from harness.kafka import KafkaBroker, python_path
from harness.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "spark_apps" / "follow_broker_topic.py"
PARTITIONS = 2
PER_ROUND = 50  # a round a second


class Producing(threading.Thread):
    """Numbered records, PER_ROUND a second until `stop` is set; `acked` maps each key to (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: dict[str, tuple[int, int]] = {}
        self.failed: list[str] = []

    def _delivered(self, err, msg) -> None:  # noqa: ANN001
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[msg.key().decode()] = (msg.partition(), msg.offset())

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                             "enable.idempotence": True})  # fmt: skip
        round_ = 0
        while not self.stop.is_set():
            for i in range(PER_ROUND):
                n = round_ * PER_ROUND + i
                producer.produce(self.topic, key=f"r{n}".encode(), value=f"value {n}".encode(),
                                 partition=n % PARTITIONS, on_delivery=self._delivered)  # fmt: skip
            producer.flush(30)
            round_ += 1
            time.sleep(1)
        producer.flush(60)
        self.sent = round_ * PER_ROUND


def _start(args: list[str], tmp_path: Path, log_name: str) -> subprocess.Popen:
    """The application in its own process group (a kill takes its driver JVM and Python workers too)."""
    env = {**os.environ, "PYTHONPATH": python_path(), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    log = (tmp_path / log_name).open("w")
    return subprocess.Popen(
        [sys.executable, str(APP), *args], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def _batches(out: Path) -> dict[int, list[list]]:
    return {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in out.glob("batch-*.json")}


def test_a_killed_stream_restarts_from_its_checkpoint_exactly_once(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"tail-follow-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(topic, PARTITIONS)
    (tmp_path / "store" / "tiered").mkdir(parents=True)
    options = json.dumps({
        "storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "tiered",
        "kafka.bootstrap.servers": kafka_broker.bootstrap_servers, "subscribe": topic,
        "startingOffsets": "earliest",
    })  # fmt: skip
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    app = [options, str(out), str(checkpoint)]
    producer = Producing(kafka_broker.bootstrap_servers, topic)
    first = _start(app, tmp_path, "first.log")
    try:

        def following(batches: int) -> bool:
            if first.poll() is not None:
                raise AssertionError(f"the application ended: {(tmp_path / 'first.log').read_text()[-4000:]}")
            return sum(1 for rows in _batches(out).values() if rows) >= batches

        try:  # the query is up (its checkpoint written) before the producer starts
            wait_until(
                "the query started", lambda: following(0) and (checkpoint / "metadata").exists(), 300, 0.2
            )
            producer.start()
            wait_until("three micro-batches with rows in the sink", lambda: following(3), 600, 0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {(tmp_path / 'first.log').read_text()[-4000:]}") from None
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    assert first.returncode == -signal.SIGKILL
    before_kill = _batches(out)
    time.sleep(3)  # records written while the query is down
    producer.stop.set()
    producer.join(120)
    assert not producer.failed and len(producer.acked) == producer.sent, producer.failed[:3]
    second = _start([*app, "--until", str(producer.sent)], tmp_path, "second.log")
    try:
        rc = second.wait(400)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert rc == 0, (tmp_path / "second.log").read_text()[-6000:]
    batches = _batches(out)
    assert set(batches) > set(before_kill), "the restarted query wrote no batch of its own"
    rows = [row for rows in batches.values() for row in rows]
    seen = [key for _, _, key in rows]
    doubled = sorted({k for k in seen if seen.count(k) > 1})[:5]
    assert not doubled, f"records written twice: {doubled}"
    assert {key: (p, o) for p, o, key in rows} == producer.acked
