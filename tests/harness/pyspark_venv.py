"""A virtualenv per older PySpark line, installed by the project's own files into ``<repo>/.cache``.

``tests/spark/test_spark_versions.py`` runs the reader under PySpark lines older than the one the suite runs
on. A venv made with ``--system-site-packages`` would see the base interpreter's pyspark beside its own,
so each venv is a plain one holding ``pyspark[sql]==<version>`` and this package's runtime dependencies
(read from pyproject.toml: ``dependencies`` and the ``spark`` extra), and finds the checkout's own code
through a ``.pth`` file naming the repository root (rewritten each use: a fresh clone in another folder
reads its own code). A pyspark is ~400 MB: each venv is installed once per machine (a stamp names what
was installed), under a file lock, as ``harness.emulators`` installs the emulators.
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from harness.maven import CACHE_DIR, REPO_ROOT, log_tail

log = logging.getLogger(__name__)

INSTALL_TIMEOUT_S = 20 * 60


class VenvUnavailable(RuntimeError):
    """The venv could not be made (no network to PyPI, a failed install): the message names the log."""


def runtime_requirements(pyspark_version: str) -> list[str]:
    """This package's runtime requirements with pyspark pinned to ``pyspark_version``."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"]["spark"])
    out = [r for r in reqs if re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() != "pyspark"]
    return [f"pyspark[sql]=={pyspark_version}", *out]


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(
        subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    )


def pyspark_python(version: str) -> Path:
    """The python of ``.cache/pyspark-<version>/`` with that pyspark and this checkout importable."""
    venv = CACHE_DIR / f"pyspark-{version}"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    reqs = runtime_requirements(version)
    wanted = json.dumps({"python": sys.version.split()[0], "requirements": reqs})
    stamp = venv / "installed.json"
    log_file = CACHE_DIR / f"pyspark-{version}-install.log"
    with open(CACHE_DIR / f"pyspark-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == wanted and _python(venv).exists()):
            _install(venv, reqs, log_file)
            stamp.write_text(wanted)
        # the checkout's own code (pyspark_kafka_tiered at its root, where Spark's data source scan finds it)
        (_site_packages(_python(venv)) / "kafka_tiered_checkout.pth").write_text(f"{REPO_ROOT}\n")
    return _python(venv)


def _install(venv: Path, reqs: list[str], log_file: Path) -> None:
    log.info("installing %s into %s", " ".join(reqs), venv)
    with open(log_file, "w") as out:
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", "-q", *reqs],
        ]
        for step in steps:
            try:
                done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise VenvUnavailable(f"{venv.name}: install timed out; log {log_file}") from None
            if done.returncode != 0:
                raise VenvUnavailable(
                    f"{venv.name}: {step[2]} failed ({done.returncode}); log {log_file}:\n{log_tail(log_file, 20)}"
                )
