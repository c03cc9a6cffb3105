"""Kafka's on-disk formats, byte-compatible with Kafka itself: bytes in, bytes out, no storage I/O.

Public API (see each module): record batches and legacy message sets (:mod:`.records`,
:mod:`.legacy`), codecs (:mod:`.codecs`), the segment view and verifier (:mod:`.segment`), index and
companion files, and the writer (:mod:`.writer`). Every parse error of corrupt input is a
:class:`CorruptRecordError` naming the file and byte position.
"""

from .codecs import CompressionType, compress, decompress
from .crc import crc32, crc32c
from .errors import CorruptRecordError, SegmentFormatError, UnsupportedFormatError
from .index_check import SegmentIndexChecker
from .indexes import DEFAULT_INDEX_INTERVAL_BYTES, IndexBuilder, build_indexes
from .leader_epoch import EpochEntry, LeaderEpochCheckpoint
from .legacy import LegacyRecordBatch, build_legacy_message_set
from .log_entries import iter_batches, parse_batch
from .offset_index import OffsetIndex, OffsetPosition
from .producer_snapshot import ProducerSnapshot, ProducerStateEntry
from .records import (
    ControlRecordType,
    EndTransactionMarker,
    Header,
    Record,
    RecordBatch,
    TimestampType,
)
from .segment import LogSegment, SegmentSummary, SegmentVerifier, parse_segment_name
from .time_index import TimeIndex, TimestampOffset
from .transaction_index import AbortedTxn, TransactionIndex
from .writer import SegmentWriter, build_batch, build_control_batch

__all__ = [
    "RECORD_SCHEMA",
    "decode_batches",
    "decode_reference",
    "iter_record_batches",
    "iter_stream_record_batches",
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "AbortedTxn",
    "CompressionType",
    "ControlRecordType",
    "CorruptRecordError",
    "EndTransactionMarker",
    "EpochEntry",
    "Header",
    "IndexBuilder",
    "LeaderEpochCheckpoint",
    "LegacyRecordBatch",
    "LogSegment",
    "OffsetIndex",
    "OffsetPosition",
    "ProducerSnapshot",
    "ProducerStateEntry",
    "Record",
    "RecordBatch",
    "SegmentFormatError",
    "SegmentSummary",
    "SegmentIndexChecker",
    "SegmentVerifier",
    "SegmentWriter",
    "TimeIndex",
    "TimestampOffset",
    "TimestampType",
    "TransactionIndex",
    "UnsupportedFormatError",
    "build_batch",
    "build_control_batch",
    "build_indexes",
    "build_legacy_message_set",
    "compress",
    "crc32",
    "crc32c",
    "decompress",
    "iter_batches",
    "parse_batch",
    "parse_segment_name",
]


# The columnar decoder pulls in pyarrow; importing it lazily keeps `import segment_format` (and the CLI's
# start-up) light for code that only parses or writes bytes.
_LAZY = {
    "RECORD_SCHEMA": "arrow_schema",
    "decode_batches": "columnar",
    "decode_reference": "columnar",
    "iter_record_batches": "columnar",
    "iter_stream_record_batches": "columnar",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'segment_format' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
