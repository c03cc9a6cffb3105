"""The Spark reader on every cloud (moto's S3, fake-gcs-server, Azurite): an encrypted topic whose bucket
changed mid-life reads back exactly what the RSM tiered, every column; a narrow offset range downloads a
sliver of the topic (counted at the store, through the functions Spark calls on its workers); a missing
bucket is named in one line without the credentials.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka_segments import write_keyring
from test_spark_reader import _error, _expected, _read, _rows
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from spark_reader import partition_reader
from spark_reader.options import parse_options
from spark_reader.source import FilteringBatchReader

pytestmark = pytest.mark.spark


def test_an_encrypted_topic_whose_bucket_changed(tiered_spark, cloud: Any, tmp_path: Path) -> None:  # noqa: ANN001, F811
    bucket, archive = cloud.make_bucket(), cloud.make_bucket()
    keyring = write_keyring(tmp_path / "keyring.json")
    opts = {
        **cloud.rsm_configs(bucket=bucket),
        "encryption.enabled": "true",
        "encryption.keyring.path": str(keyring),
        "encryption.key.id": "k2",
        "chunk.size": "8192",
    }
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    logs = []
    tid = uuid.uuid4()
    for p in range(2):
        log = PartitionLog(rsm, TopicIdPartition(tid, "secure", p), tmp_path / f"w{p}")
        log.append(70, codec=3)
        log.roll()
        log.log_config = {"unchecked.rsm.bucket": archive, "unchecked.rsm.prefix": "cold/"}
        log.append(40)
        log.roll()
        logs.append(log)
    rsm.close()
    read_opts = {
        k: v for k, v in opts.items() if not k.startswith("encryption.") or k.endswith("keyring.path")
    }
    df = _read(tiered_spark, read_opts, subscribe="secure", includeHeaders="true")
    assert _rows(df) == _expected(logs)


def test_a_narrow_offset_range_downloads_a_sliver(cloud: Any, tmp_path: Path) -> None:
    opts = {**cloud.rsm_configs(bucket=cloud.make_bucket()), "chunk.size": "32768"}
    rsm = RemoteStorageManager()
    rsm.configure(opts)
    log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), "big", 0), tmp_path / "w")
    for _ in range(4):
        for _ in range(25):
            log.append(200, value_size=100, headers=False, incompressible=True)
        log.roll()
    total = sum(o.size for o in rsm.store.list_objects(opts["bucket"], "big-"))
    rsm.close()
    first, last = 10_000, 10_399  # 2% of the 20,000 offsets, in the middle of a segment
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThanOrEqual

    reader = FilteringBatchReader(parse_options({**opts, "subscribe": "big"}))
    assert not list(
        reader.pushFilters([GreaterThanOrEqual(("offset",), first), LessThanOrEqual(("offset",), last)])
    )
    partition_reader._clients.clear()
    table = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])
    assert table.column("offset").to_pylist() == list(range(first, last + 1))
    assert table.column("value").to_pylist() == [r.value for r in log.records[first : last + 1]]
    ((store, _),) = partition_reader._clients.values()
    downloaded = store.stats.bytes_read + reader.last_planner.catalog.store.stats.bytes_read
    assert downloaded <= 0.1 * total, (downloaded, total)


def test_a_missing_bucket_is_named(tiered_spark, cloud: Any) -> None:  # noqa: ANN001, F811
    opts = cloud.rsm_configs(bucket="no-such-bucket-25")
    message = _error(tiered_spark, opts, subscribe="orders")
    backend = opts["storage.backend"]
    assert f"bucket 'no-such-bucket-25' (bucket) does not exist in {backend} at http" in message, message
    assert message.count("never created") == 1 and "does not create buckets" not in message  # said once
    for secret in ("storage.s3.secret.access.key", "storage.azure.account.key"):
        if secret in opts:
            assert opts[secret] not in message
