"""Starting and ending offsets as Spark's Kafka source takes them, and the offsets a stream checkpoints.

Per partition a position is `earliest` (-2 in JSON), `latest` (-1), an offset, or a timestamp (the first
record whose timestamp is >= it, as `offsetsForTimes` answers). Precedence is Spark's: a global
`startingTimestamp` over `startingOffsetsByTimestamp` over `startingOffsets` (the same for the ending
side). Ending offsets are exclusive. Here `earliest` and `latest` mean the first offset held in the store
and one past the last one (with `kafka.bootstrap.servers`, latest is the brokers': `spark_reader.hybrid`).

The stream's offset is Kafka source's JSON shape, `{"topic": {"partition": next offset}}`; Spark hands
it back with string keys, as Kafka's source writes them.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from spark_reader.options import OptionError, SourceOptions

EARLIEST, LATEST = -2, -1


class Kind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True)
class Position:
    kind: Kind
    value: int | None = None  # the offset or the timestamp (ms)


@dataclass(frozen=True)
class OffsetSpec:
    """A start or end for every partition: one position for all, or one per (topic, partition)."""

    default: Position | None
    per_partition: dict[tuple[str, int], Position] | None = None
    option: str = ""

    def position(self, topic: str, partition: int) -> Position:
        if self.per_partition is None:
            assert self.default is not None
            return self.default
        found = self.per_partition.get((topic, partition))
        if found is None:
            raise OptionError(
                f"option {self.option} names specific offsets but not {topic}-{partition}: "
                "every partition of the selected topics must be given"
            )
        return found

    def topics(self) -> set[str]:
        return {t for t, _ in self.per_partition} if self.per_partition else set()


def _per_partition(option: str, text: str, timestamps: bool) -> dict[tuple[str, int], Position]:
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        out = {}
        for topic, parts in doc.items():
            for p, v in parts.items():
                v = int(v)
                if timestamps:
                    out[(str(topic), int(p))] = Position(Kind.TIMESTAMP, v)
                elif v == EARLIEST:
                    out[(str(topic), int(p))] = Position(Kind.EARLIEST)
                elif v == LATEST:
                    out[(str(topic), int(p))] = Position(Kind.LATEST)
                elif v >= 0:
                    out[(str(topic), int(p))] = Position(Kind.OFFSET, v)
                else:
                    raise ValueError(f"offset {v} of {topic}-{p}")
        return out
    except (ValueError, TypeError, AttributeError) as exc:
        example = '{"topicA":{"0":1700000000000}}' if timestamps else '{"topicA":{"0":23,"1":-2}}'
        raise OptionError(f"option {option} must be JSON like {example}, got {text!r} ({exc})") from None


def _spec(opts: SourceOptions, side: str, *, default: Kind) -> OffsetSpec:
    start = side == "starting"
    ts = opts.starting_timestamp if start else opts.ending_timestamp
    by_ts = opts.starting_offsets_by_timestamp if start else opts.ending_offsets_by_timestamp
    plain = opts.starting_offsets if start else opts.ending_offsets
    if ts is not None:
        return OffsetSpec(Position(Kind.TIMESTAMP, ts), option=f"{side}Timestamp")
    if by_ts is not None:
        return OffsetSpec(
            None, _per_partition(f"{side}OffsetsByTimestamp", by_ts, True), option=f"{side}OffsetsByTimestamp"
        )
    if plain is None:
        return OffsetSpec(Position(default), option=f"{side}Offsets")
    word = plain.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(Position(Kind(word)), option=f"{side}Offsets")
    return OffsetSpec(None, _per_partition(f"{side}Offsets", plain, False), option=f"{side}Offsets")


def starting_spec(opts: SourceOptions, streaming: bool) -> OffsetSpec:
    """Where reading starts: `earliest` by default for batch queries, `latest` for streams (as Spark)."""
    spec = _spec(opts, "starting", default=Kind.LATEST if streaming else Kind.EARLIEST)
    if not streaming and _mentions(spec, Kind.LATEST):
        raise OptionError("option startingOffsets cannot be latest (or -1) for a batch query")
    return spec


def ending_spec(opts: SourceOptions) -> OffsetSpec:
    """Where a batch query stops (exclusive): `latest` by default."""
    spec = _spec(opts, "ending", default=Kind.LATEST)
    if _mentions(spec, Kind.EARLIEST):
        raise OptionError("option endingOffsets cannot be earliest (or -2)")
    return spec


def _mentions(spec: OffsetSpec, kind: Kind) -> bool:
    if spec.default is not None and spec.default.kind is kind:
        return True
    return any(p.kind is kind for p in (spec.per_partition or {}).values())


def to_stream_offset(offsets: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """{(topic, partition): next offset} -> Kafka source's checkpoint JSON shape."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_stream_offset(doc: dict) -> dict[tuple[str, int], int]:
    """Kafka source's checkpoint JSON shape -> {(topic, partition): next offset}."""
    if isinstance(doc, str):
        doc = json.loads(doc)
    return {(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}
