"""What one `rsm quickstart` run prints and leaves, used as a newcomer next uses it: tables that fit the
terminal and rules that fit a pipe, an `rsm.properties` whose printed `rsm store` line and Spark snippet
work as printed, and its segments dumped by `rsm dump-log` (deep iteration judged against Kafka's own
tool). CLI tests run the real `rsm` entry point in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import REPO
from migrate_helpers import run_cli

from rsm.cli.console import RULED_PIPE_WIDTH
from rsm.cli.main import main

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One `rsm quickstart --no-spark` run, piped as a user's `rsm quickstart | tee` is."""
    root = tmp_path_factory.mktemp("newcomer") / "qs"
    done = run_cli(["quickstart", "--dir", str(root), "--records", "200", "--no-spark"], timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, done


def test_quickstart_tables_fit_80_columns_without_cutting_names(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats the capture as a terminal of 80 columns
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["quickstart", "--dir", str(tmp_path / "qs"), "--records", "40", "--no-spark"]) == 0
    out = ANSI.sub("", capsys.readouterr().out)
    assert "…" not in out
    tables = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert tables and max(len(line) for line in tables) <= 80
    first_column = "".join(line.split("│")[1].strip() for line in tables if line.startswith("│"))
    for base in (0, 40, 80, 120, 160):
        assert f"{base:020d}.log" in first_column  # folded onto two lines maybe, never shortened


def test_piped_quickstart_output_has_no_wide_rules(quickstart) -> None:  # type: ignore[no-untyped-def]
    _, done = quickstart
    rules = [line for line in done.stdout.splitlines() if "───" in line]
    assert rules and all(len(line) <= RULED_PIPE_WIDTH for line in rules), max(rules, key=len)


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


# -- its segments, dumped ---------------------------------------------------------------------------------


def test_dump_log_verify_of_a_stored_segment_names_the_object(quickstart) -> None:  # type: ignore[no-untyped-def]
    root, _ = quickstart
    stored = sorted((root / "store" / "tiered").rglob("*.log"))[0]
    done = run_cli(["dump-log", "--verify", str(stored)])
    assert done.returncode == 0, done.stderr
    verified = [line for line in done.stdout.splitlines() if line.startswith("Verified ")]
    assert len(verified) == 1 and verified[0].startswith(f"Verified {stored} "), verified
    assert "rsm-dump-" not in done.stdout


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
