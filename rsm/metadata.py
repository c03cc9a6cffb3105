"""Deprecated path of Kafka's segment metadata types, which live in `rsm.api.metadata` (the common ones are
exported by `rsm` itself). Every name still resolves here, with a DeprecationWarning naming its new path."""

from rsm.api.moved import moved_names

_NAMES = (
    "CustomMetadata",
    "IndexType",
    "InvalidArgumentException",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "TopicIdPartition",
    "is_int",
    "to_uuid",
    "topic_problem",
    "uuid_from_base64",
    "uuid_to_base64",
)

__getattr__, __dir__ = moved_names(__name__, dict.fromkeys(_NAMES, "rsm.api.metadata"))
