"""Checks run on a segment during copy: integrity (always) and a record validation policy (per topic).

Integrity. `SegmentIntegrityVerifier` is fed the segment's bytes in chunks, as they are read, and checks
every batch with `segment_format`'s `SegmentVerifier` (the project's one checker of segment bytes): the
CRC (CRC-32C over attributes..end for magic 2; CRC-32 over magic..end for the legacy magic 0/1 message
sets), header sanity (lengths, record count against the offset delta), offsets strictly increasing from the
metadata's start_offset and never past its end_offset, every magic-2 batch's leader epoch one of the
metadata's `segment_leader_epochs`, and that the batches exactly fill a file of the size the metadata
states. Any fault raises `SegmentIntegrityError` naming the file, the byte position of the batch and the
fault. It also counts, per chunk, the bytes of batches that are already compressed, so the copy can skip
compressing those chunks again. The copy runs it over the whole file before uploading anything, so a
corrupt segment never reaches the store.

Index integrity joins it: the segment's offset and time index (the files Kafka hands the copy) are checked
against the batches as they pass (`segment_format.index_check`): every position a batch start inside the
file, every offset inside the batch it points at, every time entry the largest timestamp so far. A bad
index would send Kafka's remote reads to the wrong bytes, so it refuses the copy like a corrupt batch.

Record validation (seed 002). A broker-level `RecordValidationPolicy` (`record.validation.policy.class.name`;
the built-in policies of `rsm.policies` when none is named) is applied to the segments of topics whose
`record.validation.policy` (or `unchecked.record.validation.policy`) is set; the topic value is handed to the
policy, which decides what it means (for example, a header every record must carry). Two ways to write one:

* the seed's, per record: `validate(topic, record)` raises `InvalidRecordException`. The copy drives it
  from the columnar decoder's Arrow batches through an adapter (`rsm.record_validation.PerRecordAdapter`)
  that builds a `RecordProxy` per record holding only what the policy's hints ask for;
* vectorised: a `VectorizedRecordValidationPolicy` sees a batch of records as Arrow arrays
  (`validate_records(topic, records) -> Failures | None`) and answers which rows fail and why, with no
  Python work per record.

`hints()` decides the work (`rsm.record_validation`): the decoder materialises only the headers, key bytes
and value bytes the hints name (5 value bytes means 5 bytes per record are copied); a policy that needs no
record content decodes nothing (it is asked once per record batch, see `RecordIntrospectionHints`). On a
violation the topic's `unchecked.rsm.record.validation.on.violation` decides: `fail` refuses the copy (Kafka
retries later), `tier` copies it and lists the violations in the manifest for readers.
"""

from __future__ import annotations

import abc
import importlib
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rsm.api.errors import ConfigException, InvalidRecordException, SegmentIntegrityError
from rsm.api.metadata import TopicIdPartition
from segment_format.errors import CorruptRecordError
from segment_format.index_check import SegmentIndexChecker
from segment_format.log_entries import AnyRecordBatch
from segment_format.segment import SegmentVerifier

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

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
    # the first batch's max timestamp (Kafka's getFirstBatchTimestamp, what time-based retention reads)
    first_batch_timestamp_ms: int = -1

    @property
    def compressed_batch_bytes(self) -> int:
        return sum(self.compressed_bytes_per_chunk)


class SegmentIntegrityVerifier:
    """Streaming batch-by-batch check of a segment; feed bytes in order, then `finish()`.

    A thin adapter over `segment_format.segment.SegmentVerifier` (the project's one integrity check):
    it fixes the RSM's semantics (offsets inside the metadata's `[start_offset, end_offset]`, magic-2
    batches of the metadata's leader epochs only, the file exactly `expected_size` bytes), has it count
    already-compressed bytes per chunk of `chunk_size`, and turns `CorruptRecordError` into
    `SegmentIntegrityError`.

    Why `end_offset` may lie past the last batch (issue 21): Kafka's RemoteLogManager sets `endOffset` to
    the next segment's base offset minus one. That is the last batch's last offset except where the log
    has a hole at the segment's end: a topic compacted before it was switched to `delete` and tiered keeps
    the holes its cleaner made. Kafka retries a refused copy forever, so refusing those offsets would stop
    the partition from ever tiering again. The offsets between the last batch and `end_offset` hold no
    record in Kafka's log either (a consumer skips them), so the copy accepts them, records both offsets in
    the manifest (`segment.end_offset`, and `integrity.last_offset`, the last batch's last offset), and the
    catalog and readers take that range as compacted away: no rows, no data loss. What stays refused is a
    batch past `end_offset` (the copy would serve offsets Kafka attributes to the next segment) or below
    `start_offset`.

    Why leader epochs (issue 21): a batch's `partitionLeaderEpoch` lies outside its CRC, yet the catalog's
    one-history rule places each offset by the epoch that wrote it. Kafka records every appended batch's
    epoch in its leader-epoch cache, from which it computes `segmentLeaderEpochs`, so a magic-2 batch of
    another epoch is damage (or not this segment's) and is refused, naming its offset. A metadata without
    epochs (never from Kafka, whose `RemoteLogSegmentMetadata` requires them) is not checked.
    """

    def __init__(
        self,
        file: str,
        start_offset: int,
        end_offset: int,
        expected_size: int,
        chunk_size: int,
        *,
        offset_index: bytes | None = None,
        time_index: bytes | None = None,
        offset_index_file: str | None = None,
        time_index_file: str | None = None,
        on_batch: Callable[[AnyRecordBatch], None] | None = None,
        leader_epochs: Collection[int] | None = None,
    ) -> None:
        """`offset_index` / `time_index`: the bytes of the segment's index files, checked against its
        batches (None: not checked); `on_batch` sees every batch once checked (see SegmentVerifier);
        `leader_epochs`: the metadata's `segment_leader_epochs` keys (None or empty: not checked)."""
        self.file = file
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.expected_size = expected_size
        self.chunk_size = chunk_size
        self.position = 0  # bytes consumed so far
        indexes = None
        if offset_index is not None or time_index is not None:
            try:
                indexes = SegmentIndexChecker(
                    start_offset,
                    offset_index=offset_index,
                    time_index=time_index,
                    offset_index_file=offset_index_file,
                    time_index_file=time_index_file,
                )
            except CorruptRecordError as exc:  # an index that does not even parse
                raise _integrity_error(exc, file) from None
        self._verifier = SegmentVerifier(
            file=file,
            expected_start_offset=start_offset,
            expected_end_offset=end_offset,
            exact_end_offset=False,
            total_size=expected_size,
            region_size=chunk_size,
            indexes=indexes,
            on_batch=on_batch,
            leader_epochs=leader_epochs,
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
            first_batch_timestamp_ms=s.first_batch_timestamp,
            compressed_bytes_per_chunk=self._verifier.compressed_bytes_per_region,
            magics=set(s.magics),
        )


def _integrity_error(exc: CorruptRecordError, file: str) -> SegmentIntegrityError:
    return SegmentIntegrityError(exc.file or file, 0 if exc.position is None else exc.position, exc.reason)


# --------------------------------------------------------------------------------------------------------
# Record validation policy (seed 002)


@dataclass(frozen=True)
class RecordIntrospectionHints:
    """Which parts of a record a policy reads. Byte counts: 0 = not needed, -1 = all of it (so do any
    negative count and Java's Long.MAX_VALUE), n = the first n bytes.

    A policy that reads none of them (no headers, 0 key bytes, 0 value bytes) cannot tell the records of a
    batch apart, so nothing is decoded for it: it is asked once per record batch, with a row (or
    RecordProxy) standing for the batch (`offset` its first offset, `timestamp` its largest, and in the
    vectorised form `last_offset` and `record_count`); a failure counts every record of the batch and is
    reported at the batch's first offset.
    """

    access_headers: bool = True
    access_key_bytes: int = -1
    access_value_bytes: int = -1

    @property
    def needs_records(self) -> bool:
        return self.access_headers or self.access_key_bytes != 0 or self.access_value_bytes != 0


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
    """Read-only view of one record; parts the policy's hints exclude are empty (None / no headers)."""

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

    def for_topic(self, topic: TopicMetadata) -> RecordValidationPolicy:
        """The policy that checks this topic's segments (default: this one).

        A broker-level policy whose meaning depends on the topic's `record.validation.policy` value (the
        built-in selector, `rsm.policies.BuiltinPolicies`) answers a policy per value, with its own hints;
        a bad value raises `ConfigException`.
        """
        return self

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources at shutdown."""


@dataclass(frozen=True)
class Failures:
    """What a vectorised policy answers for a batch of records: the rows that fail and why.

    `rows`: row indexes into the batch it was given, ascending (a sequence of ints, a numpy integer array
    or an Arrow integer array). `reasons`: one reason for all of them, or one per row in the same order.
    """

    rows: Sequence[int] | np.ndarray | pa.Array
    reasons: str | Sequence[str]

    @classmethod
    def where(cls, mask: pa.Array | np.ndarray, reasons: str | Sequence[str]) -> Failures | None:
        """The rows where `mask` is true (None when there are none); per-row `reasons` are aligned with
        the batch's rows and picked for the failing ones."""
        import numpy as np
        import pyarrow as pa

        if isinstance(mask, pa.ChunkedArray | pa.Array):
            mask = mask.to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(mask)
        if not len(rows):
            return None
        if not isinstance(reasons, str):
            reasons = [reasons[i] for i in rows]
        return cls(rows, reasons)

    def __len__(self) -> int:
        return len(self.rows)

    def reason(self, i: int) -> str:
        """The reason of the i-th failing row."""
        return self.reasons if isinstance(self.reasons, str) else str(self.reasons[i])


class VectorizedRecordValidationPolicy(RecordValidationPolicy):
    """A policy that sees a batch of records at once, as Arrow arrays.

    `validate_records(topic, records)` gets a `pyarrow.RecordBatch` of data records (control records are
    never shown) with `offset` and `timestamp` (int64) and, as `hints()` ask, `key` and `value` (binary,
    cut to the hinted bytes) and `headers` (list of struct key: string, value: binary), and answers the
    rows that fail (`Failures`) or None. For a policy that reads nothing of a record, rows stand for record
    batches (`RecordIntrospectionHints`) and carry `last_offset` and `record_count` too.

    It is also a seed policy: `validate(topic, record)` runs `validate_records` on a one-row batch.
    """

    @abc.abstractmethod
    def validate_records(self, topic: TopicMetadata, records: pa.RecordBatch) -> Failures | None:
        """The rows of `records` that fail this policy, or None when all pass."""

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        from rsm.record_validation import proxies_to_batch

        failures = self.validate_records(topic, proxies_to_batch([record], self.hints()))
        if failures is not None and len(failures):
            raise InvalidRecordException(failures.reason(0))


class RequireHeaderValidationPolicy(VectorizedRecordValidationPolicy):
    """The seed's sample policy: every record must carry a header named by the topic's policy value.

    Vectorised: the header keys of a whole batch are compared with the name at once, and a row fails when
    none of its headers matched. Reads headers only (no key or value bytes are decoded).
    """

    def __init__(self, key: str | None = None) -> None:
        self.key = key  # None: the topic's record.validation.policy value names it (the seed's way)

    def validate_records(self, topic: TopicMetadata, records: pa.RecordBatch) -> Failures | None:
        import numpy as np
        import pyarrow.compute as pc

        key = self.key if self.key is not None else topic.validation_policy
        headers = records.column("headers")
        n = len(headers)
        has = np.zeros(n, dtype=bool)
        if n:
            keys = headers.flatten().field("key")
            if len(keys):
                matched = pc.filter(pc.list_parent_indices(headers), pc.equal(keys, key))
                has[matched.to_numpy(zero_copy_only=False)] = True
        return Failures.where(
            ~has,
            f"Topic {topic.topic_id_partition.topic} requires records to contain a header with key: {key}",
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


def read_index(source: Path | bytes | None) -> bytes | None:
    """The bytes of an index handed to the copy (a path or bytes); None when absent (not checked here:
    the upload refuses a missing offset or time index)."""
    if source is None or isinstance(source, bytes | bytearray):
        return None if source is None else bytes(source)
    try:
        return Path(source).read_bytes()
    except FileNotFoundError:
        return None
