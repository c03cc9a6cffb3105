"""Issue 26 (a newcomer's first hour), the tools' items: quickstart's next steps (2), import without
`partition.metadata` (5), export never overwriting (6), dump-log of a missing file (10), the cosmetics (12)
and dump-log's deep iteration judged against Kafka's own tool (13).

CLI tests run the real `rsm` entry point in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from migrate_helpers import run_cli
from test_first_hour import one_line

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One `rsm quickstart --no-spark` run, piped as a user's `rsm quickstart | tee` is."""
    root = tmp_path_factory.mktemp("newcomer") / "qs"
    done = run_cli(["quickstart", "--dir", str(root), "--records", "200", "--no-spark"], timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, done


# -- 10: a missing file is said to be missing ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "nope.log",
        "nope.index",
        "00000000000000000000.timeindex",
        "00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log",
    ],
)
def test_dump_log_of_a_missing_file_says_it_does_not_exist(tmp_path: Path, name: str) -> None:
    missing = tmp_path / name
    line = one_line(run_cli(["dump-log", str(missing)]), str(missing), "No such file or directory")
    assert "For input string" not in line
    one_line(run_cli(["dump-log", "--json", str(missing)]), "No such file or directory")


# -- 12: cosmetics ------------------------------------------------------------------------------------------


def test_dump_log_verify_of_a_stored_segment_names_the_object(quickstart) -> None:  # type: ignore[no-untyped-def]
    root, _ = quickstart
    stored = sorted((root / "store" / "tiered").rglob("*.log"))[0]
    done = run_cli(["dump-log", "--verify", str(stored)])
    assert done.returncode == 0, done.stderr
    verified = [line for line in done.stdout.splitlines() if line.startswith("Verified ")]
    assert len(verified) == 1 and verified[0].startswith(f"Verified {stored} "), verified
    assert "rsm-dump-" not in done.stdout


def test_piped_quickstart_output_has_no_wide_rules(quickstart) -> None:  # type: ignore[no-untyped-def]
    _, done = quickstart
    rules = [line for line in done.stdout.splitlines() if "───" in line]
    assert rules and all(len(line) <= 100 for line in rules), max(rules, key=len)


# -- 13: deep iteration of a quickstart segment, against Kafka's own tool -----------------------------------


@pytest.mark.oracle
def test_deep_iteration_of_quickstart_segments_matches_kafka(quickstart, kafka_dump_log: Path) -> None:  # type: ignore[no-untyped-def]
    """Kafka's check of consecutive offsets starts at -1 in every file, so it reports `-1 is followed by
    200` for a segment whose first offset is 200 (every segment but a partition's first): the segments are
    fine and that line is Kafka's. Without --verify ours prints it too (byte for byte); --verify, ours,
    does not call a segment's first offset a gap."""
    from harness.maven import kafka_dump_log_command

    root, _ = quickstart
    logs = sorted((root / "kafka-logs" / "orders-0").glob("*.log"))
    args = ["--deep-iteration", "--files", ",".join(str(p) for p in logs)]
    kafka = subprocess.run(kafka_dump_log_command(kafka_dump_log, *args), capture_output=True, timeout=300)
    ours = subprocess.run([sys.executable, "-m", "rsm.cli.main", "dump-log", *args], capture_output=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert kafka.returncode == 0 and ours.returncode == 0, ours.stderr
    assert ours.stdout == kafka.stdout
    assert sorted(ours.stderr.splitlines()) == sorted(kafka.stderr.splitlines())
    assert f"  -1 is followed by {int(logs[1].stem)}".encode() in kafka.stderr
    verified = run_cli(["dump-log", "--verify", *args])
    assert verified.returncode == 0, verified.stderr
    assert "Non-consecutive" not in verified.stderr and "is followed by" not in verified.stderr
    assert verified.stdout.count("every CRC, size and offset is intact") == len(logs)


# -- 6 and 12: export never overwrites what it did not write; its figures agree ------------------------------


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
    import re

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


# -- 5: import loads a store without a broker, a partition directory without partition.metadata too ---------


def test_import_without_partition_metadata_makes_a_topic_id(tmp_path: Path) -> None:
    import json
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


# -- 2: the quickstart leaves a way to reach its store, and its next steps work as printed -------------------


def _printed_next_steps(stdout: str) -> tuple[str, str]:
    lines = stdout.splitlines()
    (shell,) = [line for line in lines if line.startswith("rsm store --config ")]
    start = lines.index("read it with Spark (Python):") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].endswith(".show()")) + 1
    return shell, "\n".join(lines[start:end])


def test_quickstart_writes_rsm_properties_and_its_store_line_works(quickstart) -> None:  # type: ignore[no-untyped-def]
    root, done = quickstart
    props = root / "rsm.properties"
    text = props.read_text()
    for line in ("storage.backend=file", f"storage.file.root={root / 'store'}", "bucket=tiered", "prefix=",
                 f"encryption.keyring.path={root / 'secrets' / 'keyring.json'}"):  # fmt: skip
        assert line in text.splitlines(), text
    keys = (root / "secrets" / "keyring.json").read_text()
    import json

    assert not any(k in text for k in json.loads(keys).values())  # no secrets
    shell, _ = _printed_next_steps(done.stdout)
    assert str(props) in shell
    # as printed, by a shell, with the `rsm` of this interpreter on the PATH
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    du = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, timeout=120)
    assert du.returncode == 0, du.stderr
    assert "orders" in du.stdout and "payments" in du.stdout and "10 segments" in du.stdout, du.stdout


@pytest.mark.spark
def test_quickstart_spark_snippet_runs_as_printed(quickstart) -> None:  # type: ignore[no-untyped-def]
    """The printed Python, pasted into a fresh interpreter (a plain local session, no `register` call, no
    PYTHONPATH, run away from the checkout: the format is found through README's own install), reads the
    demo's committed records as the quickstart's table counts them (read_committed): 200 per segment, five
    segments, and the five records of the committed transaction, in each topic."""
    import re

    root, done = quickstart
    _, snippet = _printed_next_steps(done.stdout)
    assert "register" not in snippet and "read_committed" in snippet
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = sys.executable
    run = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=env,
                         timeout=600, cwd=root.parent)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"\|\s*orders\|\s*1005\|", run.stdout), run.stdout
    assert re.search(r"\|\s*payments\|\s*1005\|", run.stdout), run.stdout


def test_import_dry_run_shows_what_the_run_does(tmp_path: Path) -> None:
    """`migrate import --dry-run` and the run agree: the same journal job (a directory without
    partition.metadata gets the same new topic id each time), the key id the run encrypts with, closed
    offset ranges equal to what the run tiers; a rerun with nothing to do shows no empty progress bar."""
    import json
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
