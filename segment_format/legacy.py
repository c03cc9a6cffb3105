"""Legacy message sets, magic 0 and 1 (Kafka before 0.11), read through the batch API.

A legacy log entry is ``offset int64, size int32, message``; the message is ``crc uint32 (CRC-32 over
magic..end), magic int8, attributes int8, [timestamp int64 if magic 1], key bytes32, value bytes32``.
A compressed message (a "wrapper") holds a whole inner message set, compressed, as its value. Inner
offsets are absolute for magic 0 and relative (0..n-1) for magic 1, where the wrapper's offset is the
absolute offset of the last inner message. Each top-level entry is one :class:`LegacyRecordBatch`,
mirroring Kafka's ``AbstractLegacyRecordBatch``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .codecs import CompressionType, compress, decompress
from .crc import crc32
from .errors import CorruptRecordError
from .records import (
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    TimestampType,
    crc_mismatch,
)

__all__ = ["LegacyRecordBatch", "build_legacy_message", "build_legacy_message_set"]

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TS = struct.Struct(">q")
_LEN = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class _Message:
    offset: int
    size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    position: int  # in the buffer it came from

    @property
    def codec(self) -> int:
        return self.attributes & 0x07


def _parse_message(buf: bytes, pos: int, where: str | None, pos_base: int) -> tuple[_Message, int]:
    """Parse one legacy entry at ``pos``; return it and the position after it."""
    end = len(buf)
    if pos + LOG_OVERHEAD + 6 > end:
        raise CorruptRecordError("truncated legacy message header", file=where, position=pos_base + pos)
    offset, size, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
    if magic not in (0, 1):
        raise CorruptRecordError(
            f"unknown magic {magic} in a legacy message set", file=where, position=pos_base + pos + 16
        )
    minimum = 22 if magic == 1 else 14
    msg_end = pos + LOG_OVERHEAD + size
    if size < minimum:
        raise CorruptRecordError(
            f"message size {size} is below the minimum {minimum}", file=where, position=pos_base + pos + 8
        )
    if msg_end > end:
        raise CorruptRecordError(
            f"truncated legacy message: size {size} but {end - pos - LOG_OVERHEAD} bytes left",
            file=where,
            position=pos_base + pos,
        )
    p = pos + 18
    if magic == 1:
        (timestamp,) = _TS.unpack_from(buf, p)
        p += 8
    else:
        timestamp = NO_TIMESTAMP
    fields: list[bytes | None] = []
    for what in ("key", "value"):
        if p + 4 > msg_end:
            raise CorruptRecordError(f"truncated {what} length", file=where, position=pos_base + p)
        (n,) = _LEN.unpack_from(buf, p)
        p += 4
        if n < 0:
            fields.append(None)
            continue
        if p + n > msg_end:
            raise CorruptRecordError(
                f"{what} length {n} overruns the message", file=where, position=pos_base + p - 4
            )
        fields.append(buf[p : p + n])
        p += n
    if p != msg_end:
        raise CorruptRecordError(
            f"message declares {size} bytes but its fields take {p - pos - LOG_OVERHEAD}",
            file=where,
            position=pos_base + pos,
        )
    return _Message(offset, size, crc, magic, attributes, timestamp, fields[0], fields[1], pos), msg_end


@dataclass(slots=True)
class LegacyRecordBatch:
    """One top-level magic 0/1 entry: a single message or a compressed wrapper of several."""

    offset: int
    size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None = field(repr=False)
    value: bytes | None = field(repr=False)
    data: bytes = field(repr=False, default=b"")
    position: int = 0
    file: str | None = None
    _records: list[Record] | None = field(default=None, repr=False)
    _inner: list[tuple[_Message, bytes]] | None = field(default=None, repr=False)

    @classmethod
    def from_bytes(cls, data: bytes, *, position: int = 0, file: str | None = None) -> LegacyRecordBatch:
        """Parse exactly one legacy entry from its bytes."""
        msg, end = _parse_message(data, 0, file, position)
        if end != len(data):
            raise CorruptRecordError(
                f"legacy entry is {end} bytes but {len(data)} were given", file=file, position=position
            )
        return cls(msg.offset, msg.size, msg.crc, msg.magic, msg.attributes, msg.timestamp, msg.key, msg.value,
                   data, position, file)  # fmt: skip

    # -- the RecordBatch-compatible surface
    @property
    def compression_type(self) -> CompressionType:
        codec = self.attributes & 0x07
        try:
            return CompressionType(codec)
        except ValueError:
            raise CorruptRecordError(
                f"unknown compression codec id {codec}", file=self.file, position=self.position + 17
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType.LOG_APPEND_TIME if self.attributes & 0x08 else TimestampType.CREATE_TIME

    @property
    def is_compressed(self) -> bool:
        return self.attributes & 0x07 != 0

    @property
    def batch_length(self) -> int:
        return self.size

    @property
    def size_in_bytes(self) -> int:
        return self.size + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """First offset: the entry's own offset, or a wrapper's first inner offset (decompresses)."""
        if not self.is_compressed:
            return self.offset
        recs = self.records()
        return recs[0].offset if recs else self.offset

    @property
    def record_count(self) -> int:
        return len(self.records()) if self.is_compressed else 1

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def max_timestamp(self) -> int:
        if self.magic == 0:
            return NO_TIMESTAMP
        return self.timestamp

    @property
    def base_timestamp(self) -> int:
        return self.max_timestamp

    partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
    producer_id = NO_PRODUCER_ID
    producer_epoch = NO_PRODUCER_EPOCH
    base_sequence = NO_SEQUENCE
    last_sequence = NO_SEQUENCE
    is_transactional = False
    is_control_batch = False
    has_delete_horizon = False
    delete_horizon_ms = None
    has_producer_id = False

    def compute_checksum(self) -> int:
        """CRC-32 over magic..end of the message."""
        return crc32(memoryview(self.data)[16:])

    def is_valid(self) -> bool:
        return self.compute_checksum() == self.crc

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless the stored CRC-32 matches."""
        computed = self.compute_checksum()
        if computed != self.crc:
            raise crc_mismatch(
                f"message at offset {self.offset}", "CRC-32", self.crc, computed, self.file, self.position
            )

    def control_type(self) -> None:
        return None

    def ensure_valid_deep(self) -> None:
        """ensure_valid, plus the CRC-32 of every inner message of a compressed wrapper."""
        self.ensure_valid()
        if not self.is_compressed:
            return
        self.records()
        for msg, raw in self._inner or ():
            computed = crc32(memoryview(raw)[16:])
            if computed != msg.crc:
                raise crc_mismatch(
                    f"inner message at offset {msg.offset} of the wrapper at offset {self.offset}",
                    "CRC-32",
                    msg.crc,
                    computed,
                    self.file,
                    self.position,
                )

    def records(self) -> list[Record]:
        """The record(s): itself, or a wrapper's inner messages with absolute offsets."""
        if self._records is None:
            self._records = self._decode()
        return self._records

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.records())

    def _decode(self) -> list[Record]:
        if not self.is_compressed:
            return [
                Record(self.offset, self.max_timestamp, self.key, self.value, (), NO_SEQUENCE, self.size_in_bytes,
                       self.attributes)
            ]  # fmt: skip
        codec = self.compression_type
        if self.value is None:
            raise CorruptRecordError(
                f"compressed wrapper at offset {self.offset} has a null value",
                file=self.file,
                position=self.position,
            )
        try:
            inner = decompress(codec, self.value, magic=self.magic)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"wrapper at offset {self.offset}: {exc.reason}", file=self.file, position=self.position
            ) from None
        messages: list[_Message] = []
        inner_raw: list[bytes] = []
        pos = 0
        where = f"{self.file or '<bytes>'} (inner set of the wrapper at byte {self.position})"
        while pos < len(inner):
            msg, pos = _parse_message(inner, pos, where, 0)
            if msg.codec != 0:
                raise CorruptRecordError(
                    "compressed message nested inside a compressed wrapper", file=where, position=msg.position
                )
            messages.append(msg)
            inner_raw.append(inner[msg.position : pos])
        self._inner = list(zip(messages, inner_raw, strict=True))
        shift = self.offset - messages[-1].offset if self.magic > 0 and messages else 0
        append_time = self.magic > 0 and bool(self.attributes & 0x08)
        out = []
        for m in messages:
            ts = self.timestamp if append_time else (m.timestamp if m.magic > 0 else NO_TIMESTAMP)
            out.append(Record(m.offset + shift, ts, m.key, m.value, (), NO_SEQUENCE, m.size + LOG_OVERHEAD,
                              m.attributes))  # fmt: skip
        return out


def build_legacy_message(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int = 1,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    """One legacy log entry (offset, size, message) with its CRC-32, as Kafka's LegacyRecord writes it."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _TS.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += _LEN.pack(-1)
        else:
            body += _LEN.pack(len(part)) + part
    message = struct.pack(">I", crc32(body)) + bytes(body)
    return struct.pack(">qi", offset, len(message)) + message


def build_legacy_message_set(
    records: list[tuple[bytes | None, bytes | None, int]],
    *,
    base_offset: int = 0,
    magic: int = 1,
    compression: CompressionType = CompressionType.NONE,
    log_append_time: int | None = None,
) -> bytes:
    """A magic 0/1 message set of ``(key, value, timestamp)``: plain, or one compressed wrapper.

    Compressed sets follow Kafka: magic 1 inner offsets are relative and the wrapper takes the last
    absolute offset and the maximum timestamp (or the log-append time with that timestamp type).
    """
    compression = CompressionType(compression)
    ts_attr = 0x08 if (log_append_time is not None and magic == 1) else 0
    if compression is CompressionType.NONE:
        return b"".join(
            build_legacy_message(base_offset + i, k, v, magic=magic, timestamp=ts, attributes=ts_attr)
            for i, (k, v, ts) in enumerate(records)
        )
    if not records:
        raise ValueError("a compressed wrapper needs at least one record")
    inner = b"".join(
        build_legacy_message(i if magic == 1 else base_offset + i, k, v, magic=magic, timestamp=ts)
        for i, (k, v, ts) in enumerate(records)
    )
    wrapper_ts = log_append_time if ts_attr else max(ts for _, _, ts in records)
    return build_legacy_message(
        base_offset + len(records) - 1,
        None,
        compress(compression, inner, magic=magic),
        magic=magic,
        timestamp=wrapper_ts,
        attributes=int(compression) | ts_attr,
    )
