"""A hybrid read (`kafka.bootstrap.servers`) against a real Kafka 4.4 broker: a store whose history starts
after the brokers' log start has a hole, reported per failOnDataLoss, never read around.

The broker holds offsets 0..59 of a partition; the store holds 20..39 of it, tiered through the RSM (as if
its first segments had been deleted behind the RSM's back). Planned and read in this process (no Spark):
the store's part from the store, the rest from the broker.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from spark_reader import partition_reader
from spark_reader.errors import DataLossError
from spark_reader.options import parse_options
from spark_reader.source import TieredBatchReader
from spark_reader.stream import TieredStreamReader

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for n in range(count):
        p.produce(topic, key=f"k{n}".encode(), value=f"broker-{n}".encode(), partition=0)
    assert p.flush(30) == 0


def test_a_store_history_starting_after_the_brokers_log_start_is_a_hole(
    kafka_broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"holes-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 1)
    _produce(bootstrap, topic, 60)
    store = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store")}
    rsm = RemoteStorageManager()
    rsm.configure(store)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), topic, 0), tmp_path / "w", next_offset=20)
    for _ in range(2):
        log.append(10)
        log.roll()
    rsm.close()
    options = {**store, "subscribe": topic, "kafka.bootstrap.servers": bootstrap}

    def read(**extra: str) -> list[int]:
        partition_reader._clients.clear()
        reader = TieredBatchReader(parse_options({**options, **extra}))
        batches = [b for p in reader.partitions() for b in reader.read(p)]
        return sorted(pa.Table.from_batches(batches).column("offset").to_pylist()) if batches else []

    said = rf"^{topic}-0: offsets 0\.\.19 are missing from the store \(the Kafka brokers {bootstrap} say "
    said += "the log starts at 0"
    with pytest.raises(DataLossError, match=said):
        read()
    with pytest.raises(DataLossError, match=rf"^{topic}-0: offsets 5\.\.19 are missing from the store"):
        read(startingOffsets=json.dumps({topic: {"0": 5}}))
    with caplog.at_level(logging.WARNING, logger="spark_reader.planning"):
        assert read(failOnDataLoss="false") == list(range(20, 60))  # the store's 20..39, the brokers' after
    assert f"{topic}-0: offsets 0..19 are missing from the store" in caplog.text
    assert read(startingOffsets=json.dumps({topic: {"0": 25}})) == list(range(25, 60))  # clear of the hole

    stream = {**options, "startingOffsets": "earliest"}
    with pytest.raises(DataLossError, match=said):
        TieredStreamReader(parse_options(stream)).initialOffset()
    lenient = TieredStreamReader(parse_options({**stream, "failOnDataLoss": "false"}))
    assert lenient.initialOffset() == {topic: {"0": 20}}

    # the brokers' log start moved to the store's first offset (retention there): no hole, nothing reported
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, 0, 20)]).values()
    future.result(30)
    assert read() == list(range(20, 60))
