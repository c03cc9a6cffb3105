"""Record validation during offload: the policy API, its values, the built-in policies, and the
validator that runs a topic's policy over the copy's one read of a segment.

- `api`: `RecordValidationPolicy` (the seed's per-record form), `VectorizedRecordValidationPolicy` (Arrow
  batches), the seed's sample `RequireHeaderValidationPolicy`, `load_policy`;
- `values`: what a policy sees and answers (hints, topic, record proxies, failures, violations);
- `arrow`: records as the Arrow batches a vectorised policy sees;
- `records`: `RecordValidator` over the copy's chunks, the per-record adapter, the counters;
- `builtin`: the policies a topic names by value (`schema-id`, `json`, a header name).

A policy class names itself from here (`rsm.validation.RecordValidationPolicy`), as README shows, and so
does the exception its `validate` raises (`InvalidRecordException`). Names the single module `rsm.validation`
once had (the copy's integrity check, now `rsm.copy.integrity`) resolve with a DeprecationWarning.
"""

from rsm.api.errors import InvalidRecordException
from rsm.api.moved import moved_names
from rsm.validation.api import (
    RecordValidationPolicy,
    RequireHeaderValidationPolicy,
    VectorizedRecordValidationPolicy,
    load_policy,
)
from rsm.validation.values import (
    Failures,
    Header,
    RecordIntrospectionHints,
    RecordProxy,
    TopicMetadata,
    Violation,
)

__all__ = [
    "Failures",
    "Header",
    "InvalidRecordException",
    "RecordIntrospectionHints",
    "RecordProxy",
    "RecordValidationPolicy",
    "RequireHeaderValidationPolicy",
    "TopicMetadata",
    "VectorizedRecordValidationPolicy",
    "Violation",
    "load_policy",
]

__getattr__, __dir__ = moved_names(
    __name__,
    {
        "IntegritySummary": "rsm.copy.integrity",
        "SegmentIntegrityVerifier": "rsm.copy.integrity",
        "read_index": "rsm.copy.integrity",
        "ConfigException": "rsm.api.errors",
        "SegmentIntegrityError": "rsm.api.errors",
        "TopicIdPartition": "rsm.api.metadata",
    },
)
