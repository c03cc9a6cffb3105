"""What one wire client did: counts a caller can report (a task's metrics) and tests can check."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WireStats:
    """Counters of one `BrokerWire` client since it was made (mutable: the client adds to them)."""

    requests: int = 0  # requests answered, of every kind
    fetches: int = 0  # Fetch responses for the partition, errors included
    record_bytes: int = 0  # whole-batch bytes handed on
    trimmed_bytes: int = 0  # bytes of a batch cut by a response's size limit, fetched again next time
    retries: int = 0  # requests repeated after a retriable error
    metadata_refreshes: int = 0  # Metadata requests (the first one included)
    throttle_ms: int = 0  # time the brokers asked this client to wait (quotas), all waited out
