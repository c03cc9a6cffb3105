"""The live tail's pieces that need no broker: `count()` from batch headers, column pruning, settings.

- `count_chunk` (what `count()` of a tail task reads: the batch headers of a Fetch response) gives exactly
  the rows `decode_chunk` gives for the same response, under both isolation levels, for any window of the
  response (a first batch beginning before the fetch offset, a last one running past the end) and any
  offset bounds, over logs of plain, compressed, transactional (committed, aborted, still open),
  control, compaction-emptied and legacy magic 1 entries written by segment_format's writer, which writes
  batches as Kafka's `MemoryRecordsBuilder` does. The decoder is the oracle here: tests/spark/test_broker_wire.py
  holds it to kafka-python's and librdkafka's consumers on a real broker, and
  tests/spark/test_kafka_broker_tail.py holds the whole tail to Spark's own Kafka source;
- a corrupt batch fails the count as it fails the decode, naming where;
- a tail task builds only the columns asked for (`select(value)` decodes no key or headers), with the same
  values as the whole row's.
"""

from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_format.codecs import CompressionType
from segment_format.columnar import FULL
from segment_format.records import ControlRecordType
from segment_format.writer import build_batch, build_control_batch
from spark_reader.brokerwire import AbortedTransaction, WireChunk, WireError, count_chunk, decode_chunk
from spark_reader.filters import PushedFilters
from spark_reader.options import IsolationLevel, parse_options
from spark_reader.tail import BrokerTailPartition, TailSettings, chunk_rows

COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
BASE_TS = 1_700_000_000_000
CODECS = (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD)


def _records(offset: int, n: int) -> list[tuple]:
    return [
        (
            None if (offset + i) % 5 == 0 else f"k{offset + i}".encode(),
            None if (offset + i) % 7 == 0 else os.urandom((offset + i) % 30),
            [("h", b"x"), ("null", None)] if (offset + i) % 3 == 0 else [],
            BASE_TS + offset + i,
        )
        for i in range(n)
    ]


@st.composite
def fetched_logs(draw: st.DrawFn) -> tuple[bytes, tuple[AbortedTransaction, ...], int]:
    """A partition's log as a Fetch response holds it: (its entries, the aborted transactions, its end)."""
    out: list[bytes] = []
    offset, open_txns, aborted = draw(st.integers(0, 40)), {}, []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["plain", "plain", "txn", "txn", "end", "empty", "legacy"]))
        codec = draw(st.sampled_from(CODECS))
        n = draw(st.integers(1, 12))
        if kind == "plain":
            out.append(build_batch(_records(offset, n), base_offset=offset, compression=codec))
        elif kind == "legacy":  # magic 1 (zstd came with magic 2)
            codec = CompressionType.NONE if codec is CompressionType.ZSTD else codec
            out.append(build_batch([(k, v, [], t) for k, v, _, t in _records(offset, n)], base_offset=offset,
                                   compression=codec, magic=1))  # fmt: skip
            offset += n
            continue
        elif kind == "empty":  # a batch compaction emptied: it keeps the offsets it covered
            out.append(build_batch([], base_offset=offset, last_offset_delta=n - 1))
        elif kind == "txn":
            pid = draw(st.sampled_from([7, 8, 9]))
            open_txns.setdefault(pid, offset)
            out.append(build_batch(_records(offset, n), base_offset=offset, compression=codec, producer_id=pid,
                                   producer_epoch=0, base_sequence=0, is_transactional=True))  # fmt: skip
        else:  # the end of an open transaction, if any: ABORT or COMMIT
            if not open_txns:
                continue
            pid = draw(st.sampled_from(sorted(open_txns)))
            abort = draw(st.booleans())
            if abort:
                aborted.append(AbortedTransaction(pid, open_txns[pid]))
            del open_txns[pid]
            kind_ = ControlRecordType.ABORT if abort else ControlRecordType.COMMIT
            out.append(build_control_batch(kind_, base_offset=offset, producer_id=pid, producer_epoch=0,
                                           timestamp=BASE_TS + offset))  # fmt: skip
            n = 1
        offset += n
    return b"".join(out), tuple(aborted), offset


def _chunk(
    records: bytes, aborted: tuple[AbortedTransaction, ...], start: int, end: int, nxt: int
) -> WireChunk:
    return WireChunk(
        topic="t", partition=0, records=memoryview(records), start=start, end=end, next_offset=nxt,
        aborted=aborted, high_watermark=nxt, last_stable_offset=nxt, log_start_offset=0,
    )  # fmt: skip


def _decoded_offsets(chunk: WireChunk, isolation: IsolationLevel) -> list[int]:
    return [o for b in decode_chunk(chunk, isolation, FULL) for o in b.column("offset").to_pylist()]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fetched_logs(), st.data())
def test_counts_from_headers_are_the_decoded_rows(log: tuple, data: st.DataObject) -> None:
    records, aborted, end = log
    start = data.draw(st.integers(0, end), label="fetch offset")
    stop = data.draw(st.integers(start, end + 3), label="end asked for")
    bound = st.none() | st.integers(0, end + 2)
    lo, hi = data.draw(bound, label="lo"), data.draw(bound, label="hi")
    chunk = _chunk(records, aborted, start, stop, end)
    for isolation in (UNCOMMITTED, COMMITTED):
        want = [
            o
            for o in _decoded_offsets(chunk, isolation)
            if (lo is None or o >= lo) and (hi is None or o <= hi)
        ]
        assert count_chunk(chunk, isolation, lo, hi) == len(want), isolation


def test_a_count_reads_headers_only_where_they_say_it_all() -> None:
    """A whole compressed batch inside the window is counted without decompressing it: a batch whose
    records section is garbage (CRC made to match) still counts by its header, and decodes as corrupt."""
    import struct

    from segment_format.crc import crc32c

    good = build_batch(_records(0, 10), base_offset=0, compression=CompressionType.ZSTD)
    garbage = bytearray(good[:61]) + os.urandom(len(good) - 61)
    struct.pack_into(">I", garbage, 17, crc32c(bytes(garbage[21:])))
    chunk = _chunk(bytes(garbage), (), 0, 10, 10)
    assert count_chunk(chunk) == 10
    with pytest.raises(WireError, match="corrupt records"):
        _decoded_offsets(chunk, UNCOMMITTED)
    # cut by the window: that batch is decoded, and its corruption is named
    with pytest.raises(WireError, match="corrupt records"):
        count_chunk(dataclasses.replace(chunk, start=3))


def test_a_batch_whose_crc_does_not_match_fails_the_count_as_the_decode() -> None:
    batch = bytearray(build_batch(_records(0, 10), base_offset=0))
    batch[-1] ^= 0xFF
    chunk = _chunk(bytes(batch), (), 0, 10, 10)
    with pytest.raises(WireError, match=r"corrupt records: .*t-0 from the brokers") as counted:
        count_chunk(chunk)
    with pytest.raises(WireError) as decoded:
        _decoded_offsets(chunk, UNCOMMITTED)
    assert str(counted.value) == str(decoded.value)
    assert "\n" not in str(counted.value)


@pytest.mark.parametrize("columns", [("offset",), ("value", "partition"), ("timestamp", "headers", "key")])
def test_a_tail_task_builds_only_the_columns_asked_for(columns: tuple[str, ...]) -> None:
    """The columnar scan's pruning reaches the tail: the same values as the whole row's, and no key,
    value or headers column decoded that was not asked for."""
    opts = parse_options({
        "storage.backend": "file", "storage.file.root": "/nonexistent", "subscribe": "t",
        "includeHeaders": "true", "kafka.bootstrap.servers": "b:1", "violations": "flag",
    })  # fmt: skip
    part = BrokerTailPartition("t", 0, 2, 40, TailSettings.of(opts), PushedFilters())
    records = b"".join(
        build_batch(_records(o, 10), base_offset=o, compression=CompressionType.LZ4) for o in range(0, 40, 10)
    )
    chunk = _chunk(records, (), 2, 40, 40)
    whole = pa.Table.from_batches(list(chunk_rows(chunk, part)))
    assert whole.column("offset").to_pylist() == list(range(2, 40))
    assert whole.column("violation").null_count == whole.num_rows
    pruned = pa.Table.from_batches(list(chunk_rows(chunk, part, columns)))
    assert pruned.schema.names == list(columns)
    assert pruned.to_pydict() == whole.select(list(columns)).to_pydict()
    decoded = next(decode_chunk(chunk, UNCOMMITTED, _projection_of(columns)))
    assert {"key", "value", "headers"} & set(decoded.schema.names) == {"key", "value", "headers"} & set(
        columns
    )


def _projection_of(columns: tuple[str, ...]):  # noqa: ANN202 - segment_format Projection
    from spark_reader.schema import decoder_projection

    return decoder_projection(columns, True, batch_fields=False)


def test_the_tail_waits_for_the_brokers_as_long_as_poll_timeout_ms() -> None:
    base = {
        "storage.backend": "file",
        "storage.file.root": "/x",
        "subscribe": "t",
        "kafka.bootstrap.servers": "b:1",
    }
    assert TailSettings.of(parse_options(base)).wire.default_api_timeout_ms == 120_000  # Spark's default
    given_ = parse_options(
        {**base, "kafkaConsumer.pollTimeoutMs": "5000", "kafka.default.api.timeout.ms": "9000"}
    )
    assert TailSettings.of(given_).poll_timeout_ms == 5000
