"""`rsm migrate` and `rsm store` on GCS (fake-gcs-server) and Azure Blob (Azurite), and from one backend
to another.

The same commands as on S3 (tests/migrate/test_migrate.py, tests/tools/test_store_cli.py run them on the file store and
moto S3): a move to another bucket and prefix, a re-key, a deep verify, `rsm store ls`; then the topic
leaves for another cloud: `rsm migrate export` writes it as Kafka's partition directories, `rsm migrate
import` tiers them into the other backend, and what that backend exports again is byte for byte the same.
Small topics, so each cloud costs seconds.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from migrate_helpers import tier_topic, write_properties

from rsm.cli.main import main

# each cloud, and the one its topic moves to
PAIRS = {"gcs": "azure", "azure": "s3", "s3": "gcs"}
FIXTURES = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}


def _cli(props: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main([*args[:1], "--config", str(props), *args[1:], "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


@pytest.mark.parametrize("name", ["gcs", "azure"])
def test_move_rekey_verify_then_leave_for_another_cloud(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud = request.getfixturevalue(FIXTURES[name])
    configs = cloud.rsm_configs(bucket=cloud.make_bucket())
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=2, records=120)
    props = tiered.props
    other = cloud.make_bucket()

    code, report = _cli(props, "migrate", "move", "--topic", "orders", "--to-bucket", other, "--to-prefix", "moved/",
                        capsys=capsys)  # fmt: skip
    assert code == 0 and report["summary"]["done"] == 4, report
    tiered.check_fetch()
    code, report = _cli(props, "migrate", "rekey", "--topic", "orders", "--key-id", "k2", capsys=capsys)
    assert code == 0 and report["summary"]["done"] == 4, report
    tiered.check_fetch()
    code, verified = _cli(props, "migrate", "verify", "--topic", "orders", "--deep", capsys=capsys)
    assert code == 0 and verified["ok"] and verified["key_ids"] == {"k2": 4}, verified
    code, segments = _cli(props, "store", "ls", "--topic", "orders", capsys=capsys)
    assert code == 0 and len([s for s in segments if s["serves"]]) == 4
    assert {s["location"].split("/", 1)[0] for s in segments if s["serves"]} == {other}

    # to another backend: export as Kafka's partition directories, import there, export again: the same
    out = tmp_path / "export"
    for p in range(2):
        code, _ = _cli(props, "migrate", "export", "--topic", "orders", "--partition", str(p), "--dir", str(out),
                       capsys=capsys)  # fmt: skip
        assert code == 0
    target_name = PAIRS[name]
    target = request.getfixturevalue(FIXTURES[target_name])
    target_configs = {
        **target.rsm_configs(bucket=target.make_bucket()),
        "encryption.enabled": "true",
        "encryption.key.id": "k1",
        "encryption.keyring.path": configs_keyring(tiered.configs),
    }
    target_props = write_properties(tmp_path / f"{target_name}.properties", target_configs)
    for p in range(2):
        code, report = _cli(
            target_props, "migrate", "import", "--dir", str(out / f"orders-{p}"), capsys=capsys
        )
        assert code == 0 and report["summary"]["done"] == 2, report
    again = tmp_path / "again"
    for p in range(2):
        code, _ = _cli(target_props, "migrate", "export", "--topic", "orders", "--partition", str(p),
                       "--dir", str(again), capsys=capsys)  # fmt: skip
        assert code == 0
    for p in range(2):
        first = {f.name: f.read_bytes() for f in (out / f"orders-{p}").glob("*.log")}
        second = {f.name: f.read_bytes() for f in (again / f"orders-{p}").glob("*.log")}
        assert first and first == second


def configs_keyring(configs: dict[str, str]) -> str:
    return configs["encryption.keyring.path"]


@pytest.mark.parametrize("name", ["gcs", "azure"])
def test_a_missing_bucket_is_named_in_one_line(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cloud = request.getfixturevalue(FIXTURES[name])
    props = write_properties(tmp_path / "server.properties", cloud.rsm_configs(bucket="no-such-bucket-25"))
    assert main(["store", "--config", str(props), "du"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert (
        f"bucket 'no-such-bucket-25' (config bucket) does not exist in {name} at http://127.0.0.1:" in err
    ), err
    if name == "azure":
        assert cloud.key not in err


@pytest.mark.parametrize("name", ["gcs", "azure"])
def test_the_rsm_names_a_missing_bucket_and_its_setting(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from kafka_segments import make_segment

    from rsm import RemoteStorageManager, TopicIdPartition
    from rsm.api.errors import RemoteStorageException

    cloud = request.getfixturevalue(FIXTURES[name])
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "orders", 0), batches=3)
    manager = RemoteStorageManager()
    manager.configure(cloud.rsm_configs(bucket="tiered-gone"))
    try:
        with pytest.raises(RemoteStorageException) as caught:
            manager.copy_log_segment_data(seg.metadata, seg.data)
    finally:
        manager.close()
    message = str(caught.value)
    assert "\n" not in message
    assert f"bucket 'tiered-gone' (config bucket) does not exist in {name} at http://127.0.0.1:" in message, (
        message
    )
