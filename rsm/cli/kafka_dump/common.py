"""What every file kind's dump shares: options, findings printed at the end, and Java's text of values
(a file name, a string of bytes, an OptionalLong) as Kafka's DumpLogSegments prints them."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
BATCH_OVERHEAD = 61
RECORD_OVERHEAD_V0 = 14
INT_MAX = 0x7FFFFFFF
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

ENTRY_PREFIX = struct.Struct(">qi")
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
LEGACY_HEADER = struct.Struct(">qiIbb")
INDEX_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
CODEC_NAMES = (b"none", b"gzip", b"snappy", b"lz4", b"zstd")
TS_NAMES = {-1: b"NoTimestampType", 0: b"CreateTime", 1: b"LogAppendTime"}
BOOL_TEXT = (b"false", b"true")


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

    def lines(self, *, kafkas_start: bool = True) -> Iterator[str]:
        """stderr lines in Kafka's order (files in the order they were dumped).

        Kafka's non-consecutive check starts from -1 in every file, so it reports ``-1 is followed by B``
        for any file whose first record is not offset 0 (every segment but a partition's first): not a gap.
        ``kafkas_start=False`` (``--verify``) leaves that pair out; without it the text is Kafka's."""
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
            starts = sorted(a for a in gaps if kafkas_start or a != -1)
            if starts:
                yield f"Non-consecutive offsets in {name}"
                yield from (f"  {a} is followed by {gaps[a]}" for a in starts)


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
