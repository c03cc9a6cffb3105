"""Locating the shared real-Kafka fixtures (``<repo>/../shared/fixtures``) for tests."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
PUBLIC = FIXTURES / "public"
SEGMENTS = PUBLIC / "segments"


def fixture_path(*parts: str) -> Path:
    """Path of a shared fixture; skips the test with the reason when the fixtures are not there."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"shared fixture {path} is absent (the real-Kafka fixtures live in <repo>/../shared/fixtures)"
        )
    return path
