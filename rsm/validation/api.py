"""Record validation during offload. A broker-level `RecordValidationPolicy` (`record.validation.policy.class.name`;
the built-in policies of `rsm.validation.builtin` when none is named) is applied to the segments of topics whose
`record.validation.policy` (or `unchecked.record.validation.policy`) is set; the topic value is handed to the
policy, which decides what it means (for example, a header every record must carry). Two ways to write one:

* the seed's, per record: `validate(topic, record)` raises `InvalidRecordException`. The copy drives it
  from the columnar decoder's Arrow batches through an adapter (`rsm.validation.records.PerRecordAdapter`)
  that builds a `RecordProxy` per record holding only what the policy's hints ask for;
* vectorised: a `VectorizedRecordValidationPolicy` sees a batch of records as Arrow arrays
  (`validate_records(topic, records) -> Failures | None`) and answers which rows fail and why, with no
  Python work per record.

`hints()` decides the work (`rsm.validation.records`): the decoder materialises only the headers, key bytes
and value bytes the hints name (5 value bytes means 5 bytes per record are copied); a policy that needs no
record content decodes nothing (it is asked once per record batch, see `RecordIntrospectionHints`). On a
violation the topic's `unchecked.rsm.record.validation.on.violation` decides: `fail` refuses the copy (Kafka
retries later), `tier` copies it and lists the violations in the manifest for readers.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rsm.api.errors import ConfigException, InvalidRecordException
from rsm.config.classes import load_class
from rsm.validation.values import Failures, RecordIntrospectionHints, RecordProxy, TopicMetadata

if TYPE_CHECKING:
    import pyarrow as pa


class RecordValidationPolicy(abc.ABC):
    """The record validation policy proposal's broker-side extension point, applied here when segments are tiered."""

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
        built-in selector, `rsm.validation.builtin.BuiltinPolicies`) answers a policy per value, with its own hints;
        a bad value raises `ConfigException`.
        """
        return self

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources at shutdown."""


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
        from rsm.validation.arrow import proxies_to_batch

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
    cls = load_class(class_name, "record.validation.policy.class.name")
    policy = cls()  # type: ignore[operator]
    if not isinstance(policy, RecordValidationPolicy):
        raise ConfigException(
            f"config record.validation.policy.class.name: {class_name} is not a RecordValidationPolicy"
        )
    policy.configure(configs)
    return policy
