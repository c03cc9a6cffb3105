"""`rsm migrate export` never overwrites what it did not write, and its figures agree with its progress;
`rsm migrate import` loads a partition directory without `partition.metadata` (a topic id is made for it),
and its --dry-run shows what the run does. CLI tests run the real `rsm` entry point in a subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cli_runs import one_line
from migrate_helpers import run_cli


@pytest.fixture
def tiered(tmp_path: Path):  # type: ignore[no-untyped-def]
    from migrate_helpers import tier_topic

    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    return tier_topic(tmp_path / "t", configs, partitions=1, segments=3, records=200)


def _export(tiered, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return run_cli(["migrate", "--config", str(tiered.props), "export", "--topic", tiered.topic,
                    "--partition", "0", "--dir", str(out), *extra])  # fmt: skip


def test_export_refuses_a_directory_holding_the_users_files(tiered, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "restore"
    target = out / f"{tiered.topic}-0"
    target.mkdir(parents=True)
    mine = target / "00000000000000000000.log"
    mine.write_bytes(b"my own segment")
    line = one_line(_export(tiered, out), str(target), "not empty", "--force")
    assert "nothing was written" in line
    assert sorted(p.name for p in target.iterdir()) == [mine.name] and mine.read_bytes() == b"my own segment"
    one_line(_export(tiered, out, "--dry-run"), str(target), "not empty")
    dry = _export(tiered, out, "--dry-run", "--force")
    assert dry.returncode == 0 and "would first remove 1 file(s)" in " ".join(dry.stdout.split()), dry.stdout
    assert mine.read_bytes() == b"my own segment"
    # --force replaces it
    done = _export(tiered, out, "--force")
    assert done.returncode == 0, done.stderr
    assert mine.read_bytes() != b"my own segment" and len(list(target.glob("*.log"))) == 3
    # its own directory: a rerun resumes (nothing to do), no --force needed
    again = _export(tiered, out)
    assert again.returncode == 0, again.stderr
    assert "(3 already there)" in again.stdout


def test_export_figures_agree_and_the_progress_ends_at_every_segment(tiered, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]

    out = tmp_path / "restore"
    dry = _export(tiered, out, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert not out.exists()
    planned = re.search(r"export 3 segment\(s\), ([\d,]+) bytes of \.log", " ".join(dry.stdout.split()))
    assert planned, dry.stdout
    done = _export(tiered, out)
    assert done.returncode == 0, done.stderr
    result = re.search(
        r"exported 3 segment\(s\) to .*: ([\d,]+) bytes of \.log", " ".join(done.stdout.split())
    )
    assert result, done.stdout
    logs = sorted((out / f"{tiered.topic}-0").glob("*.log"))
    on_disk = sum(p.stat().st_size for p in logs)
    assert int(planned[1].replace(",", "")) == int(result[1].replace(",", "")) == on_disk
    assert "export 3/3 segments" in done.stderr and "0/3 segments" not in done.stderr.splitlines()[-1]


def test_import_without_partition_metadata_makes_a_topic_id(tmp_path: Path) -> None:
    import re

    from rsm.catalog import TopicCatalog
    from rsm.cli.demo import write_demo_partition
    from rsm.config.settings import RsmConfig

    pdir = tmp_path / "kafka" / "orders-0"
    segments = write_demo_partition(pdir, records_per_segment=100)
    assert not (pdir / "partition.metadata").exists()
    props = tmp_path / "rsm.properties"
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "tiered"}
    props.write_text("".join(f"{k}={v}\n" for k, v in configs.items()))
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}

    done = run_cli(["migrate", "--config", str(props), "import", "--dir", str(pdir), "--json"])
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    m = re.fullmatch(
        rf"no partition.metadata in {re.escape(str(pdir))}: using new topic id (\S+) \(pass --topic-id to choose\)",
        lines[0],
    )
    assert m, lines[0]
    assert json.loads(done.stdout)["summary"]["done"] == len(segments)
    catalog = TopicCatalog(RsmConfig(configs))
    assert [uuid_to_b64(t) for t in catalog.topic_ids("orders")] == [m[1]]
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before  # nothing written into it
    # again: the store's topic of that name, nothing to do
    again = run_cli(["migrate", "--config", str(props), "import", "--dir", str(pdir), "--json"])
    assert again.returncode == 0, again.stderr
    assert f"using topic id {m[1]}, the store's for topic orders (pass --topic-id to choose)" in again.stderr
    assert json.loads(again.stdout)["summary"]["items"] == 0
    # --topic-id's help fits import
    helped = run_cli(["migrate", "import", "--help"])
    assert "other than the live" not in helped.stdout and "partition.metadata" in helped.stdout


def uuid_to_b64(tid):  # type: ignore[no-untyped-def]
    from rsm.api.metadata import uuid_to_base64

    return uuid_to_base64(tid)


def test_import_dry_run_shows_what_the_run_does(tmp_path: Path) -> None:
    """`migrate import --dry-run` and the run agree: the same journal job (a directory without
    partition.metadata gets the same new topic id each time), the key id the run encrypts with, closed
    offset ranges equal to what the run tiers; a rerun with nothing to do shows no empty progress bar."""
    import re

    from rsm.cli.demo import write_demo_partition

    pdir = tmp_path / "kafka" / "orders-0"
    write_demo_partition(pdir, records_per_segment=100)
    keyring = tmp_path / "keyring.json"
    assert run_cli(["keyring", "new", str(keyring), "--key-id", "demo-k1"]).returncode == 0
    props = tmp_path / "rsm.properties"
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "tiered",
               "encryption.enabled": "true", "encryption.key.id": "demo-k1", "encryption.keyring.path": str(keyring)}  # fmt: skip
    props.write_text("".join(f"{k}={v}\n" for k, v in configs.items()))
    (tmp_path / "store").mkdir()  # a dry run changes nothing, not even a missing root (it says so)
    command = ["migrate", "--config", str(props), "import", "--dir", str(pdir), "--json"]
    dry = run_cli([*command, "--dry-run"])
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["items"] and all(i["key_id"] == "demo-k1" for i in plan["items"])
    assert all(i["end_offset"] >= i["start_offset"] for i in plan["items"])
    done = run_cli(command)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["job"] == plan["job"]
    planned = sorted((i["start_offset"], i["end_offset"]) for i in plan["items"])
    ran = sorted(
        tuple(map(int, re.search(r"offsets (\d+)\.\.(\d+)", r["segment"]).groups()))
        for r in report["results"]
    )  # type: ignore[union-attr]
    assert planned == ran, (planned, ran)
    again = run_cli(["migrate", "--config", str(props), "import", "--dir", str(pdir)])
    assert again.returncode == 0 and "0/1 bytes" not in again.stderr and "0/0" not in again.stderr, (
        again.stderr
    )
