"""A log-start mark's name and body: how far the RSM's deletes moved a partition's log start.

Why in the stored format: the RSM's delete writes the marks and readers without a broker (the catalog, the
Spark reader) compare the history they find with them, so their shape belongs to neither. When to raise a
mark, and why it is sound, is `rsm.store.log_starts`' story; this module is the format:

    <record dir><topic>-<topicId base64>/_log-start-<partition>-<20-digit offset>
    {"version": 1, "partition": 3, "log_start": 1200, "recorded_ms": 1700000000000}

The name carries the value, so a reader learns every partition's mark from the listing of the record it
makes anyway (no GET), and two writers marking at once never overwrite each other (readers take the
greatest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

LOG_START = "_log-start-"
OFFSET_DIGITS = 20
_MARK = re.compile(re.escape(LOG_START) + r"(\d+)-(\d{20})")


def mark_key(record_dir: str, partition: int, offset: int) -> str:
    """The key of a partition's mark under a topic id's record directory (ending in '/')."""
    return f"{record_dir}{LOG_START}{partition}-{offset:0{OFFSET_DIGITS}d}"


def is_mark(leaf: str) -> bool:
    """Whether a key relative to a topic id's record directory is a log-start mark."""
    return _MARK.fullmatch(leaf) is not None


def parse_marks(record_dir: str, keys: Iterable[str]) -> dict[int, int]:
    """partition -> its greatest mark, from a listing of a topic id's record directory."""
    out: dict[int, int] = {}
    for key in keys:
        if not key.startswith(record_dir):
            continue
        m = _MARK.fullmatch(key[len(record_dir) :])
        if m is None:
            continue
        partition, offset = int(m.group(1)), int(m.group(2))
        out[partition] = max(out.get(partition, offset), offset)
    return out


def mark_body(partition: int, offset: int, recorded_ms: int) -> bytes:
    """The body of a partition's mark (the name says the same, for people and other tools)."""
    doc = {"version": 1, "partition": partition, "log_start": offset, "recorded_ms": recorded_ms}
    return json.dumps(doc, sort_keys=True).encode() + b"\n"
