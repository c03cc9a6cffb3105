"""Record validation during offload (seed 002): the policy API, its values, the built-in policies, and the
validator that runs a topic's policy over the copy's one read of a segment.

- `api`: `RecordValidationPolicy` (the seed's per-record form), `VectorizedRecordValidationPolicy` (Arrow
  batches), the seed's sample `RequireHeaderValidationPolicy`, `load_policy`;
- `values`: what a policy sees and answers (hints, topic, record proxies, failures, violations);
- `arrow`: records as the Arrow batches a vectorised policy sees;
- `records`: `RecordValidator` over the copy's chunks, the per-record adapter, the counters;
- `builtin`: the policies a topic names by value (`schema-id`, `json`, a header name).

A policy class names itself from here (`rsm.validation.RecordValidationPolicy`), as README shows.
"""

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
    "RecordIntrospectionHints",
    "RecordProxy",
    "RecordValidationPolicy",
    "RequireHeaderValidationPolicy",
    "TopicMetadata",
    "VectorizedRecordValidationPolicy",
    "Violation",
    "load_policy",
]
