"""Seed-style per-record policies, as a user would write them (one record at a time, plain Python)."""

from __future__ import annotations

import json

from rsm.api.errors import InvalidRecordException
from rsm.validation import RecordIntrospectionHints, RecordProxy, RecordValidationPolicy, TopicMetadata


class RequireHeader(RecordValidationPolicy):
    """The seed's sample: a header whose key is the topic's record.validation.policy value."""

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        if not any(h.key == topic.validation_policy for h in record.headers):
            raise InvalidRecordException(f"no header {topic.validation_policy}")

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(access_headers=True, access_key_bytes=0, access_value_bytes=0)


class SchemaId(RecordValidationPolicy):
    """Schema-registry framing; the topic value is `lo-hi` (allowed ids) or empty for any id."""

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        value = record.value
        if value is None:
            return
        if len(value) < 5 or value[0] != 0:
            raise InvalidRecordException("not schema-registry framed")
        schema_id = int.from_bytes(value[1:5], "big", signed=True)
        lo, _, hi = topic.validation_policy.partition("-")
        if hi and not int(lo) <= schema_id <= int(hi):
            raise InvalidRecordException(f"schema id {schema_id} not allowed")

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(access_headers=False, access_key_bytes=0, access_value_bytes=5)


class Json(RecordValidationPolicy):
    """Values are JSON (the standard library's parser, strict about NaN like RFC 8259)."""

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        if record.value is None:
            return
        try:
            json.loads(record.value, parse_constant=_refuse)
        except ValueError as exc:
            raise InvalidRecordException(f"not JSON: {exc}") from None

    def hints(self) -> RecordIntrospectionHints:
        return RecordIntrospectionHints(access_headers=False, access_key_bytes=0, access_value_bytes=-1)


def _refuse(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class Seen(RecordValidationPolicy):
    """Records what it is shown (for tests of the adapter's hints); refuses offsets listed in `refuse`."""

    def __init__(
        self, hints: RecordIntrospectionHints | None = None, refuse: frozenset[int] = frozenset()
    ) -> None:
        self._hints = hints or RecordIntrospectionHints()
        self.refuse = refuse
        self.seen: list[RecordProxy] = []

    def validate(self, topic: TopicMetadata, record: RecordProxy) -> None:
        self.seen.append(record)
        if record.offset in self.refuse:
            raise InvalidRecordException(f"offset {record.offset} refused")

    def hints(self) -> RecordIntrospectionHints:
        return self._hints
