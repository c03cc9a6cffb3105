"""Deprecated path of the built-in record validation policies, which live in `rsm.validation.builtin` (the
policy API in `rsm.validation`). Every name still resolves here, with a DeprecationWarning naming its new path."""

from rsm.api.moved import moved_names

_API = (
    "Failures",
    "RecordIntrospectionHints",
    "RecordProxy",
    "RecordValidationPolicy",
    "RequireHeaderValidationPolicy",
    "TopicMetadata",
    "VectorizedRecordValidationPolicy",
)
_BUILTIN = (
    "BuiltinPolicies",
    "JsonValuesPolicy",
    "NAMES",
    "SCHEMA_HEADER_BYTES",
    "SchemaIdPolicy",
    "parse_policy",
)

__getattr__, __dir__ = moved_names(
    __name__,
    {
        **dict.fromkeys(_API, "rsm.validation"),
        **dict.fromkeys(_BUILTIN, "rsm.validation.builtin"),
        "ConfigException": "rsm.api.errors",
    },  # fmt: skip
)
