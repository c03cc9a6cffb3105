"""Polling a condition with a deadline, for tests that wait on real brokers and stores."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(what: str, predicate: Callable[[], T], timeout: float, interval: float = 1.0) -> T:
    """The first truthy result of ``predicate()``; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
