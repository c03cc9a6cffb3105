"""`/path/to/venv/bin/rsm migrate ... --engine spark` without an activated venv.

Spark starts its Python workers with the `python3` on the PATH unless PYSPARK_PYTHON says otherwise; a
venv's `rsm` run by its path, the venv not activated, then had workers that could not import `rsm`. The
command runs here through its installed entry point with a `python3` first on the PATH that fails, and
PYSPARK_PYTHON unset: the workers must run the entry point's interpreter, and Spark's start-up log lines
must stay out of the command's output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from migrate_helpers import REPO, tier_topic, write_properties

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ENTRY_POINT = Path(sys.executable).parent / "rsm"
SPARK_LOG_LINE = re.compile(r"\b(WARN|INFO)\b|Setting default log level|setLogLevel")


@pytest.mark.skipif(not ENTRY_POINT.exists(), reason="no rsm entry point beside this interpreter")
def test_verify_on_spark_runs_workers_on_the_entry_points_interpreter(tmp_path: Path) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=2, records=100)
    props = write_properties(tmp_path / "server.properties", tiered.configs)
    fake = tmp_path / "wrong-python"
    fake.mkdir()
    for name in ("python3", "python"):
        script = fake / name
        script.write_text("#!/bin/sh\necho 'not the interpreter of rsm' >&2\nexit 1\n")
        script.chmod(0o755)
    here = str(Path(sys.executable).parent)
    path = [fake, *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != here)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join(str(p) for p in path)
    env["PYTHONPATH"] = str(REPO)  # this checkout's code, in the command and in its workers
    done = subprocess.run(
        [str(ENTRY_POINT), "migrate", "--config", str(props), "verify", "--topic", tiered.topic]
        + ["--engine", "spark", "--json"],
        capture_output=True, text=True, timeout=500, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["segments"] == 4 and not report["failed"], report
    noise = [line for line in done.stderr.splitlines() if SPARK_LOG_LINE.search(line)]
    assert not noise, done.stderr[-3000:]
