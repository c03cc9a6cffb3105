"""A reader error inside a Spark task reaches the user as its one line, not buried in Spark's frames.

A `spark-submit` of a user's application (tests/spark_apps/read_failing.py: a plain session, Spark's
defaults) reads an encrypted file store whose objects went bad after they were tiered, and catches each
failure as a user's code would:

- `tampered`: a byte of the topic's `.log` object flipped (planning reads manifests and indexes only, so
  the task finds it: the chunk does not authenticate);
- `gone`: the `.log` object deleted (the task finds it missing: data loss);
- `wrong-key`: a keyring holding the key id the segments name, with other key bytes: refused while
  planning (the key is tried on the first segment's data key), before any task runs.

Both adapters: the Python Data Source, and the columnar scan (`--jars $(rsm spark jar)`). What is
asserted, per adapter, is what the source can decide:

- the caught exception's message holds `kafka-tiered: <line>` as a line of its own, with no Python
  traceback: the Python source raises `errors.TaskError` (a task's PythonException then reads "An
  exception was thrown from the Python worker:" and our line; planning's is Spark's one line ending in
  ours); the columnar scan's worker reports the line, which the JVM throws without a stack trace (a
  planning error's message is our line; a task's reaches PySpark inside Spark's "Job aborted"
  SparkException until the jar's exception is a SparkThrowable: xfail);
- the console has no Python traceback, and every Java stack trace on it is Spark's own report of a
  failed Python task (Executor's ERROR and TaskSetManager's WARN print a PythonException with its JVM
  frames: nothing a data source can shorten) whose message is our line; the columnar scan's console has
  no Java frame at all.

The figures (frames on the console) are printed for the record.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness.spark_cluster import submit_env
from kafka_segments import write_keyring
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "spark_apps" / "read_failing.py"
SUBMIT_TIMEOUT_S = 540  # a loaded 2-core machine takes minutes to start Spark
PREFIX = "kafka-tiered: "
FRAME = re.compile(r"^\tat ")
LOG_ENTRY = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ")  # Spark's default log4j2 layout


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """An encrypted file store of three one-segment topics; the queries' options per case."""
    base = tmp_path_factory.mktemp("task-errors")
    keyring = write_keyring(base / "keyring.json", ("k1",))
    keyring.chmod(0o600)
    store = {
        "storage.backend": "file",
        "storage.file.root": str(base / "store"),
        "bucket": "main",
        "encryption.keyring.path": str(keyring),
    }
    rsm = RemoteStorageManager()
    rsm.configure({**store, "encryption.enabled": "true", "encryption.key.id": "k1"})
    for topic in ("tampered", "gone", "intact"):
        log = PartitionLog(rsm, TopicIdPartition(uuid.uuid4(), topic, 0), base / topic)
        log.append(40)
        log.roll()
    rsm.close()
    objects = {p.parent.parent.name.split("-")[0]: p for p in (base / "store").rglob("*.log")}
    data = bytearray(objects["tampered"].read_bytes())
    data[len(data) // 2] ^= 0x40
    objects["tampered"].write_bytes(bytes(data))
    objects["gone"].unlink()
    wrong = base / "wrong-keyring.json"
    wrong.write_text(json.dumps({"k1": base64.b64encode(os.urandom(32)).decode()}))
    wrong.chmod(0o600)
    return {
        "tampered": {**store, "subscribe": "tampered"},
        "gone": {**store, "subscribe": "gone"},
        "wrong-key": {**store, "subscribe": "intact", "encryption.keyring.path": str(wrong)},
    }


def _submit(args: list[str], cases: dict[str, dict[str, str]], tmp_path: Path) -> tuple[dict[str, Any], str]:
    """Run the application; (what it caught per case, the console: spark-submit's stdout and stderr)."""
    from harness.procs import dies_with_parent
    from harness.spark_cluster import spark_home

    out = tmp_path / "caught.json"
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]", *args]
    proc = subprocess.run(
        dies_with_parent([*cmd, str(APP), json.dumps(cases), str(out)]),
        cwd=tmp_path,
        env=submit_env(sys.executable, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=SUBMIT_TIMEOUT_S,
        check=False,
    )
    console = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"spark-submit failed (rc={proc.returncode}):\n{console[-6000:]}")
    return json.loads(out.read_text()), console


def _our_line(message: str) -> str:
    """The message's line holding our error; it must be there, once, and start with our prefix."""
    lines = [line for line in message.splitlines() if PREFIX in line]
    assert len(lines) == 1, message
    return lines[0]


def _entries(console: str) -> list[str]:
    """The console cut into Spark's log entries (a line with log4j's time stamp and what follows it)."""
    entries: list[list[str]] = [[]]
    for line in console.splitlines():
        if LOG_ENTRY.match(line):
            entries.append([])
        entries[-1].append(line)
    return ["\n".join(e) for e in entries if e]


TAMPERED = (
    r"kafka-tiered: corrupt data in file:main/tampered-\S+/0/\d{20}-\S+\.log: "
    r"log piece 0 does not authenticate \(tampered, misplaced or wrong key\)"
)
GONE = (
    r"kafka-tiered: gone-0: segment file:main/gone-\S+/0/\d{20}-\S+\.log was deleted after the query "
    r"was planned \(offsets 0\.\.39\); set failOnDataLoss=false to skip it"
)
WRONG_KEY = (
    r"kafka-tiered: file:main/intact-\S+\.manifest: the data key wrapped under key id 'k1' does not "
    r"authenticate \(wrong key or tampered\), with the keyring \S+/wrong-keyring\.json "
    r"\(encryption\.keyring\.path\): give the reader the brokers' keys"
)


def _check_caught(caught: dict[str, Any]) -> dict[str, str]:
    """Every case failed with our line in the caught message and no Python traceback; returns the lines."""
    lines = {}
    for name, got in caught.items():
        assert "message" in got, f"{name} read {got} instead of failing"
        message = got["message"]
        assert "Traceback (most recent call last)" not in message, message
        assert 'File "' not in message, message
        lines[name] = _our_line(message)
    assert re.fullmatch(TAMPERED, lines["tampered"]), lines["tampered"]
    assert re.fullmatch(GONE, lines["gone"]), lines["gone"]
    assert re.search(WRONG_KEY, lines["wrong-key"]), lines["wrong-key"]
    return lines


def test_python_source_task_errors_are_one_line(broken, tmp_path: Path) -> None:  # noqa: ANN001
    caught, console = _submit([], broken, tmp_path)
    lines = _check_caught(caught)
    for name in ("tampered", "gone"):  # task-time: Spark's PythonException, our line right after its head
        message = caught[name]["message"]
        assert caught[name]["type"] == "pyspark.errors.exceptions.captured.PythonException", caught[name]
        assert message.splitlines() == ["An exception was thrown from the Python worker:", lines[name]]
    planning = caught["wrong-key"]
    assert planning["type"] == "pyspark.errors.exceptions.captured.AnalysisException", planning
    assert planning["message"].startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to "), planning
    assert f"read partitions: {PREFIX}file:main/intact-" in planning["message"].splitlines()[0], planning
    assert "Traceback (most recent call last)" not in console, console[-6000:]
    frames = 0
    for entry in _entries(console):
        n = sum(1 for line in entry.splitlines() if FRAME.match(line))
        if n:  # Spark's report of a failed Python task, with our line as its message
            head = entry.splitlines()[:2]
            assert any("PythonException: [PYTHON_EXCEPTION]" in line and PREFIX in line for line in head), (
                entry
            )
        frames += n
    print(f"python source: {frames} Java frame lines on the console, all Spark's PythonException reports")


def test_columnar_scan_task_errors_are_one_line(broken, tmp_path: Path) -> None:  # noqa: ANN001
    jar = subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", "spark", "jar"],
        cwd=ROOT, env=submit_env(sys.executable, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    caught, console = _submit(["--jars", jar], broken, tmp_path)
    frames = sum(1 for line in console.splitlines() if FRAME.match(line))
    print(f"columnar scan: {frames} Java frame lines on the console")
    assert frames == 0, console[-6000:]
    assert "Traceback (most recent call last)" not in console, console[-6000:]
    # Spark's reports of the failed tasks: the JVM's one line, as the worker reported it
    thrown = [
        line.split("KafkaTieredException: ", 1)[1]
        for line in console.splitlines()
        if "KafkaTieredException: " in line
    ]
    assert any(re.fullmatch(TAMPERED, line) for line in thrown), thrown
    assert any(re.fullmatch(GONE, line) for line in thrown), thrown
    # a planning error is thrown on the driver, outside a job: PySpark's exception is our line alone
    planning = caught["wrong-key"]
    assert planning["type"] == "pyspark.errors.exceptions.captured.IllegalArgumentException", planning
    assert re.fullmatch(WRONG_KEY, planning["message"]), planning
    for name in ("tampered", "gone"):
        assert PREFIX in caught[name]["message"], caught[name]
        assert caught[name]["message"].startswith(PREFIX), caught[name]
        assert "\n" not in caught[name]["message"], caught[name]
