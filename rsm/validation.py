"""Checks run on a segment during copy: integrity (always) and a record validation policy (per topic).

Integrity. `SegmentIntegrityVerifier` is fed the segment's bytes in chunks, as they are read, and checks
every batch with `segment_format`'s `SegmentVerifier` (the project's one checker of segment bytes): the
CRC (CRC-32C over attributes..end for magic 2; CRC-32 over magic..end for the legacy magic 0/1 message
sets), header sanity (lengths, record count against the offset delta), offsets strictly increasing from the
metadata's start_offset and ending exactly at its end_offset, and that the batches exactly fill a file of
the size the metadata states. Any fault raises `SegmentIntegrityError` naming the file, the byte
position of the batch and the fault. It also counts, per chunk, the bytes of batches that are already
compressed, so the copy can skip compressing those chunks again. The copy runs it over the whole file
before uploading anything, so a corrupt segment never reaches the store.

Record validation (seed 002). A broker-level `RecordValidationPolicy` (`record.validation.policy.class.name`)
is applied to the segments of topics whose `record.validation.policy` (or
`unchecked.record.validation.policy`) is set; the topic value is handed to the policy, which decides what it
means (for example, a header every record must carry). `hints()` says which parts of a record the policy
reads, so keys, values or headers it does not need are not materialised. On a violation the topic's
`unchecked.rsm.record.validation.on.violation` decides: `fail` refuses the copy (Kafka retries later),
`tier` copies it and lists the violations in the manifest for readers.
"""

from __future__ import annotations

import abc
import importlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsm.errors import ConfigException, InvalidRecordException, SegmentIntegrityError
from rsm.metadata import TopicIdPartition
from segment_format.errors import CorruptRecordError
from segment_format.segment import SegmentVerifier

log = logging.getLogger(__name__)


@dataclass
class IntegritySummary:
    """What the copy needs from the check: size, batch and offset figures, and per chunk the bytes of
    batches that are already compressed (`compressed_bytes_per_chunk[i]` for file bytes
    `[i * chunk_size, (i + 1) * chunk_size)`), which decides where the copy skips compressing again."""

    size: int
    batches: int
    first_offset: int | None
    last_offset: int | None
    max_timestamp_ms: int
    compressed_bytes_per_chunk: list[int]
    magics: set[int] = field(default_factory=set)

    @property
    def compressed_batch_bytes(self) -> int:
        return sum(self.compressed_bytes_per_chunk)


class SegmentIntegrityVerifier:
    """Streaming batch-by-batch check of a segment; feed bytes in order, then `finish()`.

    A thin adapter over `segment_format.segment.SegmentVerifier` (the project's one integrity check):
    it fixes the RSM's semantics (offsets inside the metadata's `[start_offset, end_offset]`, the last
    batch ending exactly at `end_offset`, the file exactly `expected_size` bytes), has it count
    already-compressed bytes per chunk of `chunk_size`, and turns `CorruptRecordError` into
    `SegmentIntegrityError`.

    Why exactly at `end_offset` (issue 15): Kafka publishes the metadata's offsets as the range the remote
    copy serves, and the manifest carries them for the Spark reader and migration, which plan by them; a
    copy claiming offsets its file does not hold would make readers look for records in the wrong segment.
    Kafka sets `endOffset` to the next segment's base offset minus one, which is the last batch's last
    offset except in a log with offset holes at a segment's end (a topic compacted before it was switched
    to `delete` and tiered); such a segment is refused too, and stays local, rather than tiered with offsets
    it does not have.
    """

    def __init__(
        self, file: str, start_offset: int, end_offset: int, expected_size: int, chunk_size: int
    ) -> None:
        self.file = file
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.expected_size = expected_size
        self.chunk_size = chunk_size
        self.position = 0  # bytes consumed so far
        self._verifier = SegmentVerifier(
            file=file,
            expected_start_offset=start_offset,
            expected_end_offset=end_offset,
            exact_end_offset=True,
            total_size=expected_size,
            region_size=chunk_size,
        )

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Check the next bytes of the file; `SegmentIntegrityError` at the first fault."""
        try:
            self._verifier.update(data)
        except CorruptRecordError as exc:
            raise _integrity_error(exc, self.file) from None
        self.position += len(data) if not isinstance(data, memoryview) else data.nbytes

    def finish(self) -> IntegritySummary:
        """Check the file ended where the metadata says and nothing is half-read; return the figures."""
        try:
            s = self._verifier.finish()
        except CorruptRecordError as exc:
            raise _integrity_error(exc, self.file) from None
        return IntegritySummary(
            size=s.size_in_bytes,
            batches=s.batch_count,
            first_offset=s.first_offset,
            last_offset=None if s.first_offset is None else s.last_offset,
            max_timestamp_ms=s.max_timestamp,
            compressed_bytes_per_chunk=self._verifier.compressed_bytes_per_region,
            magics=set(s.magics),
        )


def _integrity_error(exc: CorruptRecordError, file: str) -> SegmentIntegrityError:
    return SegmentIntegrityError(exc.file or file, 0 if exc.position is None else exc.position, exc.reason)


# --------------------------------------------------------------------------------------------------------
# Record validation policy (seed 002)


@dataclass(frozen=True)
class RecordIntrospectionHints:
    """Which parts of a record a policy reads. Byte counts: 0 = not needed, -1 = all of it."""

    access_headers: bool = True
    access_key_bytes: int = -1
    access_value_bytes: int = -1


@dataclass(frozen=True)
class TopicMetadata:
    topic_id_partition: TopicIdPartition
    validation_policy: str  # the topic's `record.validation.policy` value


@dataclass(frozen=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True)
class RecordProxy:
    """Read-only view of one record; parts the policy's hints exclude are empty."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class RecordValidationPolicy(abc.ABC):
    """Seed 002's broker-side extension point, applied here when segments are tiered."""

    def configure(self, configs: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Receives the broker's `rsm.config.*` keys (prefix stripped)."""

    @abc.abstractmethod
    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        """Raise `InvalidRecordException` to reject the record."""

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources at shutdown."""


class RequireHeaderValidationPolicy(RecordValidationPolicy):
    """The seed's sample policy: every record must carry a header named by the topic's policy value."""

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        if not any(h.key == topic.validation_policy for h in record.headers):
            raise InvalidRecordException(
                f"Topic {topic.topic_id_partition.topic} requires records to contain a header with key: "
                f"{topic.validation_policy}"
            )

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(access_headers=True, access_key_bytes=0, access_value_bytes=0)


def load_policy(class_name: str, configs: Mapping[str, str]) -> RecordValidationPolicy:
    """Instantiate `module:Class` (or `module.Class`) and configure it with the broker's configs."""
    module_name, sep, attr = class_name.partition(":")
    if not sep:
        module_name, _, attr = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigException(
            f"config record.validation.policy.class.name: cannot load {class_name!r}: {exc}"
        ) from None
    policy = cls()
    if not isinstance(policy, RecordValidationPolicy):
        raise ConfigException(
            f"config record.validation.policy.class.name: {class_name} is not a RecordValidationPolicy"
        )
    policy.configure(configs)
    return policy


@dataclass(frozen=True)
class Violation:
    offset: int
    position: int
    reason: str


def iter_records(path: Path, hints: RecordIntrospectionHints) -> Iterator[tuple[int, RecordProxy]]:
    """(batch position, record) for every data record of a segment file; control batches are skipped."""
    from segment_format.records import iter_batches

    with path.open("rb") as f:
        for position, batch in iter_batches(f, file=str(path)):
            if batch.is_control_batch:
                continue
            for rec in batch.records():
                yield position, _proxy(rec, hints)


def _cut(value: bytes | None, n: int) -> bytes | None:
    if value is None or n < 0:
        return value
    return bytes(value[:n])


def _proxy(rec: Any, hints: RecordIntrospectionHints) -> RecordProxy:
    headers: tuple[Header, ...] = ()
    if hints.access_headers:
        raw = rec.headers or ()
        headers = tuple(
            Header(h.key if hasattr(h, "key") else h[0], h.value if hasattr(h, "value") else h[1])
            for h in raw
        )
    return RecordProxy(
        offset=rec.offset,
        timestamp=rec.timestamp,
        key=_cut(rec.key, hints.access_key_bytes) if hints.access_key_bytes else None,
        value=_cut(rec.value, hints.access_value_bytes) if hints.access_value_bytes else None,
        headers=headers,
    )


def run_policy(
    policy: RecordValidationPolicy, topic: TopicMetadata, path: Path, max_reported: int = 100
) -> tuple[int, list[Violation]]:
    """Apply a policy to every record; returns (violation count, the first `max_reported` violations)."""
    hints = policy.hints()
    count = 0
    reported: list[Violation] = []
    for position, record in iter_records(path, hints):
        try:
            policy.validate(topic, record)
        except InvalidRecordException as exc:
            count += 1
            if len(reported) < max_reported:
                reported.append(Violation(record.offset, position, str(exc)[:300]))
    return count, reported
