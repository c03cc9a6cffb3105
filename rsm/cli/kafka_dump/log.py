"""A `.log` file: batch lines and record lines, from the columnar decoder where it can, else the reference."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from rsm.cli.kafka_dump.common import (
    BATCH_OVERHEAD,
    BOOL_TEXT,
    CODEC_NAMES,
    ENTRY_PREFIX,
    HEADER_SIZE_UP_TO_MAGIC,
    INT_MAX,
    LEGACY_HEADER,
    LOG_OVERHEAD,
    RECORD_OVERHEAD_V0,
    TS_NAMES,
    V2_HEADER,
    DumpError,
    Findings,
    Options,
    base_offset_of,
    increment_sequence,
    java_string,
)
from rsm.cli.kafka_dump.control import control_record_text
from segment_format.crc import crc32c
from segment_format.errors import CorruptRecordError

# ----------------------------------------------------------------------------------------------- .log


@dataclass(slots=True)
class Batch:
    """One entry of the log as Kafka's FileLogInputStream yields it (header fields only)."""

    position: int
    size: int  # whole entry, log overhead included
    magic: int
    fields: tuple  # type: ignore[type-arg]


def iter_entries(data: memoryview, file: str) -> Iterator[Batch]:
    """Kafka's FileLogInputStream: entries until fewer than 17 bytes or a cut-short entry remain."""
    end = len(data)
    pos = 0
    while pos < end - HEADER_SIZE_UP_TO_MAGIC:
        _offset, size = ENTRY_PREFIX.unpack_from(data, pos)
        if size < RECORD_OVERHEAD_V0:
            raise DumpError(
                f"Found record size {size} smaller than minimum record overhead ({RECORD_OVERHEAD_V0}) "
                f"in file {file}."
            )
        if pos > end - LOG_OVERHEAD - size:
            return
        magic = data[pos + 16]
        if magic > 1:
            if size + LOG_OVERHEAD < BATCH_OVERHEAD:
                raise DumpError(f"Record batch at position {pos} of {file} is smaller than its header")
            fields = V2_HEADER.unpack_from(data, pos)
        else:
            fields = LEGACY_HEADER.unpack_from(data, pos)
        yield Batch(pos, size + LOG_OVERHEAD, magic, fields)
        pos += size + LOG_OVERHEAD


def _codec_name(codec: int) -> bytes:
    try:
        return CODEC_NAMES[codec]
    except IndexError:
        raise DumpError(f"Unknown compression type id: {codec}") from None


_V2_LINE = (
    b"baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d "
    b"producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %s isControl: %s deleteHorizonMs: %s "
    b"position: %d %s: %d size: %d magic: 2 compresscodec: %s crc: %d isvalid: %s\n"
)


def v2_batch_line(b: Batch, data: memoryview, position: int) -> bytes:
    base, _len, epoch, _magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count = b.fields
    if bseq == -1:
        last_seq = -1
    elif bseq > INT_MAX - lod:
        last_seq = increment_sequence(bseq, lod)
    else:
        last_seq = bseq + lod
    valid = crc32c(data[b.position + 21 : b.position + b.size]) == crc
    return _V2_LINE % (
        base, base + lod, count, bseq, last_seq, pid, pepoch, epoch, BOOL_TEXT[attrs >> 4 & 1], BOOL_TEXT[attrs >> 5 & 1],
        b"OptionalLong[%d]" % base_ts if attrs & 0x40 else b"OptionalLong.empty",
        position, TS_NAMES[attrs >> 3 & 1], max_ts, b.size,
        CODEC_NAMES[attrs & 7] if attrs & 7 < 5 else _codec_name(attrs & 7), crc, BOOL_TEXT[valid],
    )  # fmt: skip


def _legacy_valid(data: memoryview, position: int, size: int, crc: int) -> bool:
    import zlib

    return (
        size >= LOG_OVERHEAD + RECORD_OVERHEAD_V0 and zlib.crc32(data[position + 16 : position + size]) == crc
    )


def legacy_batch_line(b: Batch, data: memoryview, position: int) -> bytes:
    offset, _size, crc, magic, attrs = b.fields
    if magic == 0:
        ts_type, ts = -1, -1
    else:
        ts_type = attrs >> 3 & 1
        (ts,) = struct.unpack_from(">q", data, b.position + 18)
    valid = _legacy_valid(data, b.position, b.size, crc)
    return (
        b"offset: %d position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d isvalid: %s\n"
        % (offset, position, TS_NAMES[ts_type], ts, b.size, magic, _codec_name(attrs & 7), crc, BOOL_TEXT[valid])
    )  # fmt: skip


def _payload(data: bytes, limit: int | None) -> bytes:
    if limit is not None and len(data) > limit:
        return java_string(data[:limit]) + b"... (%d bytes)" % len(data)
    return java_string(data)


def _contents(key: bytes | None, value: bytes | None, prefix: bytes, limit: int | None) -> bytes:
    out = b""
    if key is not None:
        out = prefix + b"key: " + _payload(key, limit)
        prefix = b" "
    if value is not None:
        out += prefix + b"payload: " + _payload(value, limit)
    return out


class _Gaps:
    """Kafka's non-consecutive offset check of a deep iteration (starts from -1 for each file)."""

    def __init__(self, findings: Findings, name: str) -> None:
        self.last = -1
        self.findings = findings
        self.name = name

    def see(self, offset: int) -> None:
        if offset != self.last + 1:
            self.findings.non_consecutive.setdefault(self.name, {})[self.last] = offset
        self.last = offset


def _slow_records(b: Batch, data: memoryview, file: str, opts: Options, gaps: _Gaps) -> Iterator[bytes]:
    """The record lines of one batch, from the reference decoder (legacy and control batches)."""
    from segment_format.log_entries import parse_batch

    raw = bytes(data[b.position : b.position + b.size])
    try:
        batch = parse_batch(raw, position=b.position, file=file)
        records = batch.records()
    except CorruptRecordError as exc:
        raise DumpError(exc.reason) from None
    legacy_inner = None
    if b.magic < 2 and batch.attributes & 7:  # type: ignore[union-attr]
        legacy_inner = [msg for msg, _raw in batch._inner or ()]  # type: ignore[union-attr]
    ts_name = TS_NAMES[int(batch.timestamp_type)]
    control = batch.is_control_batch
    content_prefix = b"| " if opts.skip_record_metadata else b" "
    for i, r in enumerate(records):
        gaps.see(r.offset)
        line = b""
        if not opts.skip_record_metadata:
            line = b"| offset: %d %s: %d keySize: %d valueSize: %d" % (
                r.offset,
                ts_name,
                r.timestamp,
                -1 if r.key is None else len(r.key),
                -1 if r.value is None else len(r.value),
            )
            if b.magic >= 2:
                line += b" sequence: %d headerKeys: [%s]" % (
                    r.sequence,
                    b",".join(java_string(h.key.encode("utf-8", "surrogateescape")) for h in r.headers),
                )
            else:
                if legacy_inner is not None:
                    msg = legacy_inner[i]
                    inner_raw = batch._inner[i][1]  # type: ignore[union-attr]
                    crc, valid = msg.crc, _legacy_valid(memoryview(inner_raw), 0, len(inner_raw), msg.crc)
                else:
                    crc, valid = batch.crc, batch.is_valid()  # type: ignore[union-attr]
                line += b" isValid: %s crc: %d" % (BOOL_TEXT[valid], crc)
            if control:
                line += control_record_text(r.key, r.value)
        if opts.print_data and not control:
            line += _contents(r.key, r.value, content_prefix, opts.max_payload)
        yield line + b"\n"


def _fast_records(
    batches: list[Batch], data: memoryview, end: int, file: str, opts: Options, gaps: _Gaps
) -> Iterator[bytes] | None:
    """Every line of a magic-2 log from the columnar decoder; None when it cannot be used."""
    try:
        from segment_format.columnar import decode_batches
    except ImportError:  # pragma: no cover - the C kernel is always built
        return None
    try:
        table = decode_batches(data[:end], file=file, verify_crc=False)
    except CorruptRecordError:
        return None  # the reference path prints up to the bad batch, then says what is wrong
    if table.num_rows != sum(b.fields[12] for b in batches):
        return None
    batch_bases = table.column("batch_base_offset").to_pylist()
    row = 0
    for b in batches:  # every batch's rows must be where its count says, before anything is printed
        if b.fields[12] and batch_bases[row] != b.fields[0]:
            return None
        row += b.fields[12]
    return _fast_lines(batches, data, table, opts, gaps)


def _fast_lines(batches, data, table, opts: Options, gaps: _Gaps) -> Iterator[bytes]:  # type: ignore[no-untyped-def]
    offsets = table.column("offset").to_pylist()
    timestamps = table.column("timestamp").to_pylist()
    key_list = table.column("key").to_pylist()
    value_list = table.column("value").to_pylist()
    headers = table.column("headers")
    hoff = headers.offsets.to_pylist()
    hkeys = headers.values.field("key").to_pylist() if hoff and hoff[-1] else []
    bad_keys = any("\ufffd" in k for k in hkeys)
    skip_meta = opts.skip_record_metadata
    print_data = opts.print_data
    limit = opts.max_payload
    content_prefix = b"| " if skip_meta else b" "
    row = 0
    position = 0
    last = gaps.last
    parts: list[bytes] = []
    append = parts.append
    for b in batches:
        if len(parts) > 8192:
            yield b"".join(parts)
            parts.clear()
        append(v2_batch_line(b, data, position))
        position += b.size
        base, attrs, lod, bseq, count = b.fields[0], b.fields[5], b.fields[6], b.fields[11], b.fields[12]
        control = attrs & 0x20
        if control or not opts.deep or (bad_keys and _replaced_header_key(hkeys, hoff, row, count)):
            if opts.deep:  # control records, and header keys Python's UTF-8 decoder replaced
                gaps.last = last
                parts.extend(_slow_records(b, data, "", opts, gaps))
                last = gaps.last
            row += count
            continue
        meta = (
            b"| offset: %d "
            + TS_NAMES[attrs >> 3 & 1]
            + b": %d keySize: %d valueSize: %d sequence: %d headerKeys: [%s]"
        )
        wraps = bseq >= 0 and bseq > INT_MAX - max(lod, count)
        for r in range(row, row + count):
            off = offsets[r]
            if off != last + 1:
                gaps.findings.non_consecutive.setdefault(gaps.name, {})[last] = off
            last = off
            k = key_list[r]
            v = value_list[r]
            if skip_meta:
                line = b""
            else:
                h0, h1 = hoff[r], hoff[r + 1]
                hk = b",".join(x.encode() for x in hkeys[h0:h1]) if h1 > h0 else b""
                if bseq < 0:
                    seq = -1
                elif wraps:
                    seq = increment_sequence(bseq, off - base)
                else:
                    seq = bseq + off - base
                line = meta % (
                    off,
                    timestamps[r],
                    -1 if k is None else len(k),
                    -1 if v is None else len(v),
                    seq,
                    hk,
                )
            if print_data:
                if limit is None and (k is None or k.isascii()) and (v is None or v.isascii()):
                    if k is not None:
                        line += content_prefix + b"key: " + k
                        if v is not None:
                            line += b" payload: " + v
                    elif v is not None:
                        line += content_prefix + b"payload: " + v
                else:
                    line += _contents(k, v, content_prefix, limit)
            append(line + b"\n")
        row += count
    yield b"".join(parts)
    gaps.last = last


def _replaced_header_key(hkeys: list[str], hoff: list[int], row: int, count: int) -> bool:
    return any("\ufffd" in k for k in hkeys[hoff[row] : hoff[row + count]])


def dump_log(
    path: str, out: BinaryIO, opts: Options, findings: Findings, shown_as: str | None = None
) -> None:
    """A ``.log`` file (or a KRaft ``.checkpoint``), as DumpLogSegments.dumpLog prints it."""
    name = os.path.basename(path)
    if name.endswith(".log"):
        out.write(b"Log starting offset: %d\n" % base_offset_of(name))
    with open(path, "rb") as fh:
        whole = fh.read()
    data = memoryview(whole)[: max(0, min(len(whole), opts.max_bytes))]
    dump_log_bytes(data, out, opts, findings, shown_as or os.path.abspath(path), name)


def dump_log_bytes(
    data: memoryview, out: BinaryIO, opts: Options, findings: Findings, abs_name: str, name: str
) -> None:
    """The batch (and record) lines of a log's bytes, then Kafka's trailing-bytes line."""
    batches = list(iter_entries(data, abs_name))
    valid = sum(b.size for b in batches)
    gaps = _Gaps(findings, abs_name)
    lines: Iterator[bytes] | None = None
    if batches and all(b.magic >= 2 for b in batches) and (opts.deep or opts.print_data):
        lines = _fast_records(batches, data, valid, abs_name, opts, gaps)
        if lines is not None:
            out.writelines(lines)
    if lines is None:
        position = 0
        for b in batches:
            line = (v2_batch_line if b.magic >= 2 else legacy_batch_line)(b, data, position)
            out.write(line)
            position += b.size
            if opts.deep or opts.print_data:
                out.write(b"".join(_slow_records(b, data, abs_name, opts, gaps)))
    trailing = len(data) - valid
    if trailing > 0 and opts.max_bytes == INT_MAX:
        out.write(
            b"Found %d invalid bytes at the end of %s\n" % (trailing, name.encode("utf-8", "surrogateescape"))
        )
