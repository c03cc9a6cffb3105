"""The `rsm` command as an operator runs it (its own process, the checkout as the working directory), the
one-line failure every tool promises for a mistake, and an `rsm.properties` written for a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rsm(
    *args: str, env: dict[str, str | None] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`rsm ...` in its own process, as an operator runs it."""
    full_env = {**os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO, check=False,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The command failed with exactly one line on stderr holding every expected fragment."""
    assert done.returncode != 0, done.stdout[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for fragment in expected:
        assert fragment in lines[0], lines[0]
    return lines[0]


def properties(path: Path, **configs: str) -> Path:
    path.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in configs.items()))
    return path
