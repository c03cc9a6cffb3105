"""`rsm store du | ls | locate` on the file store and every cloud (moto S3, fake-gcs-server, Azurite): two
locations, a superseded copy, orphans."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest
from tiering import BASE_TS, PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.stored.location_record import REGISTRY_DIR


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def store_configs(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "file":
        return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    fixture = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}[request.param]
    cloud = request.getfixturevalue(fixture)
    main_bucket, other = cloud.make_bucket(), cloud.make_bucket()
    return cloud.rsm_configs(bucket=main_bucket, **{"test.other.bucket": other})


def _properties(tmp_path: Path, configs: dict[str, str]) -> Path:
    path = tmp_path / "server.properties"
    lines = ["broker.id=1"] + [f"rsm.config.{k}={v}" for k, v in configs.items() if not k.startswith("test.")]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_du_ls_and_locate(
    store_configs: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = {k: v for k, v in store_configs.items() if not k.startswith("test.")}
    other = store_configs.get("test.other.bucket", "archive")
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    tip = TopicIdPartition(uuid.uuid4(), "ledger", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.append(40)
    md, data = log.roll()
    log.tier(
        dataclasses.replace(
            md, remote_log_segment_id=dataclasses.replace(md.remote_log_segment_id, id=uuid.uuid4())
        ),
        data,
    )
    log.log_config = {"unchecked.rsm.bucket": other, "unchecked.rsm.prefix": "cold/"}
    log.append(60)
    log.roll()
    # an interrupted copy: objects without a manifest (an orphan readers never see)
    log.append(5)
    md3, data3 = log.roll(copy=False)
    rsm.copy_log_segment_data(md3, data3, log.log_config)
    bucket = other
    manifest_key = [
        k
        for k in rsm.store.list(bucket, "cold/")
        if k.endswith(f"{md3.start_offset:020d}-{md3.remote_log_segment_id.id_base64}.manifest")
    ][0]
    rsm.store.delete(bucket, manifest_key)
    # a write that never finished (a copy killed mid-upload): the file store's temporary name
    stem = manifest_key.rsplit("/", 1)[0]
    rsm.store.put(
        configs["bucket"],
        f"{stem.replace('cold/', '', 1)}/.00000000000000000099-x.log.tmp-0123456789ab",
        b"x",
    )
    rsm.close()
    props = _properties(tmp_path, configs)

    assert main(["store", "--config", str(props), "du", "--topic", "ledger", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_location = {r["bucket"]: r for r in rows}
    main_bucket = configs["bucket"]
    assert set(by_location) == {main_bucket, other}
    assert by_location[main_bucket]["segments"] == 2  # two copies
    assert by_location[main_bucket]["orphans"] == 1  # the temporary file
    assert by_location[main_bucket]["orphan_objects"][0].endswith(".log.tmp-0123456789ab")
    assert (by_location[main_bucket]["first_offset"], by_location[main_bucket]["last_offset"]) == (0, 39)
    # timestamps: the first batch's max timestamp of the earliest segment, the newest record's
    assert (by_location[main_bucket]["first_timestamp"], by_location[main_bucket]["last_timestamp"]) == (
        BASE_TS + 39,
        BASE_TS + 39,
    )
    cold = by_location[other]
    assert cold["segments"] == 1 and (cold["first_offset"], cold["last_offset"]) == (40, 99)
    assert (cold["first_timestamp"], cold["last_timestamp"]) == (BASE_TS + 99, BASE_TS + 99)
    for row in rows:  # the keys every consumer of --json may rely on
        assert {"topic", "partition", "location", "segments", "bytes", "first_offset", "last_offset"} <= set(
            row
        )
    assert (
        cold["orphans"] == 2
        and cold["prefix"] == "cold/"
        and cold["topic_id"] == uuid_to_base64(tip.topic_id)
    )
    assert all(r["bytes"] > 0 for r in rows if r["segments"])

    assert main(["store", "--config", str(props), "ls", "--topic", "ledger", "--json"]) == 0
    segs = json.loads(capsys.readouterr().out)
    assert [s["serves"] for s in segs if s["serves"]] == [[0, 39], [40, 99]]
    assert [s["not_read_because"] for s in segs if not s["serves"]] == [
        "its offsets are all held by another copy"
    ]

    assert main(["store", "--config", str(props), "du"]) == 0  # the table, every topic
    assert "ledger" in capsys.readouterr().out

    assert main(["store", "--config", str(props), "du", "--topic", "nope"]) == 1
    assert "topic 'nope' has no tiered data" in capsys.readouterr().err


def test_locate_records_what_a_scan_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    tip = TopicIdPartition(uuid.uuid4(), "old", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    log.log_config = {"unchecked.rsm.prefix": "x/"}
    log.append(5)
    log.roll()
    rsm.close()
    shutil.rmtree(tmp_path / "store" / "main" / REGISTRY_DIR.rstrip("/"))  # as tiered by an older release
    props = _properties(tmp_path, configs)
    assert main(["store", "--config", str(props), "locate", "--record", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"topic": "old", "topic_id": uuid_to_base64(tip.topic_id), "locations": ["main/x/"]}
    ]
    catalog = TopicCatalog(RsmConfig(configs), scan=False)  # the record alone now finds it
    assert catalog.registry.is_complete("old", tip.topic_id)
    assert catalog.histories("old", tip.topic_id)[0].next_offset == 5
