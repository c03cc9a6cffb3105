"""Deprecated path of the validator that runs a record validation policy over a copy, which lives in
`rsm.validation.records` (records as Arrow batches in `rsm.validation.arrow`, the policy API in
`rsm.validation`). Every name still resolves here, with a DeprecationWarning naming its new path."""

from rsm.api.moved import moved_names

_API = (
    "Failures",
    "Header",
    "InvalidRecordException",
    "RecordIntrospectionHints",
    "RecordProxy",
    "RecordValidationPolicy",
    "TopicMetadata",
    "VectorizedRecordValidationPolicy",
    "Violation",
)
_RECORDS = (
    "MAX_REPORTED",
    "PerRecordAdapter",
    "REASON_CHARS",
    "RecordValidator",
    "TopicValidationStats",
    "ValidationResult",
    "ValidationStats",
    "batch_positions",
)
_ARROW = ("BATCH_ROW_SCHEMA", "Projection", "projection_for", "proxies_to_batch")

__getattr__, __dir__ = moved_names(
    __name__,
    {
        **dict.fromkeys(_API, "rsm.validation"),
        **dict.fromkeys(_RECORDS, "rsm.validation.records"),
        **dict.fromkeys(_ARROW, "rsm.validation.arrow"),
        "RemoteStorageException": "rsm.api.errors",
        "SegmentIntegrityError": "rsm.api.errors",
    },
)
