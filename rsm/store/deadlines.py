"""The deadlines of one cloud store's requests, read alike for every cloud (`storage.<cloud>.*`).

S3, GCS and Azure each have a connect timeout and a read timeout per attempt, a number of attempts and a
bound on one whole request, retries included, with the same defaults and the same meaning (why those
defaults: `rsm.store.s3.s3_deadlines`). Each backend hands the first three to its SDK in the SDK's own
terms; the last is `ObjectStore._remote`'s, the same for all.
"""

from __future__ import annotations

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
