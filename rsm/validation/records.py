"""Record validation over the copy's one read of a segment (record validation during offload).

The copy reads a segment once, chunk by chunk (`RemoteStorageManager._verify`). Every chunk goes first to the
integrity check (`rsm.validation.SegmentIntegrityVerifier`: headers, offsets, CRC-32C of each batch as
stored, indexes) and then, when the topic has a policy, to a `RecordValidator` here, which decodes the same
bytes with the columnar C kernel (`segment_format.columnar.ChunkDecoder`) into Arrow batches and hands them
to the policy.

Decompressed once: the integrity check of a compressed batch is its CRC-32C, which covers the compressed
bytes as stored, so it never decompresses; the decoder is the only place a batch is decompressed, and it
skips the CRC (already checked over the very same bytes of the same buffer). Control batches are neither
decompressed nor decoded (policies never see transaction markers).

The hints decide the work: they become the decoder's `Projection` (`projection_for`): headers only, no key
or value column; 5 value bytes, 5 bytes per record copied; nothing, no decode at all (the policy is asked
once per record batch, from the batch headers the integrity check has already read).

Policies written the seed's way (`validate(topic, record)` per record) are driven through
`PerRecordAdapter`, which builds a `RecordProxy` per record from the Arrow columns, holding only the fields
the hints ask for; vectorised policies (`VectorizedRecordValidationPolicy`) get the batches as they are.

Counters: every validated copy adds to its topic's `ValidationStats` (segments validated, records checked,
violations, seconds spent in decoding and policy), which the RemoteStorageManager exposes with
`validation_stats()` and logs once per copy.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from itertools import repeat

import pyarrow as pa
import pyarrow.compute as pc

from rsm.api.errors import InvalidRecordException, RemoteStorageException, SegmentIntegrityError
from rsm.validation.api import RecordValidationPolicy, VectorizedRecordValidationPolicy
from rsm.validation.arrow import BATCH_ROW_SCHEMA, projection_for
from rsm.validation.values import (
    Failures,
    Header,
    RecordIntrospectionHints,
    RecordProxy,
    TopicMetadata,
    Violation,
)
from segment_format.columnar import ChunkDecoder
from segment_format.errors import CorruptRecordError
from segment_format.log_entries import AnyRecordBatch

MAX_REPORTED = 100  # violations listed in a report (all are counted)
REASON_CHARS = 300


class PerRecordAdapter:
    """Drives a seed-style policy (`validate(topic, record)`) from Arrow batches: one RecordProxy per row,
    holding only what the policy's hints ask for (the rest stays None / empty), converted column by column
    rather than row by row."""

    def __init__(self, policy: RecordValidationPolicy, hints: RecordIntrospectionHints) -> None:
        self.policy = policy
        self.hints = hints

    def __call__(self, topic: TopicMetadata, records: pa.RecordBatch) -> Failures | None:
        n = records.num_rows
        names = records.schema.names
        offsets = records.column("offset").to_pylist()
        timestamps = records.column("timestamp").to_pylist()
        keys: Iterable[bytes | None] = records.column("key").to_pylist() if "key" in names else repeat(None)
        values: Iterable[bytes | None] = (
            records.column("value").to_pylist() if "value" in names else repeat(None)
        )
        headers: Iterable[tuple[Header, ...]] = repeat(())
        if "headers" in names:
            column = records.column("headers")
            flat = column.flatten()
            hkeys, hvalues = flat.field("key").to_pylist(), flat.field("value").to_pylist()
            bounds = column.offsets.to_pylist()
            first = bounds[0]
            all_headers = [Header(k, v) for k, v in zip(hkeys, hvalues, strict=True)]
            headers = (tuple(all_headers[bounds[i] - first : bounds[i + 1] - first]) for i in range(n))
        validate = self.policy.validate
        rows: list[int] = []
        reasons: list[str] = []
        for i, (offset, ts, key, value, hs) in enumerate(
            zip(offsets, timestamps, keys, values, headers, strict=False)
        ):
            try:
                validate(topic, RecordProxy(offset, ts, key, value, hs))
            except InvalidRecordException as exc:
                rows.append(i)
                reasons.append(str(exc))
        return Failures(rows, reasons) if rows else None


@dataclass
class ValidationResult:
    """One segment's validation: records checked, violations (all counted, the first MAX_REPORTED
    listed), seconds spent decoding and in the policy."""

    policy: str
    records: int = 0
    violation_count: int = 0
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0


class RecordValidator:
    """Validates the records of one segment from the chunks the copy reads (see the module docstring).

    Give its `on_batch` (None unless the policy reads nothing of a record) to the integrity check, feed it
    every chunk right after the check has seen it; `finish()` gives the result (the batch positions of
    the violations listed are found then, by a walk of the batch headers: nothing is kept per batch). Malformed records (which the integrity check of headers and CRCs
    cannot see) raise `SegmentIntegrityError`, as a corrupt batch does.
    """

    def __init__(
        self,
        policy: RecordValidationPolicy,
        topic: TopicMetadata,
        file: str,
        *,
        max_reported: int = MAX_REPORTED,
    ) -> None:
        self.policy = policy
        self.topic = topic
        self.file = file
        self.max_reported = max_reported
        self.hints = policy.hints()
        self.projection = projection_for(self.hints)
        self.batch_level = not self.hints.needs_records
        self._check = (
            policy.validate_records
            if isinstance(policy, VectorizedRecordValidationPolicy)
            else PerRecordAdapter(policy, self.hints)
        )
        self._decoder = (
            None
            if self.batch_level
            else ChunkDecoder(file=file, verify_crc=False, projection=self.projection)
        )
        self.result = ValidationResult(topic.validation_policy)
        # the integrity check's hook: needed only by a policy that reads nothing of a record, whose rows
        # are the batches themselves (others find a violation's batch position at the end, if any)
        self.on_batch: Callable[[AnyRecordBatch], None] | None = self._on_batch if self.batch_level else None
        self._rows: list[tuple[int, int, int, int]] = []  # batch-level rows: base, max ts, last, count
        self._row_positions: dict[int, int] = {}  # base offset -> position, of the batches in _rows

    def _on_batch(self, batch: AnyRecordBatch) -> None:
        if batch.magic == 2 and batch.is_control_batch:
            return
        count = batch.record_count if batch.magic == 2 else len(batch.records())
        if count:
            self._rows.append((batch.base_offset, batch.max_timestamp, batch.last_offset, count))
            self._row_positions[batch.base_offset] = batch.position

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """The chunk the integrity check has just seen (same bytes, same order)."""
        started = time.perf_counter()
        try:
            if self._decoder is None:
                if self._rows:
                    base, ts, last, count = zip(*self._rows, strict=True)
                    self._run(pa.RecordBatch.from_arrays([pa.array(c, pa.int64()) for c in (base, ts, last, count)],
                                                         schema=BATCH_ROW_SCHEMA))  # fmt: skip
                    self._rows.clear()
            else:
                try:
                    decoded = self._decoder.feed(chunk)
                except CorruptRecordError as exc:
                    raise _corrupt(exc, self.file) from None
                for records in decoded:
                    self._run(records)
        finally:
            self._row_positions.clear()
            self.result.seconds += time.perf_counter() - started

    def finish(self) -> ValidationResult:
        started = time.perf_counter()
        if self._decoder is not None:
            try:
                for records in self._decoder.finish():
                    self._run(records)
            except CorruptRecordError as exc:
                raise _corrupt(exc, self.file) from None
        unplaced = [v.offset for v in self.result.violations if v.position < 0]
        if unplaced:
            where = batch_positions(self.file, unplaced)
            self.result.violations = [
                v if v.position >= 0 else Violation(v.offset, where.get(v.offset, -1), v.reason)
                for v in self.result.violations
            ]
        self.result.seconds += time.perf_counter() - started
        return self.result

    def _run(self, records: pa.RecordBatch) -> None:
        n = records.num_rows
        if not n:
            return
        self.result.records += int(pc.sum(records.column("record_count")).as_py()) if self.batch_level else n
        try:
            failures = self._check(self.topic, records)
        except InvalidRecordException as exc:
            raise RemoteStorageException(
                f"record validation policy {type(self.policy).__name__} raised InvalidRecordException from "
                f"validate_records (it should answer Failures): {exc}"
            ) from exc
        if failures is None or not len(failures):
            return
        rows = [
            int(r)
            for r in (failures.rows.to_pylist() if isinstance(failures.rows, pa.Array) else failures.rows)
        ]
        if rows[0] < 0 or max(rows) >= n:
            raise RemoteStorageException(
                f"record validation policy {type(self.policy).__name__} answered rows outside the "
                f"{n}-row batch it was given"
            )
        counts = records.column("record_count").to_pylist() if self.batch_level else None
        self.result.violation_count += sum(counts[r] for r in rows) if counts else len(rows)
        room = self.max_reported - len(self.result.violations)
        if room <= 0:
            return
        offsets = records.column("offset")
        for j, row in enumerate(rows[:room]):
            offset = offsets[row].as_py()
            reason = failures.reason(j)[:REASON_CHARS]
            position = self._row_positions.get(offset, -1)  # batch-level rows; the rest found at the end
            self.result.violations.append(Violation(offset, position, reason))


def batch_positions(file: str, offsets: Iterable[int]) -> dict[int, int]:
    """{offset: file position of the batch holding it} for the given offsets, walking the batch headers
    of a (verified) segment file; run only when violations were found, for their report."""
    wanted = sorted(set(offsets))
    out: dict[int, int] = {}
    if not wanted:
        return out
    i, position, previous_last = 0, 0, -1
    try:
        with open(file, "rb") as f:
            while i < len(wanted):
                f.seek(position)
                head = f.read(27)
                if len(head) < 17:
                    break
                offset, length = struct.unpack_from(">qi", head)
                if head[16] == 2 and len(head) == 27:
                    base, last = offset, offset + struct.unpack_from(">i", head, 23)[0]
                else:  # a legacy entry carries its last offset
                    base, last = previous_last + 1, offset
                while i < len(wanted) and wanted[i] <= last:
                    if wanted[i] >= base:
                        out[wanted[i]] = position
                    i += 1
                previous_last = last
                position += 12 + length
    except OSError:
        pass
    return out


def _corrupt(exc: CorruptRecordError, file: str) -> SegmentIntegrityError:
    return SegmentIntegrityError(exc.file or file, 0 if exc.position is None else exc.position, exc.reason)


@dataclass
class TopicValidationStats:
    """One topic's counters since the RSM started."""

    segments: int = 0  # segments validated (tiered or refused)
    records: int = 0  # records checked
    violations: int = 0  # records that failed the policy
    refused: int = 0  # copies refused for violations (`fail`)
    seconds: float = 0.0  # spent decoding and in the policy


class ValidationStats:
    """Per-topic validation counters, safe to update from the copier threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, TopicValidationStats] = {}

    def add(self, topic: str, result: ValidationResult, refused: bool) -> TopicValidationStats:
        """Count one validated segment; returns the topic's totals after it (a copy)."""
        with self._lock:
            stats = self._topics.setdefault(topic, TopicValidationStats())
            stats.segments += 1
            stats.records += result.records
            stats.violations += result.violation_count
            stats.refused += int(refused)
            stats.seconds += result.seconds
            return TopicValidationStats(**asdict(stats))

    def snapshot(self) -> dict[str, dict[str, int | float]]:
        """{topic: {segments, records, violations, refused, seconds}} (plain values, JSON-ready)."""
        with self._lock:
            return {topic: asdict(stats) for topic, stats in sorted(self._topics.items())}
