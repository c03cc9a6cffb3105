"""Holes in a partition's history: offsets Kafka's log holds (or held) that the store does not.

Why one place: the Spark reader, `rsm migrate verify` and `rsm store ls` must call the same offsets a hole
and name them the same way, so that no reader returns a shorter result where another reports a loss.

Kafka's remote segments are contiguous: each segment's end offset is the next one's base offset - 1
(copies of the same offsets from retries or leader changes are resolved by `rsm.catalog.history`). So a
partition's history has a hole where:

- between two segments, offsets lie that no copy claims (`PartitionHistory.gaps`: a segment deleted
  behind the RSM's back, or sitting in a location the catalog does not know);
- before its first segment, offsets lie that the partition's log still starts at or below, as far as
  anything tells: the brokers' log start offset when a reader has `kafka.bootstrap.servers`, else the
  mark the RSM's deletes left (`rsm.store.log_starts`): Kafka's retention deletes through the RSM, so a
  history starting past the mark lost offsets no delete through it accounts for.

A hole past the last segment cannot be told from the store alone (the newest segments simply are not
there); with a broker its tail is read from the brokers (`spark_reader.hybrid`).

Every hole names its topic, partition and offsets, why it is one, and where the catalog looked, in one
line (`Hole.message`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NO_SEGMENT = "no segment in the store holds them"


@dataclass(frozen=True)
class Hole:
    """Offsets [first_offset, last_offset] of a partition that the store should hold and does not."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    why: str
    looked_in: str = ""

    def message(self) -> str:
        """One line: the partition, the offsets, why they are a hole and where the catalog looked."""
        where = f"; looked in {self.looked_in}" if self.looked_in else ""
        return (
            f"{self.topic}-{self.partition}: offsets {self.first_offset}..{self.last_offset} are missing "
            f"from the store ({self.why}{where})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "why": self.why,
            "looked_in": self.looked_in,
        }


def recorded_start_why(start: int) -> str:
    """Why offsets below a history's start are a hole, given the RSM's log-start mark."""
    return (
        f"the RSM's deletes moved the log start to {start} only: segments were removed without it, or lie "
        "in a location the catalog does not know"
    )


def broker_start_why(start: int, servers: str) -> str:
    """Why offsets below a history's start are a hole, given the brokers' log start offset."""
    return (
        f"the Kafka brokers {servers} say the log starts at {start}: segments were removed without the "
        "RSM, or lie in a location the catalog does not know"
    )


def before_start(
    topic: str,
    partition: int,
    history_start: int | None,
    log_start: int | None,
    why: str,
    looked_in: str = "",
) -> Hole | None:
    """The hole between where the log starts (`log_start`, from a mark or the brokers) and the history's
    first offset, or None (no history, nothing to compare with, or the history starts early enough)."""
    if history_start is None or log_start is None or log_start >= history_start:
        return None
    return Hole(topic, partition, log_start, history_start - 1, why, looked_in)


def between_segments(
    topic: str, partition: int, gaps: tuple[tuple[int, int], ...] | list[tuple[int, int]], looked_in: str = ""
) -> list[Hole]:
    """`PartitionHistory.gaps` (or `gaps_between`) as holes."""
    return [Hole(topic, partition, a, b, NO_SEGMENT, looked_in) for a, b in gaps]


def clipped(hole: Hole, first: int | None, last: int | None) -> Hole | None:
    """The part of `hole` inside [first, last] (None bounds: open), or None."""
    a = hole.first_offset if first is None else max(hole.first_offset, first)
    b = hole.last_offset if last is None else min(hole.last_offset, last)
    if a > b:
        return None
    return Hole(hole.topic, hole.partition, a, b, hole.why, hole.looked_in)
