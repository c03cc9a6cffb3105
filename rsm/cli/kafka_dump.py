"""Kafka's ``kafka-dump-log`` text, byte for byte: what ``rsm dump-log`` prints for each file kind.

Every line is the one ``org.apache.kafka.tools.DumpLogSegments`` prints for the same file and flags
(field names, order, ``OptionalLong`` values, Java's ``toString`` of each type), so scripts written
against Kafka's tool read ours unchanged; ``tests/test_dump_log_kafka.py`` diffs the two on the same
files. Payloads are printed as Kafka's default ``StringDecoder`` prints them: the bytes decoded as UTF-8
(malformed input replaced by U+FFFD, as Java's ``new String(bytes, UTF_8)`` does) and written as UTF-8,
nothing escaped, interpreted or cut.

Everything is written as bytes (``out`` is a binary stream). A ``.log`` whose batches are all magic 2 is
printed from the columnar C decoder's output (one pass over the file, no Python object per record);
legacy magic 0/1 entries, control batches and anything the fast path does not recognise go through the
per-batch reference decoder, which prints the same lines.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from segment_format.crc import crc32c
from segment_format.errors import CorruptRecordError

LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
BATCH_OVERHEAD = 61
RECORD_OVERHEAD_V0 = 14
INT_MAX = 0x7FFFFFFF
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

_PREFIX = struct.Struct(">qi")
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEGACY = struct.Struct(">qiIbb")
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_CODEC_NAMES = (b"none", b"gzip", b"snappy", b"lz4", b"zstd")
_TS_NAMES = {-1: b"NoTimestampType", 0: b"CreateTime", 1: b"LogAppendTime"}
_BOOL = (b"false", b"true")


class DumpError(Exception):
    """Kafka's tool would stop here with an exception: the message it would print."""


@dataclass
class Options:
    """DumpLogSegments' flags that change what is printed."""

    print_data: bool = False
    deep: bool = False
    skip_record_metadata: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = INT_MAX
    max_payload: int | None = None  # ours: cut keys and values (never by default)


@dataclass
class Findings:
    """What Kafka's tool prints on stderr after every file: index mismatches, time index errors, gaps."""

    index_mismatches: dict[str, dict[int, int]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, dict[int, int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any((self.index_mismatches, self.time_mismatches, self.time_out_of_order, self.time_not_found))

    def lines(self) -> Iterator[str]:
        """stderr lines in Kafka's order (files in the order they were dumped)."""
        for name, mismatches in self.index_mismatches.items():
            yield f"Mismatches in :{name}"
            for index_offset in sorted(mismatches, reverse=True):
                yield f"  Index offset: {index_offset}, log offset: {mismatches[index_offset]}"
        for name, pairs in self.time_mismatches.items():
            yield f"Found timestamp mismatch in :{name}"
            yield from (f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs)
        for name, pairs in self.time_out_of_order.items():
            yield f"Found out of order timestamp in :{name}"
            yield from (f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs)
        for pairs in self.time_not_found.values():
            yield "The following indexed offsets are not found in the log."
            yield from (f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs)
        for name, gaps in self.non_consecutive.items():
            yield f"Non-consecutive offsets in {name}"
            yield from (f"  {a} is followed by {gaps[a]}" for a in sorted(gaps))


def java_file_name(path: str) -> str:
    """``new File(path).toString()``: repeated and trailing slashes dropped, nothing else changed."""
    while "//" in path:
        path = path.replace("//", "/")
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path


def java_string(data: bytes) -> bytes:
    """``new String(data, UTF_8)`` printed as UTF-8: the bytes themselves unless malformed."""
    if data.isascii():
        return data
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        return java_utf8_decode(data).encode("utf-8", "surrogatepass")


REPLACEMENT = "\ufffd"


def _cont(b: int) -> bool:
    return b & 0xC0 == 0x80


def java_utf8_decode(src: bytes) -> str:
    """Java's ``new String(src, UTF_8)`` for malformed input: where it puts U+FFFD differs from Python's.

    A surrogate encoded in three bytes (ED A0 80) is one replacement in Java and three in Python; a
    sequence cut short by the end of the input is one, and takes the continuation bytes with it. This
    follows the JDK's String UTF-8 decoder branch by branch (only malformed input comes here).
    """
    out: list[str] = []
    n = len(src)
    sp = 0
    while sp < n:
        b1 = src[sp]
        sp += 1
        if b1 < 0x80:
            out.append(chr(b1))
        elif 0xC2 <= b1 <= 0xDF:
            if sp < n:
                b2 = src[sp]
                if not _cont(b2):
                    out.append(REPLACEMENT)
                else:
                    sp += 1
                    out.append(chr(((b1 & 0x1F) << 6) | (b2 & 0x3F)))
                continue
            out.append(REPLACEMENT)
            break
        elif 0xE0 <= b1 <= 0xEF:
            if sp + 1 < n:
                b2, b3 = src[sp], src[sp + 1]
                if (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _cont(b2) or not _cont(b3):
                    out.append(REPLACEMENT)
                    sp += 0 if (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _cont(b2) else 1
                else:
                    sp += 2
                    c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
                    out.append(REPLACEMENT if 0xD800 <= c <= 0xDFFF else chr(c))
                continue
            if sp < n and ((b1 == 0xE0 and src[sp] & 0xE0 == 0x80) or not _cont(src[sp])):
                out.append(REPLACEMENT)
                continue
            out.append(REPLACEMENT)
            break
        elif 0xF0 <= b1 <= 0xF7:
            if sp + 2 < n:
                b2, b3, b4 = src[sp], src[sp + 1], src[sp + 2]
                uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
                if not (_cont(b2) and _cont(b3) and _cont(b4)) or not 0x10000 <= uc <= 0x10FFFF:
                    out.append(REPLACEMENT)
                    if (
                        b1 > 0xF4
                        or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF)
                        or (b1 == 0xF4 and b2 & 0xF0 != 0x80)
                        or not _cont(b2)
                    ):
                        pass
                    elif not _cont(b3):
                        sp += 1
                    else:
                        sp += 2
                else:
                    sp += 3
                    out.append(chr(uc))
                continue
            if b1 > 0xF4 or (
                sp < n
                and (
                    (b1 == 0xF0 and not 0x90 <= src[sp] <= 0xBF)
                    or (b1 == 0xF4 and src[sp] & 0xF0 != 0x80)
                    or not _cont(src[sp])
                )
            ):
                out.append(REPLACEMENT)
                continue
            sp += 1
            out.append(REPLACEMENT)
            if sp < n and not _cont(src[sp]):
                continue
            break
        else:
            out.append(REPLACEMENT)
    return "".join(out)


def optional_long(value: int | None) -> bytes:
    return b"OptionalLong.empty" if value is None else b"OptionalLong[%d]" % value


def increment_sequence(sequence: int, increment: int) -> int:
    """DefaultRecordBatch.incrementSequence: wraps at Integer.MAX_VALUE to 0."""
    if sequence > INT_MAX - increment:
        return increment - (INT_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT_MAX - (decrement - sequence) + 1
    return sequence - decrement


def base_offset_of(name: str) -> int:
    """``Long.parseLong(name.split("\\.")[0])``, as Kafka reads a segment file's base offset."""
    head = name.split(".")[0]
    try:
        if not head or not head.lstrip("+-").isdigit():
            raise ValueError
        return int(head)
    except ValueError:
        raise DumpError(f'For input string: "{head}"') from None


# ----------------------------------------------------------------------------------------------- .log


@dataclass(slots=True)
class _Batch:
    """One entry of the log as Kafka's FileLogInputStream yields it (header fields only)."""

    position: int
    size: int  # whole entry, log overhead included
    magic: int
    fields: tuple  # type: ignore[type-arg]


def iter_entries(data: memoryview, file: str) -> Iterator[_Batch]:
    """Kafka's FileLogInputStream: entries until fewer than 17 bytes or a cut-short entry remain."""
    end = len(data)
    pos = 0
    while pos < end - HEADER_SIZE_UP_TO_MAGIC:
        _offset, size = _PREFIX.unpack_from(data, pos)
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
            fields = _V2_HEADER.unpack_from(data, pos)
        else:
            fields = _LEGACY.unpack_from(data, pos)
        yield _Batch(pos, size + LOG_OVERHEAD, magic, fields)
        pos += size + LOG_OVERHEAD


def _codec_name(codec: int) -> bytes:
    try:
        return _CODEC_NAMES[codec]
    except IndexError:
        raise DumpError(f"Unknown compression type id: {codec}") from None


_V2_LINE = (
    b"baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d "
    b"producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %s isControl: %s deleteHorizonMs: %s "
    b"position: %d %s: %d size: %d magic: 2 compresscodec: %s crc: %d isvalid: %s\n"
)


def v2_batch_line(b: _Batch, data: memoryview, position: int) -> bytes:
    base, _len, epoch, _magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count = b.fields
    if bseq == -1:
        last_seq = -1
    elif bseq > INT_MAX - lod:
        last_seq = increment_sequence(bseq, lod)
    else:
        last_seq = bseq + lod
    valid = crc32c(data[b.position + 21 : b.position + b.size]) == crc
    return _V2_LINE % (
        base, base + lod, count, bseq, last_seq, pid, pepoch, epoch, _BOOL[attrs >> 4 & 1], _BOOL[attrs >> 5 & 1],
        b"OptionalLong[%d]" % base_ts if attrs & 0x40 else b"OptionalLong.empty",
        position, _TS_NAMES[attrs >> 3 & 1], max_ts, b.size,
        _CODEC_NAMES[attrs & 7] if attrs & 7 < 5 else _codec_name(attrs & 7), crc, _BOOL[valid],
    )  # fmt: skip


def _legacy_valid(data: memoryview, position: int, size: int, crc: int) -> bool:
    import zlib

    return (
        size >= LOG_OVERHEAD + RECORD_OVERHEAD_V0 and zlib.crc32(data[position + 16 : position + size]) == crc
    )


def legacy_batch_line(b: _Batch, data: memoryview, position: int) -> bytes:
    offset, _size, crc, magic, attrs = b.fields
    if magic == 0:
        ts_type, ts = -1, -1
    else:
        ts_type = attrs >> 3 & 1
        (ts,) = struct.unpack_from(">q", data, b.position + 18)
    valid = _legacy_valid(data, b.position, b.size, crc)
    return (
        b"offset: %d position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d isvalid: %s\n"
        % (offset, position, _TS_NAMES[ts_type], ts, b.size, magic, _codec_name(attrs & 7), crc, _BOOL[valid])
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


def _slow_records(b: _Batch, data: memoryview, file: str, opts: Options, gaps: _Gaps) -> Iterator[bytes]:
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
    ts_name = _TS_NAMES[int(batch.timestamp_type)]
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
                line += b" isValid: %s crc: %d" % (_BOOL[valid], crc)
            if control:
                line += control_record_text(r.key, r.value)
        if opts.print_data and not control:
            line += _contents(r.key, r.value, content_prefix, opts.max_payload)
        yield line + b"\n"


def _fast_records(
    batches: list[_Batch], data: memoryview, end: int, file: str, opts: Options, gaps: _Gaps
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
            + _TS_NAMES[attrs >> 3 & 1]
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
            for chunk in lines:
                out.write(chunk)
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


# ------------------------------------------------------------------------------------ control records


class _Reader:
    """Kafka's protocol readers for the small control-record messages."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        s = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            self.pos += size

    def compact_array(self, item: Callable[[], dict]) -> list[dict]:  # type: ignore[type-arg]
        n = self.uvarint() - 1
        return [item() for _ in range(max(n, 0))]


def _json(obj: object) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _uuid_text(raw: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def control_record_text(key: bytes | None, value: bytes | None) -> bytes:
    """What DumpLogSegments.printControlRecord appends to a control record's line."""
    if key is None or len(key) < 4:
        raise DumpError(
            f"Invalid value size found for end control record key. Must have at least 4 bytes, but found only {0 if key is None else len(key)}"
        )
    _version, type_id = struct.unpack_from(">hh", key)
    names = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
             5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}  # fmt: skip
    name = names.get(type_id)
    v = value or b""
    if name in ("ABORT", "COMMIT"):
        if len(v) < 6:
            raise DumpError(
                f"Invalid value size found for end transaction marker. Must have at least 6 bytes, but found only {len(v)}"
            )
        _ver, epoch = struct.unpack_from(">hi", v)
        return b" endTxnMarker: %s coordinatorEpoch: %d" % (name.encode(), epoch)
    if name is None:
        return b" controlType: UNKNOWN(%d)" % type_id
    r = _Reader(v)
    version = r.take(">h")
    if name == "LEADER_CHANGE":
        leader = r.take(">i")
        voter = lambda: _voter(r)  # noqa: E731
        doc = {"version": version, "leaderId": leader, "voters": r.compact_array(voter),
               "grantingVoters": r.compact_array(voter)}  # fmt: skip
        return b" LeaderChange: " + _json(doc).encode()
    if name == "SNAPSHOT_HEADER":
        return (
            b" SnapshotHeader "
            + _json({"version": version, "lastContainedLogTimestamp": r.take(">q")}).encode()
        )
    if name == "SNAPSHOT_FOOTER":
        return b" SnapshotFooter " + _json({"version": version}).encode()
    if name == "KRAFT_VERSION":
        return b" KRaftVersion " + _json({"version": version, "kRaftVersion": r.take(">h")}).encode()
    return (
        b" KRaftVoters "
        + _json({"version": version, "voters": r.compact_array(lambda: _voters_entry(r))}).encode()
    )


def _voter(r: _Reader) -> dict:  # type: ignore[type-arg]
    voter = {"voterId": r.take(">i")}
    r.tagged_fields()
    return voter


def _voters_entry(r: _Reader) -> dict:  # type: ignore[type-arg]
    voter_id = r.take(">i")
    directory = _uuid_text(r.data[r.pos : r.pos + 16])
    r.pos += 16

    def endpoint() -> dict:  # type: ignore[type-arg]
        e = {"name": r.compact_string(), "host": r.compact_string(), "port": r.take(">H")}
        r.tagged_fields()
        return e

    endpoints = r.compact_array(endpoint)
    feature = {"minSupportedVersion": r.take(">h"), "maxSupportedVersion": r.take(">h")}
    r.tagged_fields()
    r.tagged_fields()
    return {
        "voterId": voter_id,
        "voterDirectoryId": directory,
        "endpoints": endpoints,
        "kRaftVersionFeature": feature,
    }


# ------------------------------------------------------------------------------------------- indexes


def _index_entries(path: str, size: int) -> list[tuple[int, int]]:
    with open(path, "rb") as fh:
        raw = fh.read()
    n = len(raw) // size
    fmt = _INDEX_ENTRY if size == 8 else _TIME_ENTRY
    return [fmt.unpack_from(raw, i * size) for i in range(n)]


def _first_batch_last_offset(log: memoryview, position: int, limit: int, file: str) -> int | None:
    view = log[position : min(len(log), position + limit)] if position <= len(log) else log[0:0]
    for b in iter_entries(view, file):
        return _last_offset(b, view)
    return None


def _last_offset(b: _Batch, data: memoryview) -> int:
    if b.magic >= 2:
        return b.fields[0] + b.fields[6]
    return b.fields[0]


def _sibling(path: str, suffix: str) -> str:
    name = os.path.basename(path)
    return os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".")[0] + suffix)


def _read_log(path: str) -> memoryview:
    try:
        with open(path, "rb") as fh:
            return memoryview(fh.read())
    except FileNotFoundError:
        raise DumpError(path) from None


def dump_index(
    path: str, out: BinaryIO, opts: Options, findings: Findings, shown_as: str | None = None
) -> None:
    """DumpLogSegments.dumpIndex: entries checked against the sibling .log."""
    base = base_offset_of(os.path.basename(path))
    log = _read_log(_sibling(path, ".log"))
    raw_size = os.path.getsize(path)
    entries = _index_entries(path, 8)
    shown = java_file_name(shown_as or path).encode("utf-8", "surrogateescape")
    if not entries:
        out.write(shown + b" is empty.\n")
        return
    if opts.index_sanity_check:
        last = base + entries[-1][0]
        if last < base:
            raise DumpError(
                f"Corrupt index found, index file ({os.path.abspath(path)}) has non-zero size but the last "
                f"offset is {last} which is less than the base offset {base}."
            )
        if raw_size % 8:
            raise DumpError(
                f"Index file {os.path.basename(path)} is corrupt, found {raw_size} bytes which is neither "
                "positive nor a multiple of 8."
            )
        out.write(shown + b" passed sanity check.\n")
        return
    lines = []
    for i, (rel, position) in enumerate(entries):
        offset = base + rel
        if offset == base and i > 0:
            break
        last = _first_batch_last_offset(log, position, opts.max_message_size, path)
        if last is None:
            raise DumpError(f"index entry {i} ({offset} -> {position}) points at no batch of the log")
        if last != offset:
            findings.index_mismatches.setdefault(os.path.abspath(path), {})[offset] = last
        if not opts.verify_index_only:
            lines.append(b"offset: %d position: %d\n" % (offset, position))
    out.write(b"".join(lines))


def _lookup(entries: list[tuple[int, int]], base: int, target: int) -> int:
    """OffsetIndex.lookup: position of the largest entry with offset <= target, else 0."""
    found = 0
    lo, hi = 0, len(entries) - 1
    if not entries or base + entries[0][0] > target:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if base + entries[mid][0] <= target:
            lo = mid
        else:
            hi = mid - 1
    found = entries[lo][1]
    return found


def _max_record_timestamp(b: _Batch, data: memoryview) -> int:
    from segment_format.log_entries import parse_batch

    batch = parse_batch(bytes(data[b.position : b.position + b.size]), position=b.position)
    return max((r.timestamp for r in batch.records()), default=-1)


def dump_time_index(
    path: str, out: BinaryIO, opts: Options, findings: Findings, shown_as: str | None = None
) -> None:
    """DumpLogSegments.dumpTimeIndex: entries checked against the .index and .log beside it."""
    base = base_offset_of(os.path.basename(path))
    log = _read_log(_sibling(path, ".log"))
    index_path = _sibling(path, ".index")
    if not os.path.exists(index_path):
        raise DumpError(f"{index_path} (No such file or directory)")
    index = _index_entries(index_path, 8)
    entries = _index_entries(path, 12)
    raw_size = os.path.getsize(path)
    shown = java_file_name(shown_as or path).encode("utf-8", "surrogateescape")
    name = os.path.abspath(path)
    if opts.index_sanity_check:
        if entries:
            first_ts, last_ts = entries[0][0], entries[-1][0]
            last_off = base + entries[-1][1]
            if last_ts < first_ts:
                raise DumpError(
                    f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                    f"timestamp is {last_ts} which is less than the first timestamp {first_ts}"
                )
            if last_off < base:
                raise DumpError(
                    f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                    f"offset is {last_off} which is less than the first offset {base}"
                )
        if raw_size % 12:
            raise DumpError(
                f"Time index file {os.path.basename(path)} is corrupt, found {raw_size} bytes which is neither "
                "positive nor a multiple of 12."
            )
        out.write(shown + b" passed sanity check.\n")
        return
    prev = -1
    lines = []
    for i, (ts, rel) in enumerate(entries):
        offset = base + rel
        if offset == base and i > 0:
            break
        position = _lookup(index, base, offset)
        view = log[position:]
        match = None
        for b in iter_entries(view, name):
            if _last_offset(b, view) >= offset:
                match = b
                break
        if match is None:
            findings.time_not_found.setdefault(name, []).append((offset, -1))
        elif _last_offset(match, view) != offset:
            findings.time_not_found.setdefault(name, []).append((offset, _last_offset(match, view)))
        else:
            max_ts = max(-1, _max_record_timestamp(match, view))
            if max_ts != ts:
                findings.time_mismatches.setdefault(name, []).append((ts, max_ts))
            if prev >= ts:
                findings.time_out_of_order.setdefault(name, []).append((ts, prev))
        if not opts.verify_index_only:
            lines.append(b"timestamp: %d offset: %d\n" % (ts, offset))
        prev = ts
    out.write(b"".join(lines))


def dump_txn_index(path: str, out: BinaryIO) -> None:
    from segment_format import TransactionIndex

    lines = [
        b"version: 0 producerId: %d firstOffset: %d lastOffset: %d lastStableOffset: %d\n"
        % (a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)
        for a in TransactionIndex.read(path)
    ]
    out.write(b"".join(lines))


def dump_producer_snapshot(path: str, out: BinaryIO, err: BinaryIO) -> None:
    from segment_format import ProducerSnapshot

    try:
        entries = list(ProducerSnapshot.read(path))
    except CorruptRecordError as exc:
        err.write(exc.reason.encode() + b"\n")
        return
    for e in entries:
        line = (
            b"producerId: %d producerEpoch: %d coordinatorEpoch: %d currentTxnFirstOffset: %s lastTimestamp: %d"
            % (e.producer_id, e.producer_epoch, e.coordinator_epoch,
               optional_long(e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None), e.timestamp)
        )  # fmt: skip
        if e.last_offset >= 0:
            line += b" firstSequence: %d lastSequence: %d lastOffset: %d offsetDelta: %d timestamp: %d" % (
                decrement_sequence(e.last_sequence, e.offset_delta), e.last_sequence, e.last_offset,
                e.offset_delta, e.timestamp)  # fmt: skip
        out.write(line + b"\n")


def dump_leader_epoch_checkpoint(path: str, out: BinaryIO) -> None:
    """Ours (Kafka's tool does not read it): one ``epoch: E startOffset: O`` line per entry."""
    from segment_format import LeaderEpochCheckpoint

    out.write(
        b"".join(
            b"epoch: %d startOffset: %d\n" % (e.epoch, e.start_offset)
            for e in LeaderEpochCheckpoint.read(path)
        )
    )
