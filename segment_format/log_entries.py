"""A log's entries of any magic: :func:`iter_batches` and :func:`parse_batch`.

A log file is a sequence of entries that all start with ``baseOffset int64, length int32`` and carry
their magic byte at byte 16, so :func:`iter_batches` reads a 17-byte prefix, learns the entry's size
and format, then reads just that entry: a segment is never loaded whole. Magic-2 entries become
:class:`~segment_format.records.RecordBatch`; magic 0/1 entries become
:class:`~segment_format.legacy.LegacyRecordBatch` (one top-level message or compressed wrapper), which
offers the same properties and methods. This module sits above both, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Union

from .errors import CorruptRecordError
from .legacy import LegacyRecordBatch
from .records import BATCH_OVERHEAD_AFTER_LENGTH, ENTRY_PREFIX, HEADER_PREFIX, LOG_OVERHEAD, RecordBatch

__all__ = ["AnyRecordBatch", "iter_batches", "parse_batch"]

AnyRecordBatch = Union[RecordBatch, LegacyRecordBatch]  # noqa: UP007 - a runtime alias, for annotations


def parse_batch(data: bytes, *, position: int = 0, file: str | None = None) -> AnyRecordBatch:
    """Parse exactly one log entry (any magic) from its bytes."""
    if len(data) < HEADER_PREFIX:
        raise CorruptRecordError(
            f"log entry of {len(data)} bytes is shorter than {HEADER_PREFIX}", file=file, position=position
        )
    magic = data[16]
    if magic == 2:
        return RecordBatch.from_bytes(data, position=position, file=file)
    if magic in (0, 1):
        return LegacyRecordBatch.from_bytes(data, position=position, file=file)
    raise CorruptRecordError(f"unknown magic {magic}", file=file, position=position + 16)


def check_prefix(prefix: bytes | bytearray | memoryview, position: int, file: str | None) -> int:
    """Validate a 17-byte entry prefix; return the entry's total size."""
    _, length, _, magic = ENTRY_PREFIX.unpack_from(prefix, 0)
    if magic == 2:
        minimum = BATCH_OVERHEAD_AFTER_LENGTH
    elif magic == 1:
        minimum = 22  # crc, magic, attributes, timestamp, key length, value length
    elif magic == 0:
        minimum = 14
    else:
        raise CorruptRecordError(f"unknown magic {magic}", file=file, position=position + 16)
    if length < minimum:
        raise CorruptRecordError(
            f"record size {length} is below the minimum {minimum} for magic {magic}",
            file=file,
            position=position + 8,
        )
    return length + LOG_OVERHEAD


def iter_batches(
    source: bytes | bytearray | memoryview | IO[bytes],
    *,
    file: str | None = None,
    start_position: int = 0,
    strict: bool = True,
) -> Iterator[tuple[int, AnyRecordBatch]]:
    """Yield ``(position, batch)`` for every log entry, reading one entry at a time.

    ``source`` is a bytes-like object or a binary file object (read from ``start_position``; the file
    is never read whole). A bogus length is checked against what is actually there before anything of
    that size is read. With ``strict`` (the default) a truncated final entry raises CorruptRecordError;
    without it iteration stops there, as Kafka's own reader does (a partial batch at the end of a fetch).
    CRCs are not checked here (see ``ensure_valid`` / :class:`~segment_format.segment.LogSegment`).
    """
    if isinstance(source, bytes | bytearray | memoryview):
        yield from _iter_buffer(
            memoryview(source).cast("B") if isinstance(source, memoryview) else source,
            file,
            start_position,
            strict,
        )
        return
    yield from _iter_stream(source, file, start_position, strict)


def _iter_buffer(
    buf: bytes | bytearray | memoryview, file: str | None, pos: int, strict: bool
) -> Iterator[tuple[int, AnyRecordBatch]]:
    end = len(buf)
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_PREFIX:
            if strict:
                raise CorruptRecordError(
                    f"truncated log entry: {remaining} bytes left, a header needs {HEADER_PREFIX}",
                    file=file,
                    position=pos,
                )
            return
        size = check_prefix(bytes(buf[pos : pos + HEADER_PREFIX]), pos, file)
        if size > remaining:
            if strict:
                raise CorruptRecordError(
                    f"truncated log entry: size {size} but only {remaining} bytes left",
                    file=file,
                    position=pos,
                )
            return
        yield pos, parse_batch(bytes(buf[pos : pos + size]), position=pos, file=file)
        pos += size


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    chunks = []
    got = 0
    while got < n:
        chunk = stream.read(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _iter_stream(
    stream: IO[bytes], file: str | None, pos: int, strict: bool
) -> Iterator[tuple[int, AnyRecordBatch]]:
    if file is None:
        file = getattr(stream, "name", None) if isinstance(getattr(stream, "name", None), str) else None
    if pos:
        stream.seek(pos)
    while True:
        prefix = _read_exact(stream, HEADER_PREFIX)
        if not prefix:
            return
        if len(prefix) < HEADER_PREFIX:
            if strict:
                raise CorruptRecordError(
                    f"truncated log entry: {len(prefix)} bytes left, a header needs {HEADER_PREFIX}",
                    file=file,
                    position=pos,
                )
            return
        size = check_prefix(prefix, pos, file)
        # read the rest in bounded chunks: a bogus size costs at most what the file really holds
        rest = _read_exact(stream, size - HEADER_PREFIX)
        if len(rest) < size - HEADER_PREFIX:
            if strict:
                raise CorruptRecordError(
                    f"truncated log entry: size {size} but only {HEADER_PREFIX + len(rest)} bytes left",
                    file=file,
                    position=pos,
                )
            return
        yield pos, parse_batch(prefix + rest, position=pos, file=file)
        pos += size
