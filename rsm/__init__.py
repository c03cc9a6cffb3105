"""A tiered-storage RemoteStorageManager for Apache Kafka, in Python.

The public API mirrors Kafka's Java `RemoteStorageManager` in snake_case, extended as the RSM's topic configs proposal does so
every operation receives the topic's `LogConfig` (whose `unchecked.rsm.*` keys pick bucket, prefix,
encryption, compression and chunk size per topic).
"""

from rsm.api.errors import RemoteResourceNotFoundException, RemoteStorageException
from rsm.api.log_config import LogConfig
from rsm.api.metadata import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = [
    "CustomMetadata",
    "IndexType",
    "LogConfig",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "RemoteResourceNotFoundException",
    "RemoteStorageException",
    "RemoteStorageManager",
    "TopicIdPartition",
]


def __getattr__(name: str) -> object:
    # The manager pulls in storage and crypto libraries; importing it lazily keeps `import rsm` (and the
    # CLI's start-up) light for code that needs only the value types.
    if name == "RemoteStorageManager":
        from rsm.manager import RemoteStorageManager

        return RemoteStorageManager
    raise AttributeError(f"module 'rsm' has no attribute {name!r}")
