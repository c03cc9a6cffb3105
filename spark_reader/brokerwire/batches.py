"""The whole record batches at the start of a Fetch response's records, and the offset after them.

The broker answers a Fetch with a byte range of its log file cut at the size limit
(`max.partition.fetch.bytes`, `fetch.max.bytes`), so the last batch may be partial (a Java consumer
drops it and fetches from its offset again). Here only the batch headers are read: each entry of a log,
a magic 2 batch or a legacy (magic 0/1) message set entry, starts with its base offset (int64) and the
length of the rest (int32), so the entries are walked header to header without touching a record. The
offset after a magic 2 batch is its base offset plus its last offset delta plus one (a compacted batch
may hold fewer records than that span, and the next fetch must still start past it); a legacy entry's
offset is that of its last inner message, so the next is one past it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from segment_format.errors import CorruptRecordError

_ENTRY = struct.Struct(">qi")  # base offset, length of what follows
_LAST_DELTA = struct.Struct(">i")
_LOG_OVERHEAD = 12
_MAGIC_AT = 16  # base offset (8), length (4), partition leader epoch / legacy crc (4)
_LAST_DELTA_AT = 23  # ... magic (1), crc (4), attributes (2)


@dataclass(frozen=True)
class WholeBatches:
    """`size` bytes at the start hold whole entries; `next_offset` is the offset after the last one
    (None when not one entry is whole); `first_offset` is the first entry's base offset (None likewise)."""

    size: int
    next_offset: int | None
    first_offset: int | None
    count: int


def whole_batches(records: bytes | memoryview, where: str = "fetched records") -> WholeBatches:
    """Walk the entry headers of `records`; the bytes past `size` are a partial entry (or nothing).

    A header no log holds (a negative length, a batch too short for its own header) is a
    CorruptRecordError naming `where` and the byte, as the decoder would."""
    n = len(records)
    position, next_offset, first, count = 0, None, None, 0
    unpack_entry, unpack_delta = _ENTRY.unpack_from, _LAST_DELTA.unpack_from
    while position + _LOG_OVERHEAD <= n:
        base, length = unpack_entry(records, position)
        end = position + _LOG_OVERHEAD + length
        if length < 0:
            raise CorruptRecordError(f"entry length {length} at offset {base}", file=where, position=position)
        if end > n:
            break
        if length <= _MAGIC_AT - _LOG_OVERHEAD:
            raise CorruptRecordError(
                f"entry of {length} bytes at offset {base}", file=where, position=position
            )
        if records[position + _MAGIC_AT] >= 2:
            if length < _LAST_DELTA_AT + 4 - _LOG_OVERHEAD:
                raise CorruptRecordError(
                    f"batch of {length} bytes at offset {base}", file=where, position=position
                )
            next_offset = base + unpack_delta(records, position + _LAST_DELTA_AT)[0] + 1
        else:
            next_offset = base + 1
        if first is None:
            first = base
        count += 1
        position = end
    return WholeBatches(position, next_offset, first, count)


@dataclass(frozen=True)
class Cut:
    """The whole batches of a response that may hold offsets below an end: the first `size` bytes; the
    next batch, and every one after it, starts at `next_offset` (>= the end) or later."""

    size: int
    next_offset: int


def cut_at(records: bytes | memoryview, end: int) -> Cut | None:
    """Where the batches of `records` (whole ones, as `whole_batches` left them) stop holding offsets
    below `end`: before the first magic 2 batch whose base offset is `end` or more. None when every
    batch may hold one, or a legacy entry comes first (its header gives its last offset, not its first).

    Why: a Fetch response is cut by bytes, not offsets, so it usually runs past the offsets a task was
    asked for (up to `max.partition.fetch.bytes` more); those batches would be decompressed and
    thrown away (the window), or CRC-checked by a count, for nothing. A Java consumer never touches
    them either: it decompresses a batch only when its records are polled."""
    n = len(records)
    position = 0
    unpack_entry = _ENTRY.unpack_from
    while position + _LOG_OVERHEAD <= n:
        base, length = unpack_entry(records, position)
        if records[position + _MAGIC_AT] < 2:
            return None
        if base >= end:
            return Cut(position, base)
        position += _LOG_OVERHEAD + length
    return None
