"""Checks run on a segment during copy: integrity (always) and a record validation policy (per topic).

Integrity. `SegmentIntegrityVerifier` is fed the segment's bytes in chunks, as they are read, and checks
every batch: the CRC (CRC-32C over attributes..end for magic 2; CRC-32 over magic..end for the legacy magic
0/1 message sets), header sanity (lengths, record count against the offset delta), offsets strictly
increasing and inside the metadata's [start_offset, end_offset], and that the batches exactly fill a file
of the size the metadata states. Any fault raises `SegmentIntegrityError` naming the file, the byte
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
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c as _crc32c

from rsm.errors import ConfigException, InvalidRecordException, SegmentIntegrityError
from rsm.metadata import TopicIdPartition

log = logging.getLogger(__name__)

_V2_HEADER = 61
_LEGACY_HEADER = 18  # offset, size, crc, magic, attributes
_PROBE = 17  # enough to read the magic byte (at 16 in every format)
_V2 = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordCount
_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


@dataclass
class IntegritySummary:
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
    """Streaming batch-by-batch check of a segment; feed bytes in order, then `finish()`."""

    def __init__(
        self, file: str, start_offset: int, end_offset: int, expected_size: int, chunk_size: int
    ) -> None:
        self.file = file
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.expected_size = expected_size
        self.chunk_size = chunk_size
        self.position = 0  # bytes consumed so far
        self._batch_start = 0
        self._hdr = bytearray()
        self._want = _PROBE
        self._remaining = 0  # body bytes still to read of the current batch
        self._crc = 0
        self._expected_crc = 0
        self._magic = -1
        self._compressed = False
        self._batch_last_offset = -1
        self._last_offset: int | None = None
        self._first_offset: int | None = None
        self._batches = 0
        self._max_ts = -1
        self._magics: set[int] = set()
        chunks = -(-expected_size // chunk_size) if expected_size else 0
        self._compressed_per_chunk = [0] * chunks

    def _fail(self, reason: str, position: int | None = None) -> None:
        raise SegmentIntegrityError(self.file, self._batch_start if position is None else position, reason)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        n = len(mv)
        if self.position + n > self.expected_size:
            self._fail(
                f"file is longer than the {self.expected_size} bytes the metadata states", self.expected_size
            )
        i = 0
        while i < n:
            if self._remaining:
                take = min(self._remaining, n - i)
                part = mv[i : i + take]
                self._crc = (
                    _crc32c.crc32c(part, self._crc) if self._magic == 2 else zlib.crc32(part, self._crc)
                )
                i += take
                self._remaining -= take
                if self._remaining == 0:
                    self._end_batch(self.position + i)
                continue
            take = min(self._want - len(self._hdr), n - i)
            self._hdr += mv[i : i + take]
            i += take
            if len(self._hdr) == self._want:
                self._header(self.position + i)
        self.position += n

    def _header(self, at: int) -> None:
        hdr = self._hdr
        if self._want == _PROBE:
            self._batch_start = at - _PROBE
            magic = hdr[16]
            if magic == 2:
                self._want = _V2_HEADER
            elif magic in (0, 1):
                self._want = _LEGACY_HEADER
            else:
                self._fail(f"unknown magic byte {magic}")
            self._magic = magic
            if at + (self._want - _PROBE) > self.expected_size:
                self._fail("truncated batch header at the end of the file")
            return
        if self._magic == 2:
            (base, length, _epoch, _magic, crc, attrs, last_delta, _bts, max_ts, _pid, _pep, _seq, count) = (
                _V2.unpack_from(hdr)
            )
            if length < _V2_HEADER - 12:
                self._fail(f"batch length {length} is shorter than a batch header")
            if last_delta < 0 or count < 0 or (count > 0 and count > last_delta + 1):
                self._fail(f"record count {count} does not fit last offset delta {last_delta}")
            last = base + last_delta
            self._compressed = (attrs & 0x07) != 0
            self._crc = _crc32c.crc32c(bytes(hdr[21:_V2_HEADER]))
            self._remaining = length + 12 - _V2_HEADER
            self._max_ts = max(self._max_ts, max_ts)
            first = base
        else:
            offset, length, crc, _magic, attrs = _LEGACY.unpack_from(hdr)
            if length < (14 if self._magic == 0 else 22):
                self._fail(f"message size {length} is too small for magic {self._magic}")
            last = first = offset  # a compressed wrapper carries its last inner offset
            self._compressed = (attrs & 0x07) != 0
            self._crc = zlib.crc32(bytes(hdr[16:_LEGACY_HEADER]))
            self._remaining = length + 12 - _LEGACY_HEADER
        end = self._batch_start + length + 12
        if end > self.expected_size:
            self._fail(
                f"batch of {length + 12} bytes runs past the end of the {self.expected_size}-byte file"
            )
        if first < self.start_offset or last > self.end_offset:
            self._fail(
                f"offsets {first}..{last} outside the segment's range {self.start_offset}..{self.end_offset}"
            )
        if self._last_offset is not None and first <= self._last_offset:
            self._fail(f"offset {first} does not follow the previous batch's last offset {self._last_offset}")
        self._expected_crc = crc
        self._batch_last_offset = last
        if self._first_offset is None:
            self._first_offset = first
        self._magics.add(self._magic)
        if self._remaining == 0:
            self._end_batch(at)

    def _end_batch(self, end: int) -> None:
        if self._crc & 0xFFFFFFFF != self._expected_crc:
            kind = "CRC-32C" if self._magic == 2 else "CRC-32"
            self._fail(f"{kind} mismatch: stored {self._expected_crc:#010x}, computed {self._crc:#010x}")
        if self._compressed and self._compressed_per_chunk:
            start, cs = self._batch_start, self.chunk_size
            for chunk in range(start // cs, (end - 1) // cs + 1):
                lo, hi = max(start, chunk * cs), min(end, (chunk + 1) * cs)
                self._compressed_per_chunk[chunk] += hi - lo
        self._last_offset = self._batch_last_offset
        self._batches += 1
        self._hdr = bytearray()
        self._want = _PROBE

    def finish(self) -> IntegritySummary:
        if self.position != self.expected_size:
            self._fail(
                f"file is {self.position} bytes, the metadata states {self.expected_size}", self.position
            )
        if self._hdr or self._remaining:
            self._fail("truncated batch at the end of the file")
        return IntegritySummary(
            size=self.position,
            batches=self._batches,
            first_offset=self._first_offset,
            last_offset=self._last_offset,
            max_timestamp_ms=self._max_ts,
            compressed_bytes_per_chunk=self._compressed_per_chunk,
            magics=self._magics,
        )


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
