"""The deadlines of one cloud store's requests, read alike for every cloud (`storage.<cloud>.*`).

S3, GCS and Azure each have a connect timeout and a read timeout per attempt, a number of attempts and a
bound on one whole request, retries included, with the same defaults and the same meaning (why those
defaults: `rsm.store.s3.s3_deadlines`). Each backend hands the first three to its SDK in the SDK's own
terms; the last is `ObjectStore._remote`'s, the same for all.

Above them, an operation made of many requests (a copy: its uploads, then on failure the removal of what it
wrote) has one `Budget` for the whole (`copy.timeout.ms`), kept below the bridge's own timeout: each request
it makes gets what is left of the budget when that is less than its own deadline, so a store that stops
answering ends the whole operation in one budget, not one request deadline per request in turn.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from rsm.config.settings import RsmConfig


@dataclass(frozen=True)
class Deadlines:
    """Seconds and attempts of one cloud's requests (`storage.<cloud>.*`)."""

    connect: float
    read: float
    attempts: int
    request: float

    @classmethod
    def of(cls, config: RsmConfig, cloud: str) -> Deadlines:
        def seconds(name: str) -> float:
            return int(config.get(f"storage.{cloud}.{name}")) / 1000  # type: ignore[arg-type]

        return cls(
            connect=seconds("connect.timeout.ms"),
            read=seconds("read.timeout.ms"),
            attempts=int(config.get(f"storage.{cloud}.retry.max.attempts")),  # type: ignore[arg-type]
            request=seconds("request.timeout.ms"),
        )


@dataclass(frozen=True)
class Budget:
    """The wall-clock bound of one whole operation (a copy: its uploads and its clean-up), `setting` naming
    it in messages. Every cloud request made while it is `within` is bounded by what is left of it as well
    as by its own `request.timeout.ms` (`ObjectStore._bounded`), in the thread that entered it and in the
    threads it hands work to (`BackgroundWriter` runs in the caller's context)."""

    ends: float  # time.monotonic() when the operation must have ended
    seconds: float
    setting: str

    @classmethod
    def starting_now(cls, seconds: float, setting: str) -> Budget:
        return cls(time.monotonic() + seconds, seconds, setting)

    def remaining(self) -> float:
        return self.ends - time.monotonic()

    def spent(self) -> str:
        """The end of the message of a request the budget ended (or refused)."""
        return f"the operation's budget of {self.seconds:g} s ({self.setting}) is spent"


_BUDGET: ContextVar[Budget | None] = ContextVar("rsm_store_budget", default=None)


def current_budget() -> Budget | None:
    """The budget of the operation this thread works for, if any."""
    return _BUDGET.get()


@contextmanager
def within(budget: Budget | None) -> Iterator[Budget | None]:
    """``with``: the store requests made inside are bounded by ``budget`` too (None: by their own only)."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)
