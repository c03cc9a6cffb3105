"""The cloud emulators the suite runs, installed by the project's own files into ``<repo>/.cache``.

- Azurite (Azure Blob), the npm package ``azurite`` at :data:`AZURITE_VERSION`, by ``npm install`` into
  ``.cache/azurite``;
- fake-gcs-server (GCS), the Go module ``github.com/fsouza/fake-gcs-server`` at :data:`FAKE_GCS_VERSION`,
  by ``go install`` with ``GOBIN=.cache/go-bin``.

Each is installed once (a stamp names the version) and reused; concurrent pytest processes on one checkout
are serialised with a file lock. When the tool chain (npm, go) is missing or the install fails, tests that
need the emulator are skipped with the reason, except under ``CI=true``, where they fail: CI must run them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.maven import CACHE_DIR, log_tail

log = logging.getLogger(__name__)

AZURITE_VERSION = "3.35.0"
FAKE_GCS_VERSION = "v1.56.1"
INSTALL_TIMEOUT_S = 15 * 60


class EmulatorUnavailable(RuntimeError):
    """An emulator could not be installed or started; the message says why and where its log is."""


def unavailable(reason: str) -> None:
    """Skip the test (fail it under CI=true, where every emulator must run)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: emulator tests must run)", pytrace=False)
    pytest.skip(reason)


def _install(name: str, version: str, target: Path, command: list[str], env: dict[str, str]) -> Path:
    """Run ``command`` once per version (stamp beside ``target``), under a lock; returns ``target``."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    stamp = CACHE_DIR / f"{name}.version"
    log_file = CACHE_DIR / f"{name}-install.log"
    with open(CACHE_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists() and stamp.exists() and stamp.read_text().strip() == version:
            return target
        tool = shutil.which(command[0])
        if tool is None:
            raise EmulatorUnavailable(f"{name}: {command[0]} is not on the PATH, needed to install it")
        log.info("installing %s %s: %s", name, version, " ".join(command))
        with open(log_file, "w") as out:
            try:
                done = subprocess.run(
                    [tool, *command[1:]],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    cwd=CACHE_DIR,
                    timeout=INSTALL_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise EmulatorUnavailable(f"{name}: install timed out; log {log_file}") from None
        if done.returncode != 0 or not target.exists():
            raise EmulatorUnavailable(
                f"{name}: install failed ({done.returncode}); log {log_file}:\n{log_tail(log_file, 20)}"
            )
        stamp.write_text(version)
        return target


def azurite_blob_command() -> Path:
    """The ``azurite-blob`` script of the pinned Azurite, installed with npm when missing."""
    prefix = CACHE_DIR / "azurite"
    return _install(
        "azurite",
        AZURITE_VERSION,
        prefix / "node_modules" / ".bin" / "azurite-blob",
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"azurite@{AZURITE_VERSION}"],
        {},
    )


def fake_gcs_command() -> Path:
    """The ``fake-gcs-server`` binary of the pinned version, built with ``go install`` when missing."""
    gobin = CACHE_DIR / "go-bin"
    return _install(
        "fake-gcs-server",
        FAKE_GCS_VERSION,
        gobin / "fake-gcs-server",
        ["go", "install", f"github.com/fsouza/fake-gcs-server@{FAKE_GCS_VERSION}"],
        {"GOBIN": str(gobin), "GOFLAGS": "-mod=mod"},
    )
