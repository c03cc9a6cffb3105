"""Deprecated path of the RSM's exceptions, which live in `rsm.api.errors`.

A plugin's record validation policy raises `InvalidRecordException`, exported by `rsm.validation`; the
topic policy's `PolicyViolationException` comes from `rsm.policy`. Every name still resolves here, with a
DeprecationWarning naming its new path (`rsm.api.moved`).
"""

from rsm.api.moved import moved_names

_NEW_HOMES = {
    "RemoteStorageException": "rsm.api.errors",
    "InvalidArgumentException": "rsm.api.errors",
    "RemoteResourceNotFoundException": "rsm.api.errors",
    "SegmentIntegrityError": "rsm.api.errors",
    "RecordValidationError": "rsm.api.errors",
    "InvalidRecordException": "rsm.validation",
    "ConfigException": "rsm.api.errors",
}

__getattr__, __dir__ = moved_names(__name__, _NEW_HOMES)
