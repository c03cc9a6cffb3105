"""What a record validation policy sees and answers: its hints, the topic, records, failures, violations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rsm.api.metadata import TopicIdPartition

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


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


@dataclass(frozen=True)
class Violation:
    offset: int
    position: int
    reason: str
