"""A short soak through the bridge in CI (benchmarks/soak.py runs it longer): concurrent copies, deletes and
twelve fetchers against one bridge process; no error, no wrong byte, memory back near where it was warm."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from soak import run_soak  # noqa: E402


@pytest.mark.timeout(300)
def test_a_short_soak_has_no_errors_and_flat_memory(tmp_path: Path) -> None:
    result = run_soak(tmp_path, seconds=20, fetchers=12, copiers=2, segment_mib=4)
    s = result.summary()
    print(s)
    assert s["errors"] == 0, s["first_errors"]
    assert s["wrong_bytes"] == 0
    assert result.copies >= 4 and result.deletes >= 1 and result.fetches >= 100, s
    assert result.memory_flat, s
