"""Record batches (magic 2), the records and constants legacy magic 0/1 message sets share with them.

Reading a log's entries of any magic is :mod:`segment_format.log_entries` (it sits above this module and
:mod:`segment_format.legacy`, so neither imports the other's reader).

Parsing is lazy: iterating batches decodes only the 61-byte header; :meth:`RecordBatch.records`
decompresses and decodes records on demand. This module is also the pure-Python reference decoder the
columnar fast path is tested against, so it favours clarity, then speed (inlined one-byte varint fast
paths, slotted dataclasses).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .codecs import CompressionType, decompress
from .crc import crc32c
from .errors import CorruptRecordError

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "ControlRecordType",
    "EndTransactionMarker",
    "Header",
    "Record",
    "RecordBatch",
    "TimestampType",
]

LOG_OVERHEAD = 12  # baseOffset int64 + length int32, common to every magic
HEADER_PREFIX = 17  # LOG_OVERHEAD + partitionLeaderEpoch/crc int32 + magic int8
BATCH_HEADER_SIZE = 61
BATCH_OVERHEAD_AFTER_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
MAX_BATCH_SIZE = 0x7FFFFFFF  # a length is an int32; anything larger cannot be written by Kafka

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
ENTRY_PREFIX = struct.Struct(">qiib")
_CODECS = tuple(CompressionType(i) for i in range(len(CompressionType)))


class TimestampType(enum.IntEnum):
    """How a batch's timestamps were assigned (Kafka's ``TimestampType``)."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        """The name Kafka prints: ``NoTimestampType``, ``CreateTime``, ``LogAppendTime``."""
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[self.value]


class ControlRecordType(enum.IntEnum):
    """Type of a control record, from its key (Kafka's ``ControlRecordType``)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def parse(cls, key: bytes | None) -> ControlRecordType:
        """Type of a control record key (``version int16, type int16``); UNKNOWN for unknown types."""
        if key is None or len(key) < 4:
            raise CorruptRecordError(f"control record key too short: {0 if key is None else len(key)} bytes")
        version, type_id = struct.unpack_from(">hh", key, 0)
        if version < 0:
            raise CorruptRecordError(f"invalid control record key version {version}")
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN

    def key_bytes(self, version: int = 0) -> bytes:
        """The record key Kafka writes for this control type."""
        return struct.pack(">hh", version, self.value)


@dataclass(frozen=True, slots=True)
class Header:
    """A record header: a UTF-8 key and a value that may be null."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a consumer sees it (offsets and timestamps absolute).

    ``sequence`` is the producer sequence (-1 when not idempotent); ``size_in_bytes`` the encoded size
    as Kafka counts it (for magic 2 the length varint plus body, for magic 0/1 the whole log entry).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE
    size_in_bytes: int = 0
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The payload of a COMMIT or ABORT control record."""

    control_type: ControlRecordType
    coordinator_epoch: int
    version: int = 0

    @classmethod
    def from_record(cls, record: Record) -> EndTransactionMarker:
        """Decode a commit/abort control record; CorruptRecordError when it is not one."""
        control_type = ControlRecordType.parse(record.key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise CorruptRecordError(
                f"control record at offset {record.offset} is {control_type.name}, not a marker"
            )
        value = record.value
        if value is None or len(value) < 6:
            raise CorruptRecordError(f"end transaction marker at offset {record.offset} has a short value")
        version, epoch = struct.unpack_from(">hi", value, 0)
        if version < 0:
            raise CorruptRecordError(f"invalid end transaction marker version {version}")
        return cls(control_type, epoch, version)

    def key_bytes(self) -> bytes:
        """Control record key."""
        return self.control_type.key_bytes(0)

    def value_bytes(self) -> bytes:
        """Control record value (version 0 + coordinator epoch)."""
        return struct.pack(">hi", self.version, self.coordinator_epoch)


_FieldReaders = tuple[
    Callable[[int], tuple[int, int]],  # varint(p)
    Callable[..., tuple[int, int]],  # zigzag(p, limit, max_bytes=5)
    Callable[[int, int, int, str], tuple["bytes | None", int]],  # nullable_bytes(p, limit, i, what)
]


def _field_readers(buf: bytes, where: str | None, pos_base: int) -> _FieldReaders:
    """The readers of a record's fields over one batch's record bytes: ``(varint, zigzag, nullable_bytes)``,
    closures over ``buf`` (the decoder's loop calls them per field, and a closure's free
    variables are the cheapest state Python looks up). Errors name ``pos_base`` + the index in ``buf``.

    Varints of one or two bytes (almost all of them: lengths below 8 KiB, small deltas) take the short
    path of ``zigzag``; longer ones go through ``raw``. Zigzag decoding is ``(u >> 1) ^ -(u & 1)``.
    """
    end = len(buf)

    def raw(p: int, max_bytes: int) -> tuple[int, int]:
        """Unsigned LEB128 at ``p`` (general case)."""
        result = 0
        shift = 0
        start = p
        for _ in range(max_bytes):
            if p >= end:
                raise CorruptRecordError("truncated varint in record", file=where, position=pos_base + start)
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return (result & 0xFFFFFFFF if max_bytes == 5 else result), p
            shift += 7
        raise CorruptRecordError("varint too long in record", file=where, position=pos_base + start)

    def varint(p: int) -> tuple[int, int]:
        u, p = raw(p, 5)
        return (u >> 1) ^ -(u & 1), p

    def zigzag(p: int, limit: int, max_bytes: int = 5) -> tuple[int, int]:
        """Signed varint at ``p``: one- and two-byte forms inline, below ``limit``; longer ones via raw."""
        b = buf[p] if p < limit else 0x80
        if b < 0x80:
            p += 1
        elif p + 1 < limit and buf[p + 1] < 0x80:
            b = (b & 0x7F) | (buf[p + 1] << 7)
            p += 2
        else:
            b, p = raw(p, max_bytes)
        return (b >> 1) ^ -(b & 1), p

    def nullable_bytes(p: int, limit: int, i: int, what: str) -> tuple[bytes | None, int]:
        """A key or value: zigzag length (-1 = null), then that many bytes, inside the record."""
        n, p = zigzag(p, limit)
        if n < 0:
            return None, p
        if p + n > limit:
            raise CorruptRecordError(
                f"record {i} {what} overruns the record", file=where, position=pos_base + p
            )
        return buf[p : p + n], p + n

    return varint, zigzag, nullable_bytes


def _decode_records(
    buf: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    base_sequence: int,
    where: str | None,
    pos_base: int,
) -> list[Record]:
    """Decode ``count`` v2 records filling exactly ``buf`` (errors name ``pos_base`` + index in buf).

    The record's frame and headers are read here, inline (a call per header costs ~5% on records with
    headers); its varints, key and value through ``_field_readers``.
    """
    end = len(buf)
    pos = 0
    out: list[Record] = []
    append = out.append
    new_record = Record
    new_header = Header
    varint, zigzag, nullable_bytes = _field_readers(buf, where, pos_base)

    def corrupt(message: str, p: int) -> CorruptRecordError:
        return CorruptRecordError(message, file=where, position=pos_base + p)

    for i in range(count):
        rec_start = pos
        length, pos = zigzag(pos, end)
        body_start = pos
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise corrupt(f"record {i} claims {length} bytes but {end - pos} remain", rec_start)
        if length < 6:  # attributes, tsDelta, offsetDelta, keyLen, valueLen, headerCount
            raise corrupt(f"record {i} too short ({length} bytes)", rec_start)
        attributes = buf[pos]
        ts_delta, pos = zigzag(pos + 1, rec_end, 10)  # a varlong
        offset_delta, pos = zigzag(pos, rec_end)
        key, pos = nullable_bytes(pos, rec_end, i, "key")
        value, pos = nullable_bytes(pos, rec_end, i, "value")
        # -- headers
        b = buf[pos] if pos < rec_end else 0x80
        if b < 0x80:
            header_count = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            header_count, pos = varint(pos)
        if header_count < 0:
            raise corrupt(f"record {i} has {header_count} headers", pos)
        if header_count:
            if (
                header_count > rec_end - pos
            ):  # each header takes at least 2 bytes: never loop on a bogus count
                raise corrupt(f"record {i} claims {header_count} headers in {rec_end - pos} bytes", pos)
            headers = []
            for _ in range(header_count):
                hk_len, pos = varint(pos)
                if hk_len < 0 or pos + hk_len > rec_end:
                    raise corrupt(f"record {i} header key length {hk_len} is invalid", pos)
                # Kafka decodes keys leniently (Java replaces bad UTF-8); surrogateescape keeps any bytes
                # round-tripping through the writer instead of refusing a batch Kafka accepts.
                hkey = buf[pos : pos + hk_len].decode("utf-8", "surrogateescape")
                pos += hk_len
                hv_len, pos = varint(pos)
                if hv_len >= 0:
                    if pos + hv_len > rec_end:
                        raise corrupt(f"record {i} header value overruns the record", pos)
                    hval: bytes | None = buf[pos : pos + hv_len]
                    pos += hv_len
                else:
                    hval = None
                headers.append(new_header(hkey, hval))
            header_tuple: tuple[Header, ...] = tuple(headers)
        else:
            header_tuple = ()
        if pos != rec_end:
            raise corrupt(
                f"record {i} declares {length} bytes but its fields take {pos - body_start}", rec_start
            )
        if base_sequence >= 0:
            seq = base_sequence + offset_delta
            if seq > 0x7FFFFFFF:
                seq -= 0x80000000
        else:
            seq = NO_SEQUENCE
        append(
            new_record(
                base_offset + offset_delta,
                log_append_time if log_append_time is not None else base_timestamp + ts_delta,
                key,
                value,
                header_tuple,
                seq,
                pos - rec_start,
                attributes,
            )
        )
    if pos != end:
        raise corrupt(f"{end - pos} bytes left after the batch's {count} records", pos)
    return out


@dataclass(slots=True)
class RecordBatch:
    """One magic-2 record batch: header fields as Kafka's ``DefaultRecordBatch`` names them.

    ``data`` holds the batch's bytes (header included); ``position`` where it starts in ``file``.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    data: bytes = field(repr=False, default=b"")
    position: int = 0
    file: str | None = None

    @classmethod
    def from_bytes(cls, data: bytes, *, position: int = 0, file: str | None = None) -> RecordBatch:
        """Parse a batch header from exactly one batch's bytes (no CRC check: see ensure_valid)."""
        if len(data) < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch of {len(data)} bytes is shorter than the {BATCH_HEADER_SIZE}-byte header",
                file=file,
                position=position,
            )
        fields = _HEADER.unpack_from(data, 0)
        if fields[3] != 2:
            raise CorruptRecordError(
                f"unexpected magic {fields[3]} for a v2 record batch", file=file, position=position
            )
        if fields[1] + LOG_OVERHEAD != len(data):
            raise CorruptRecordError(
                f"batch length {fields[1]} does not match the {len(data) - LOG_OVERHEAD} bytes given",
                file=file,
                position=position,
            )
        return cls(*fields, data=data, position=position, file=file)

    # -- attributes
    @property
    def compression_type(self) -> CompressionType:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        try:
            return _CODECS[codec]  # a tuple index: this runs once per batch on every scan
        except IndexError:
            raise CorruptRecordError(
                f"unknown compression codec id {codec}",
                file=self.file,
                position=self.position + ATTRIBUTES_OFFSET,
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon set by the log cleaner (held in baseTimestamp), or None."""
        return self.base_timestamp if self.has_delete_horizon else None

    # -- offsets and sizes
    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping like Kafka), or -1."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        seq = self.base_sequence + self.last_offset_delta
        return seq - 0x80000000 if seq > 0x7FFFFFFF else seq

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    # -- validation
    def compute_checksum(self) -> int:
        """CRC-32C over attributes..end, as stored in the header."""
        return crc32c(memoryview(self.data)[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        """True when the size is sane and the stored CRC matches."""
        return self.size_in_bytes >= BATCH_HEADER_SIZE and self.compute_checksum() == self.crc

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError naming file and byte unless the batch is intact."""
        if self.size_in_bytes < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch size {self.size_in_bytes} is below the minimum {BATCH_HEADER_SIZE}",
                file=self.file,
                position=self.position,
            )
        if self.record_count < 0:
            raise CorruptRecordError(
                f"invalid record count {self.record_count}", file=self.file, position=self.position + 57
            )
        computed = self.compute_checksum()
        if computed != self.crc:
            raise crc_mismatch(
                f"record batch at offset {self.base_offset}",
                "CRC-32C",
                self.crc,
                computed,
                self.file,
                self.position,
            )

    # -- records
    def records(self) -> list[Record]:
        """Decoded records (decompressing when needed); CorruptRecordError on malformed content."""
        count = self.record_count
        if count < 0:
            raise CorruptRecordError(
                f"invalid record count {count}", file=self.file, position=self.position + 57
            )
        if count == 0:
            # Kafka's DefaultRecordBatch.iterator() never reads an empty batch's payload (compaction can
            # leave one), so neither do we: whatever bytes follow the header are not records.
            return []
        codec = self.compression_type
        payload = memoryview(self.data)[BATCH_HEADER_SIZE:]
        if codec is CompressionType.NONE:
            buf = bytes(payload)
            pos_base = self.position + BATCH_HEADER_SIZE
        else:
            try:
                buf = decompress(codec, payload, magic=2)
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"batch at offset {self.base_offset}: {exc.reason}",
                    file=self.file,
                    position=self.position + BATCH_HEADER_SIZE,
                ) from None
            pos_base = self.position + BATCH_HEADER_SIZE  # positions inside decompressed data are approximate
        # Every record takes at least 7 bytes, so a count beyond that is impossible (and never allocated).
        if count * 7 > len(buf):
            raise CorruptRecordError(
                f"record count {count} cannot fit in {len(buf)} bytes of records",
                file=self.file,
                position=self.position + 57,
            )
        log_append = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        return _decode_records(
            buf,
            count,
            self.base_offset,
            self.base_timestamp,
            log_append,
            self.base_sequence,
            self.file,
            pos_base,
        )

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def control_type(self) -> ControlRecordType | None:
        """For a control batch, the type of its (first) control record; None for data batches."""
        if not self.is_control_batch:
            return None
        recs = self.records()
        if not recs:
            return None
        return ControlRecordType.parse(recs[0].key)


def crc_mismatch(
    what: str, kind: str, stored: int, computed: int, file: str | None, position: int
) -> CorruptRecordError:
    """The one wording of a checksum fault (batches, legacy messages, inner messages of a wrapper)."""
    return CorruptRecordError(
        f"{what} is corrupt: {kind} mismatch, stored crc = {stored}, computed crc = {computed}",
        file=file,
        position=position,
    )
