"""The argument checks of the RemoteStorageManager's operations.

Every public operation checks the types of its arguments first and refuses a wrong one with
`InvalidArgumentException` naming it (a RemoteStorageException, so Kafka and the bridge see their own
exception rather than a TypeError from deep inside, and `True` is not taken for position 1).
"""

from __future__ import annotations

from collections.abc import Mapping

from rsm.api.errors import InvalidArgumentException
from rsm.api.metadata import IndexType, LogSegmentData, RemoteLogSegmentMetadata, is_int


def check_call(metadata: object, log_config: object) -> None:
    """The arguments every operation takes are of the right types."""
    if not isinstance(metadata, RemoteLogSegmentMetadata):
        raise InvalidArgumentException(
            f"metadata must be a RemoteLogSegmentMetadata, got {type(metadata).__name__}"
        )
    if log_config is not None and not isinstance(log_config, Mapping):
        raise InvalidArgumentException(
            f"log_config must be a mapping of topic configs or None, got {type(log_config).__name__}"
        )


def check_segment_data(segment_data: object) -> None:
    if not isinstance(segment_data, LogSegmentData):
        raise InvalidArgumentException(
            f"segment_data must be a LogSegmentData, got {type(segment_data).__name__}"
        )


def check_positions(metadata: RemoteLogSegmentMetadata, start_position: object, end_position: object) -> None:
    """Both positions are ints (`end_position` may be None). Once per Kafka fetch: two plain tests."""
    if not is_int(start_position):
        raise _not_a_position("start_position", start_position, metadata)
    if end_position is not None and not is_int(end_position):
        raise _not_a_position("end_position", end_position, metadata)


def _not_a_position(name: str, value: object, metadata: RemoteLogSegmentMetadata) -> InvalidArgumentException:
    return InvalidArgumentException(
        f"{name} must be an int, got {type(value).__name__} (fetch of segment {metadata.remote_log_segment_id})"
    )


def index_type_of(metadata: RemoteLogSegmentMetadata, index_type: object) -> IndexType:
    """An IndexType, or its name (`"OFFSET"`) as the bridge passes Kafka's enum."""
    if isinstance(index_type, IndexType):
        return index_type
    if not isinstance(index_type, str) or index_type not in IndexType.__members__:
        raise InvalidArgumentException(
            f"index_type must be an IndexType or one of its names ({', '.join(IndexType.__members__)}), "
            f"got {index_type!r} (segment {metadata.remote_log_segment_id})"
        )
    return IndexType[index_type]
