"""Value types of Kafka's remote storage API, in Python.

They mirror `org.apache.kafka.server.log.remote.storage` (RemoteLogSegmentMetadata, LogSegmentData, ...)
and `org.apache.kafka.common` (Uuid, TopicIdPartition) so the bridge can map Java objects field by field.
All are frozen dataclasses: Kafka hands the same metadata to later calls after replacing only the custom
metadata (`dataclasses.replace(metadata, custom_metadata=returned)`), and immutability keeps that honest
when many threads share one object.

Each type checks its fields when built and refuses a bad one with `InvalidArgumentException` (a
RemoteStorageException and a ValueError) naming the field: a wrong type (a string offset, `True` for a
partition, None for a file) or a topic name Kafka would not accept. Why here: these objects are the public
API's input, built by the bridge from a broker's request and by tools, and the topic name becomes a
directory of the store, so a name like `../../x` must never get as far as a path.

Ids are `uuid.UUID`. Kafka prints a Uuid as 22 characters of URL-safe base64 without padding; that form is
accepted wherever an id is expected and is how ids print here, so logs read like the broker's.
"""

from __future__ import annotations

import base64
import binascii
import enum
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rsm.api.errors import InvalidArgumentException
from rsm.api.names import topic_problem

__all__ = [
    "CustomMetadata",
    "IndexType",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "TopicIdPartition",
    "uuid_from_base64",
    "uuid_to_base64",
    "to_uuid",
]


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: the 16 bytes as URL-safe base64, no padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_base64(text: str) -> uuid.UUID:
    """Kafka's `Uuid.fromString()`: 22 characters of URL-safe base64 back to the 16-byte id."""
    if len(text) != 22:
        raise ValueError(f"a Kafka Uuid has 22 base64 characters, got {len(text)}: {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not a Kafka base64 Uuid: {text!r}") from exc
    if len(raw) != 16:
        raise ValueError(f"not a Kafka base64 Uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def to_uuid(value: uuid.UUID | str | bytes) -> uuid.UUID:
    """Accept a UUID, Kafka's 22-char base64 form, the canonical 36-char form or 16 raw bytes."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | bytearray):
        if len(value) != 16:
            raise ValueError(f"a raw id is 16 bytes, got {len(value)}")
        return uuid.UUID(bytes=bytes(value))
    if isinstance(value, str):
        if len(value) == 22:
            return uuid_from_base64(value)
        try:
            return uuid.UUID(value)
        except ValueError as exc:
            raise ValueError(f"not an id (Kafka base64 or UUID): {value!r}") from exc
    raise TypeError(f"an id must be a uuid.UUID or a string, got {type(value).__name__}")


def is_int(value: object) -> bool:
    """An int that is not a bool (`True` is an int to Python, never an offset or a position to Kafka)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _id(value: object, what: str) -> uuid.UUID:
    try:
        return to_uuid(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentException(f"{what}: {exc}") from None


def _ints(owner: str, **values: object) -> None:
    for name, value in values.items():
        if not is_int(value):
            raise InvalidArgumentException(f"{owner}: {name} must be an int, got {type(value).__name__}")


@dataclass(frozen=True)
class TopicIdPartition:
    """Kafka's `TopicIdPartition`: topic id, topic name and partition number."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", _id(self.topic_id, "TopicIdPartition.topic_id"))
        problem = topic_problem(self.topic)
        if problem:
            raise InvalidArgumentException(
                f"topic name {self.topic!r} is not a legal Kafka topic name: it {problem}"
            )
        if not is_int(self.partition) or self.partition < 0:
            raise InvalidArgumentException(
                f"TopicIdPartition.partition must be a non-negative int, got {self.partition!r}"
            )

    @property
    def topic_partition(self) -> str:
        """`topic-partition`, as Kafka's `TopicPartition.toString()` prints it."""
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return f"{uuid_to_base64(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoteLogSegmentId:
    """Kafka's `RemoteLogSegmentId`: the partition plus a random id chosen by the broker per copy."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", _id(self.id, "RemoteLogSegmentId.id"))
        if not isinstance(self.topic_id_partition, TopicIdPartition):
            raise InvalidArgumentException(
                "RemoteLogSegmentId.topic_id_partition must be a TopicIdPartition, "
                f"got {type(self.topic_id_partition).__name__}"
            )

    @property
    def id_base64(self) -> str:
        return uuid_to_base64(self.id)

    def __str__(self) -> str:
        return f"{self.topic_id_partition}/{self.id_base64}"


@dataclass(frozen=True)
class CustomMetadata:
    """Opaque bytes an RSM returns from a copy; Kafka stores them with the segment's metadata."""

    value: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.value, bytes | bytearray | memoryview):
            raise InvalidArgumentException(
                f"CustomMetadata.value must be bytes, got {type(self.value).__name__}"
            )
        object.__setattr__(self, "value", bytes(self.value))

    def __len__(self) -> int:
        return len(self.value)


class RemoteLogSegmentState(enum.Enum):
    """Kafka's `RemoteLogSegmentState` (ids as in Kafka: 0..3)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class IndexType(enum.Enum):
    """Kafka's `RemoteStorageManager.IndexType`; values are the Java names, for the bridge's wire form."""

    OFFSET = "OFFSET"
    TIMESTAMP = "TIMESTAMP"
    PRODUCER_SNAPSHOT = "PRODUCER_SNAPSHOT"
    TRANSACTION = "TRANSACTION"
    LEADER_EPOCH = "LEADER_EPOCH"


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """Kafka's `RemoteLogSegmentMetadata`.

    `end_offset` is inclusive (Kafka sets it to the next segment's base offset minus one), and
    `segment_leader_epochs` maps each leader epoch to the first offset it wrote in this segment.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(default_factory=dict)
    custom_metadata: CustomMetadata | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.remote_log_segment_id, RemoteLogSegmentId):
            raise InvalidArgumentException(
                "RemoteLogSegmentMetadata.remote_log_segment_id must be a RemoteLogSegmentId, "
                f"got {type(self.remote_log_segment_id).__name__}"
            )
        seg = self.remote_log_segment_id
        _ints(
            f"metadata of segment {seg}",
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=self.broker_id,
            event_timestamp_ms=self.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
        )
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise InvalidArgumentException(
                f"segment {seg}: offsets must satisfy 0 <= start <= end, "
                f"got start={self.start_offset} end={self.end_offset}"
            )
        if self.segment_size_in_bytes < 0:
            raise InvalidArgumentException(f"segment {seg}: negative size")
        try:
            items = sorted(dict(self.segment_leader_epochs).items())
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentException(f"segment {seg}: segment_leader_epochs: {exc}") from None
        for epoch, offset in items:
            _ints(f"segment {seg}: segment_leader_epochs", epoch=epoch, start_offset=offset)
        object.__setattr__(self, "segment_leader_epochs", dict(items))
        if isinstance(self.custom_metadata, bytes | bytearray):
            object.__setattr__(self, "custom_metadata", CustomMetadata(bytes(self.custom_metadata)))
        if self.custom_metadata is not None and not isinstance(self.custom_metadata, CustomMetadata):
            raise InvalidArgumentException(
                f"segment {seg}: custom_metadata must be CustomMetadata, bytes or None, "
                f"got {type(self.custom_metadata).__name__}"
            )
        if not isinstance(self.state, RemoteLogSegmentState):
            raise InvalidArgumentException(f"segment {seg}: state must be a RemoteLogSegmentState")

    def __hash__(self) -> int:  # the epochs mapping is not hashable; the id identifies a copy
        return hash((self.remote_log_segment_id, self.start_offset, self.end_offset, self.custom_metadata))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True)
class LogSegmentData:
    """Kafka's `LogSegmentData`: the files of one rolled segment, plus the leader-epoch checkpoint bytes.

    `transaction_index` is optional (Kafka passes `Optional<Path>`); `leader_epoch_index` is the content of
    the leader-epoch checkpoint trimmed to this segment, as bytes (a `ByteBuffer` in Java).
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes

    def __post_init__(self) -> None:
        for name in ("log_segment", "offset_index", "time_index", "producer_snapshot_index"):
            object.__setattr__(self, name, _path(name, getattr(self, name)))
        if self.transaction_index is not None:
            object.__setattr__(self, "transaction_index", _path("transaction_index", self.transaction_index))
        if not isinstance(self.leader_epoch_index, bytes | bytearray | memoryview):
            raise InvalidArgumentException(
                f"LogSegmentData.leader_epoch_index must be bytes, got {type(self.leader_epoch_index).__name__}"
            )
        object.__setattr__(self, "leader_epoch_index", bytes(self.leader_epoch_index))


def _path(name: str, value: object) -> Path:
    """A file of `LogSegmentData`: a non-empty str or path (`Path("")` would be the working directory)."""
    if not isinstance(value, str | os.PathLike) or not str(value):
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise InvalidArgumentException(f"LogSegmentData.{name} must be a file path, got {shown}")
    return Path(value)
