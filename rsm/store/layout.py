"""Where a segment's objects live: the object-key layout, part of the stored format (`rsm.stored.layout`).

Kept so the stores and their callers keep importing it from here; the definitions live with the rest of the
format, which must not depend on the stores.
"""

from rsm.stored.layout import (
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    MANIFEST_SUFFIX,
    OBJECT_NAME,
    SEGMENT_SUFFIXES,
    Location,
    SegmentKeys,
    is_tiered_object,
    partition_dir,
)

__all__ = [
    "INDEXES_SUFFIX",
    "LOG_SUFFIX",
    "MANIFEST_SUFFIX",
    "OBJECT_NAME",
    "SEGMENT_SUFFIXES",
    "Location",
    "SegmentKeys",
    "is_tiered_object",
    "partition_dir",
]
