"""Writing record batches and whole segments the way Kafka's producer and broker write them.

:func:`build_batch` encodes records into one batch (magic 2, or a legacy magic 0/1 message set), as
Kafka's ``MemoryRecordsBuilder`` does; :func:`build_control_batch` writes COMMIT/ABORT markers;
:class:`SegmentWriter` appends batches to ``<base>.log`` and keeps the ``.index``/``.timeindex`` (and
``.txnindex`` for aborted transactions) exactly as ``LogSegment`` would for the same appends.

Records are given either as :class:`~segment_format.records.Record` (its ``offset`` fixes the offset
delta, so compacted gaps can be written; its headers, key, value and timestamp are used) or as tuples
``(key, value, headers, timestamp)`` where headers are :class:`Header` or ``(str, bytes | None)`` pairs
and offsets follow each other from ``base_offset``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from .codecs import CompressionType, compress
from .crc import crc32c
from .errors import CorruptRecordError
from .indexes import DEFAULT_INDEX_INTERVAL_BYTES, IndexBuilder
from .legacy import build_legacy_message_set
from .log_entries import iter_batches
from .records import (
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
    Header,
    Record,
    TimestampType,
)
from .transaction_index import AbortedTxn, TransactionIndex
from .varint import write_varint, write_varlong

__all__ = ["RecordInput", "SegmentWriter", "build_batch", "build_control_batch", "encode_record"]

log = logging.getLogger(__name__)

HeaderInput = Union[Header, tuple[str, bytes | None]]  # noqa: UP007
RecordInput = Union[Record, tuple[bytes | None, bytes | None, Sequence[HeaderInput], int]]  # noqa: UP007

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")


@dataclass(frozen=True, slots=True)
class _Pending:
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def _normalise(records: Iterable[RecordInput], base_offset: int) -> list[_Pending]:
    out: list[_Pending] = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            out.append(_Pending(r.offset - base_offset, r.timestamp, r.key, r.value, tuple(r.headers)))
            continue
        key, value, headers, timestamp = r
        hs = tuple(h if isinstance(h, Header) else Header(h[0], h[1]) for h in headers)
        out.append(_Pending(i, timestamp, key, value, hs))
    for prev, cur in zip(out, out[1:], strict=False):
        if cur.offset_delta <= prev.offset_delta:
            raise ValueError(
                f"record offsets must increase: delta {cur.offset_delta} after {prev.offset_delta}"
            )
    if out and out[0].offset_delta < 0:
        raise ValueError("record offset below the base offset")
    return out


def _bytes_field(data: bytes | None) -> bytes:
    return write_varint(-1) if data is None else write_varint(len(data)) + data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One magic-2 record with its length prefix (Kafka's ``DefaultRecord.writeTo``)."""
    body = bytearray(b"\x00")  # attributes: unused, always 0
    body += write_varlong(timestamp_delta)
    body += write_varint(offset_delta)
    body += _bytes_field(key)
    body += _bytes_field(value)
    body += write_varint(len(headers))
    for h in headers:
        hk = h.key.encode("utf-8", "surrogateescape")
        body += write_varint(len(hk)) + hk
        body += _bytes_field(h.value)
    return write_varint(len(body)) + bytes(body)


def build_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int,
    compression: CompressionType | int = CompressionType.NONE,
    magic: int = 2,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode records into one batch as Kafka's ``MemoryRecordsBuilder`` would; returns its bytes.

    For ``magic`` 0/1 a legacy message set (one compressed wrapper when a codec is set) is returned;
    headers, producer fields and transactions need magic 2. ``last_offset_delta`` lets an empty batch
    (left by compaction) keep the offsets it covered.
    """
    compression = CompressionType(compression)
    pending = _normalise(records, base_offset)
    if magic in (0, 1):
        if any(p.headers for p in pending):
            raise ValueError("headers need magic 2")
        if is_transactional or is_control or producer_id != -1:
            raise ValueError("producer ids, transactions and control batches need magic 2")
        lat = log_append_time if timestamp_type is TimestampType.LOG_APPEND_TIME else None
        return build_legacy_message_set(
            [(p.key, p.value, p.timestamp if magic == 1 else NO_TIMESTAMP) for p in pending],
            base_offset=base_offset,
            magic=magic,
            compression=compression,
            log_append_time=lat,
        )
    if magic != 2:
        raise ValueError(f"magic must be 0, 1 or 2, not {magic}")
    if timestamp_type is TimestampType.LOG_APPEND_TIME and log_append_time is None:
        raise ValueError("LOG_APPEND_TIME batches need log_append_time")

    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = pending[0].timestamp if pending else NO_TIMESTAMP
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = log_append_time
    else:
        max_timestamp = max((p.timestamp for p in pending), default=NO_TIMESTAMP)
    body = b"".join(
        encode_record(p.offset_delta, p.timestamp - base_timestamp, p.key, p.value, p.headers)
        for p in pending
    )
    if compression is not CompressionType.NONE:
        body = compress(compression, body, magic=2)
    if last_offset_delta is None:
        last_offset_delta = pending[-1].offset_delta if pending else 0
    attributes = int(compression)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    after_crc = (
        _HEADER_AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(pending),
        )
        + body
    )
    # bytes after the length field: partitionLeaderEpoch(4) + magic(1) + crc(4) + attributes..end
    batch_length = 4 + 1 + 4 + len(after_crc)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc32c(after_crc))
        + after_crc
    )


def build_control_batch(
    control_type: ControlRecordType,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
    partition_leader_epoch: int = 0,
    value: bytes | None = None,
) -> bytes:
    """A control batch with one control record (Kafka's ``MemoryRecords.withEndTransactionMarker``).

    For COMMIT/ABORT the value is the end-transaction marker (version 0 + coordinator epoch) and the
    batch is transactional; other control types take ``value`` as given.
    """
    control_type = ControlRecordType(control_type)
    is_marker = control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT)
    if is_marker:
        value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(control_type.key_bytes(0), value, (), timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_marker,
        is_control=True,
    )


class SegmentWriter:
    """Appends batches to a new segment and writes the companion indexes Kafka would write.

    Aborted transactions are tracked from the appended batches themselves (first offset of each
    producer's open transaction, closed by an ABORT marker) and written to ``.txnindex`` with the last
    stable offset Kafka's broker would record when everything before the marker is complete.
    """

    def __init__(
        self, directory: Path, base_offset: int, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.directory.mkdir(parents=True, exist_ok=True)
        stem = f"{base_offset:020d}"
        self.log_path = self.directory / f"{stem}.log"
        self.index_path = self.directory / f"{stem}.index"
        self.time_index_path = self.directory / f"{stem}.timeindex"
        self.txn_index_path = self.directory / f"{stem}.txnindex"
        self._fh = open(self.log_path, "xb")  # noqa: SIM115 - closed in close()
        self._indexes = IndexBuilder(base_offset, index_interval_bytes)
        self._txn_index = TransactionIndex()
        self._open_txns: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction
        self._next_offset = base_offset
        self.closed = False

    @property
    def size_in_bytes(self) -> int:
        return self._indexes.position

    @property
    def next_offset(self) -> int:
        return self._next_offset

    def append(self, batch_bytes: bytes) -> None:
        """Append one or more whole batches (bytes as built by :func:`build_batch` or read from a log)."""
        if self.closed:
            raise ValueError("segment writer is closed")
        position = self._indexes.position
        for _, batch in iter_batches(batch_bytes, file=str(self.log_path)):
            batch.ensure_valid()
            if batch.last_offset < self._next_offset or batch.base_offset < self.base_offset:
                raise CorruptRecordError(
                    f"batch offsets {batch.base_offset}..{batch.last_offset} do not follow {self._next_offset - 1}",
                    file=str(self.log_path),
                    position=position,
                )
            self._track_transactions(batch)
            self._indexes.add_batch(batch.last_offset, batch.max_timestamp, batch.size_in_bytes)
            self._next_offset = batch.next_offset
            position += batch.size_in_bytes
        self._fh.write(batch_bytes)

    def _track_transactions(self, batch) -> None:  # type: ignore[no-untyped-def]
        if not batch.is_transactional:
            return
        pid = batch.producer_id
        if not batch.is_control_batch:
            self._open_txns.setdefault(pid, batch.base_offset)
            return
        first = self._open_txns.pop(pid, None)
        ctype = batch.control_type()
        if ctype is ControlRecordType.ABORT and first is not None:
            others = [o for p, o in self._open_txns.items() if p != pid]
            lso = min(others) if others else batch.last_offset + 1
            self._txn_index.append(AbortedTxn(pid, first, batch.last_offset, lso))

    def close(self) -> None:
        """Flush the log and write the trimmed ``.index``, ``.timeindex`` (and ``.txnindex``)."""
        if self.closed:
            return
        self._fh.close()
        self._indexes.close()
        self.index_path.write_bytes(self._indexes.offset_index.to_bytes())
        self.time_index_path.write_bytes(self._indexes.time_index.to_bytes())
        if len(self._txn_index):
            self.txn_index_path.write_bytes(self._txn_index.to_bytes())
        self.closed = True
        log.debug("closed segment %s: %d bytes", self.log_path, self._indexes.position)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
