"""One damaged manifest among a topic's segments: `rsm store du`, `store ls` and `migrate verify --deep` each
name it in one line and go on with every other segment (it once stopped all three for the whole store).

du and ls exit 0 (inventories: complete for everything readable, naming what is not); verify, which exists
to find such things, reports it as a `corrupt` problem and exits 3. On the file store and once on S3 (moto).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.store.objects import ObjectStore


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def configs(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "file":
        return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    cloud = request.getfixturevalue("s3_server")
    return cloud.rsm_configs(bucket=cloud.make_bucket())


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda raw: b"not a manifest", "is not JSON"),
        (lambda raw: raw.replace(b'"topic":"ledger"', b'"topic":"ledges"', 1), "seal"),
    ],
    ids=["garbage", "edited"],
)
def test_one_damaged_manifest_is_named_and_the_rest_is_reported(
    configs: dict[str, str], damage: object, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    tip = TopicIdPartition(uuid.uuid4(), "ledger", 0)
    log = PartitionLog(rsm, tip, tmp_path / "w")
    for records in (10, 10, 10):
        log.append(records)
        log.roll()
    rsm.close()
    store = ObjectStore.from_config(RsmConfig(configs))
    bucket = configs["bucket"]
    manifests = sorted(k for k in store.list(bucket, "ledger-") if k.endswith(".manifest"))
    assert len(manifests) == 3
    damaged = manifests[1]
    raw = store.get(bucket, damaged)
    store.put(bucket, damaged, damage(raw))  # type: ignore[operator]
    assert store.get(bucket, damaged) != raw
    props = tmp_path / "server.properties"
    props.write_text("broker.id=1\n" + "".join(f"rsm.config.{k}={v}\n" for k, v in configs.items()))
    named = store.describe(bucket, damaged)
    capsys.readouterr()

    def lines_naming_it(err: str) -> list[str]:
        return [line for line in err.splitlines() if named in line]

    assert main(["store", "--config", str(props), "du", "--every-manifest", "--json"]) == 0
    out, err = capsys.readouterr()
    (row,) = json.loads(out)
    assert (row["first_offset"], row["last_offset"]) == (0, 29)  # the other two segments' manifests
    (line,) = lines_naming_it(err)
    assert says in line, line

    assert main(["store", "--config", str(props), "ls", "--topic", "ledger", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [(s["start_offset"], s["end_offset"]) for s in json.loads(out)] == [(0, 9), (20, 29)]
    (line,) = lines_naming_it(err)
    assert says in line, line

    code = main(["migrate", "--config", str(props), "verify", "--topic", "ledger", "--deep", "--json"])
    out, err = capsys.readouterr()
    assert code == 3, (out, err)
    report = json.loads(out)
    corrupt = [p for p in _problems(report) if p.get("kind") == "corrupt"]
    assert [p["object"] for p in corrupt] == [named], report
    assert says in corrupt[0]["detail"]
    assert "\n" not in corrupt[0]["detail"]


def _problems(report: object) -> list[dict[str, object]]:
    """Every problem row anywhere in verify's JSON report (its shape nests them per item and finding)."""
    found: list[dict[str, object]] = []
    if isinstance(report, dict):
        if "kind" in report and "object" in report:
            found.append(report)
        for value in report.values():
            found += _problems(value)
    elif isinstance(report, list):
        for value in report:
            found += _problems(value)
    return found
