"""The reader under each PySpark line it supports: 4.1, 4.2 and the suite's own 4.3.

Each older line runs in its own venv (`harness.pyspark_venv`: `.cache/pyspark-<version>/`, installed once
per machine) as a subprocess with that venv's python running tests/spark_apps/version_checks.py: one
local[2] session whose columnar scan jar is built against that line's own jars. The app reads a small
tiered topic (two partitions, three segments each) on both paths, the Python Data Source and the columnar
scan: a batch read, a filtered read with Spark's Python filter pushdown on and off, and a
`Trigger.AvailableNow` stream with `maxOffsetsPerTrigger`. Here its rows are compared with what was tiered.

What a line lacks must degrade with one log line, never an error (`spark_reader.streaming_api`): PySpark
4.1 has no admission control and no `SupportsTriggerAvailableNow` for Python sources, so its Python Data
Source runs AvailableNow as one micro-batch of everything; the columnar scan (Spark's JVM interfaces) walks
to the end in limited micro-batches on every line. Each passing run records what it proved in
`.cache/compat/spark-<version>.json` (component, version, checks, degraded, date), read by README's
compatibility table generator.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness.maven import CACHE_DIR, REPO_ROOT
from harness.pyspark_venv import VenvUnavailable, pyspark_python
from harness.spark import python_env
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

APP = REPO_ROOT / "tests" / "spark_apps" / "version_checks.py"
TOPIC = "versions"
RECORDS = 50  # per segment
SEGMENTS = 3  # per partition
PARTITIONS = 2
MISSING_LINE = "lacks"  # spark_reader.streaming_api.note_missing's line: "kafka-tiered: PySpark X lacks ..."


def _current() -> str:
    import pyspark

    return pyspark.__version__


VERSIONS = ("4.1.4", "4.2.1", _current())


def b64(v: bytes | None) -> str | None:
    return None if v is None else base64.b64encode(v).decode()


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[list[Any]]]:
    """The store's settings and the rows a reader must give: [partition, offset, key, value, ts ms]."""
    root = tmp_path_factory.mktemp("versions")
    store = {"storage.backend": "file", "storage.file.root": str(root / "store"), "chunk.size": "4096"}
    rsm = RemoteStorageManager()
    rsm.configure(store)
    tid, want = uuid.uuid4(), []
    for p in range(PARTITIONS):
        log = PartitionLog(rsm, TopicIdPartition(tid, TOPIC, p), root / f"w{p}")
        for _ in range(SEGMENTS):
            log.append(RECORDS, value_size=40)
            log.roll()
        want += [[p, r.offset, b64(r.key), b64(r.value), r.timestamp] for r in log.records]
    rsm.close()
    return store, want


def _python(version: str) -> Path:
    if version == _current():
        return Path(sys.executable)
    try:
        return pyspark_python(version)
    except VenvUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{exc} (CI=true: the PySpark line tests must run)", pytrace=False)
        pytest.skip(str(exc))


def _run_app(python: Path, store: dict[str, str], out: Path, log: Path) -> tuple[dict[str, Any], str]:
    env = {**os.environ, **python_env(), "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
    with open(log, "w") as f:
        done = subprocess.run(
            [str(python), str(APP), json.dumps(store), TOPIC, str(out)],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, timeout=1200, check=False,
        )  # fmt: skip
    text = log.read_text(errors="replace")
    assert done.returncode == 0, f"{python} {APP.name} failed (rc={done.returncode}):\n{text[-6000:]}"
    return json.loads(out.read_text()), text


class Proved:
    """What one line's run proved, and what degraded there (the compat record)."""

    def __init__(self, seconds: float) -> None:
        self.checks: list[str] = []
        self.degraded: list[str] = []
        self.notes: list[str] = []
        self.seconds = seconds

    def write(self, version: str) -> Path:
        out = CACHE_DIR / "compat" / f"spark-{version}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "component": "pyspark", "version": version, "checks": self.checks, "degraded": self.degraded,
            "notes": self.notes, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "seconds": round(self.seconds, 1),
        }  # fmt: skip
        out.write_text(json.dumps(record, indent=2) + "\n")
        return out


def _check_stream(batches: list[list[list[Any]]], want: list[list[Any]], limit: int, limited: bool) -> None:
    got = sorted((r for b in batches for r in b), key=lambda r: (r[0], r[1]))
    assert got == want, f"{len(got)} rows streamed, {len(want)} tiered"
    sizes = [len(b) for b in batches if b]
    if limited:
        assert max(sizes) <= limit and len(sizes) >= math.ceil(len(want) / limit), sizes
    else:
        assert sizes == [len(want)], sizes


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reader_under_a_pyspark_line(version: str, tiered, tmp_path: Path) -> None:  # noqa: ANN001
    store, want = tiered
    python, began = _python(version), time.monotonic()
    result, text = _run_app(python, store, tmp_path / "result.json", tmp_path / "app.log")
    assert result["version"] == result["spark"] == version
    apis, limit, proved = result["apis"], result["limit"], Proved(time.monotonic() - began)
    proved.notes.append(f"columnar scan jar compiled with javac against pyspark {version}'s own jars")
    filtered = [r for r in want if r[0] == 1 and 60 <= r[1] < 90]
    for path, name in (("python", "Python Data Source"), ("columnar", "columnar scan")):
        got = result[path]
        assert got["scan"] == path
        assert got["batch"] == want, f"{path}: batch read"
        proved.checks.append(f"batch read: {name}")
        assert got["filtered_true"] == got["filtered_false"] == filtered, f"{path}: filtered read"
        # pushed down, planning reads only the segment the filter can match: the Python Data Source where
        # Spark's Python filter pushdown is on, the columnar scan (Spark's JVM pushdown) always
        counts = {k: v for k, v in got.items() if k.endswith("partitions") or "partitions_" in k}
        if path == "python":
            assert got["filtered_partitions_true"] < got["filtered_partitions_false"], counts
        else:
            assert got["filtered_partitions_true"] == got["filtered_partitions_false"], counts
            assert got["filtered_partitions_true"] < got["batch_partitions"], counts
        proved.checks.append(f"filter pushdown: {name}")
        limited = path == "columnar" or apis["available_now"]
        _check_stream(got["stream"], want, limit, limited)
        proved.checks.append(f"stream: {name}")
        if limited:
            proved.checks.append(f"Trigger.AvailableNow with maxOffsetsPerTrigger: {name}")
    notes = [line for line in text.splitlines() if "kafka-tiered: PySpark" in line and MISSING_LINE in line]
    if apis["admission_control"] and apis["available_now"]:
        assert notes == [], notes
    else:
        assert len(notes) == 1, notes  # one line, and no error
        proved.degraded.append(
            "Python Data Source: no admission control or Trigger.AvailableNow before PySpark 4.2 "
            "(maxOffsetsPerTrigger not applied; AvailableNow runs one micro-batch; one log line)"
        )
    proved.write(version)
