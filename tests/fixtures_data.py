"""Locating the shared real-Kafka fixtures (``<repo>/../shared/fixtures``) for tests.

CI runs a clone with ``shared/`` beside it, so there a missing fixture is a failure, never a quiet skip:
the differential tests against real brokers' files are the ones that must not silently stop running.
``KAFKA_RSM_FIXTURES`` points elsewhere for a checkout laid out differently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(
    os.environ.get("KAFKA_RSM_FIXTURES") or Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
)
PUBLIC = FIXTURES / "public"
SEGMENTS = PUBLIC / "segments"


def fixture_path(*parts: str) -> Path:
    """Path of a shared fixture; skips locally (fails under CI) when the fixtures are not there."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        reason = (
            f"shared fixture {path} is absent (the real-Kafka fixtures live in <repo>/../shared/fixtures)"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path
