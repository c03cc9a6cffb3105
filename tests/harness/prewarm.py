"""Slow installs started in the background when the session begins, so no test waits for them in turn.

Some tests need things that take minutes to make and little CPU: a virtualenv per older PySpark line
(``harness.pyspark_venv``, ~400 MB from PyPI each), the wheel built from this work tree
(``test_wheel_install``) and each Kafka line's broker jars (``harness.kafka_versions``, Maven). Made by the test that needs them, they add their whole install time to the
suite. Started in a background process as soon as the session knows it will run those tests, they are
made while the fast tests run; the tests then take them from the cache, waiting on the same file locks
the installers hold (so a test never sees half an install). A failure here is only logged: the test
makes the thing itself and reports the failure the way it always did.

Run as ``python -m harness.prewarm <job>...`` with ``tests/`` on the path (the session does it).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.maven import CACHE_DIR

log = logging.getLogger(__name__)

TESTS_DIR = Path(__file__).resolve().parents[1]
LOG_FILE = CACHE_DIR / "logs" / "prewarm.log"


def _pyspark_venvs() -> None:
    import pyspark
    from test_spark_versions import VERSIONS

    from harness.pyspark_venv import pyspark_python

    for version in VERSIONS:
        if version != pyspark.__version__:
            pyspark_python(version)


def _kafka_lines() -> None:
    from compat_table import KAFKA_VERSIONS

    from harness.kafka_versions import KafkaVersionNotServed, broker_libs

    for version in KAFKA_VERSIONS:
        try:
            broker_libs(version)
        except KafkaVersionNotServed:
            log.info("kafka-lines: %s is not served (the test says so)", version)


def _wheel() -> None:
    from test_wheel_install import built_wheel

    with tempfile.TemporaryDirectory(prefix="rsm-prewarm-") as work:
        built_wheel(Path(work))


JOBS = {"pyspark-venvs": _pyspark_venvs, "wheel": _wheel, "kafka-lines": _kafka_lines}
# the test module whose selection asks for each job
WANTED_BY = {
    "test_spark_versions.py": "pyspark-venvs",
    "test_wheel_install.py": "wheel",
    "test_kafka_versions.py": "kafka-lines",
}


def start(test_files: set[str]) -> subprocess.Popen[bytes] | None:
    """Start the jobs the selected test files need in one background process (None when none)."""
    jobs = sorted({job for name, job in WANTED_BY.items() if name in test_files})
    if not jobs or os.environ.get("RSM_TEST_PREWARM", "1") == "0":
        return None
    LOG_FILE.parent.mkdir(parents=True, exist_ok=True)
    from harness.paths import FEATURE_DIRS

    tests = [str(TESTS_DIR), *map(str, FEATURE_DIRS)]
    path = [*tests, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))  # no empty entry (the working directory)
    with LOG_FILE.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.prewarm", *jobs],
            cwd=TESTS_DIR, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """End the background jobs with the session (an install cut short leaves no stamp: redone next time)."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s prewarm %(message)s")
    failed = 0
    for job in argv:
        log.info("%s: starting", job)
        try:
            JOBS[job]()
        except BaseException as exc:  # noqa: BLE001 - the test that needs it makes it and reports
            failed += 1
            log.warning("%s: failed (%s); the test that needs it will make it itself", job, exc)
        else:
            log.info("%s: ready", job)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
