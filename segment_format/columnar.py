"""Columnar decoding: Kafka record batches to ``pyarrow.RecordBatch`` (schema :data:`RECORD_SCHEMA`).

Two decoders producing identical output:

* the fast path (:func:`iter_record_batches`, :func:`decode_batches`) hands the whole byte range to the
  C kernel ``segment_format._native``, which walks batch headers, checks CRC-32C, calls back into Python
  only to decompress a compressed batch, and parses every record straight into Arrow-layout column
  buffers; Python then wraps those buffers zero-copy with ``pa.Array.from_buffers``. There is no Python
  work per record, only per call (and per compressed batch).
* the reference (:func:`decode_reference`) builds the same table from ``segment_format.records``
  objects with one Python loop iteration per record. It is the readable definition of the output and
  the oracle the fast path is tested against; it also decodes legacy magic 0/1 entries for the fast
  path, since those are rare and not worth a second C parser.

Why C rather than Cython or numba: the kernel is a byte-walking parser whose output is raw buffers, so
plain C with the CPython API needs nothing beyond the compiler setup.py already drives, has no runtime
JIT warm-up (numba compiles on first call, seconds per process: bad for Spark workers and CLI tools) and
no extra build dependency (Cython); the hardware CRC-32C instruction is also directly reachable.

Memory: the column buffers belong to the returned arrays (nothing refers to the input bytes). Large
buffers are anonymous mappings; released ones (up to 128 MiB) are kept for the next decode, so a reader
decoding chunk after chunk does not pay the kernel to zero fresh pages each time. They are advised to
use transparent huge pages (faster steady state, possibly a slower first decode on a fragmented host);
``SEGMENT_FORMAT_HUGEPAGES=0`` in the environment turns that off.

Projection: every decoder takes ``projection=`` (:class:`Projection`) saying what of each record to
materialise: keys and values whole, cut to their first N bytes or not at all, headers or not, the
batch-level per-row columns or not, control batches' records or not. The output schema is
:data:`RECORD_SCHEMA` less the columns left out (:meth:`Projection.schema`). The kernel still walks and
bounds-checks every record whole, so what is refused as malformed does not depend on the projection; it
only skips the copies (a record validation policy that reads headers only pays for no key or value bytes).
Without a projection the output is exactly as before (the Spark reader's).

Errors: any malformed input raises :class:`segment_format.errors.CorruptRecordError` naming the file and
the absolute byte position (``base_position`` + index in ``data``); for a compressed batch the position
is the batch's and the reason locates the record inside the decompressed bytes.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa

from segment_format import _native, log_entries
from segment_format.arrow_schema import RECORD_SCHEMA
from segment_format.codecs import CompressionType, decompress
from segment_format.errors import CorruptRecordError
from segment_format.kernel_arrays import header_key, record_batch
from segment_format.projection import FULL, Projection, empty_batch

__all__ = [
    "FULL",
    "ChunkDecoder",
    "Projection",
    "RECORD_SCHEMA",
    "decode_batches",
    "decode_reference",
    "iter_record_batches",
    "iter_stream_record_batches",
]

logger = logging.getLogger(__name__)

#: Arrow ``binary``/``string`` columns address their data with int32 offsets.
MAX_COLUMN_BYTES = 2**31 - 1

_STOP_END, _STOP_LEGACY, _STOP_MAX_ROWS, _STOP_LIMIT, _STOP_PARTIAL = 0, 1, 2, 3, 4
_LEGACY_HEADER = struct.Struct(">qi")
_MAGIC_POSITION = 16


_decompressed = 0  # records sections this process decompressed (see decompressed_sections)


def decompressed_sections() -> int:
    """How many magic-2 records sections the decoders of this process have decompressed so far: what a
    reader that promises not to decompress (the Spark scan's count path) is checked against."""
    return _decompressed


def _decompressor(codec: CompressionType) -> Callable[[memoryview], bytes]:
    """Callback for the kernel: decompress one magic-2 records section the way Kafka's client does.

    The kernel turns any exception into a DecodeError at the batch's position quoting its reason.
    """

    def counted(section: memoryview) -> bytes:
        global _decompressed
        _decompressed += 1
        return decompress(codec, section, magic=2)

    return counted


# Indexed by codec id; the kernel calls these with a memoryview of a batch's records section.
_DECOMPRESSORS = tuple(_decompressor(codec) for codec in CompressionType)


def _legacy_run_end(view: memoryview, position: int, partial_ok: bool) -> int:
    """End of the run of consecutive legacy (magic 0/1) entries starting at ``position``.

    Stops at the first magic-2 batch, and at an entry cut short by the end of ``view``: before it when
    ``partial_ok`` (streaming: more bytes will come), else after it so the reference decoder reports
    the truncation with its position.
    """
    end = len(view)
    while position + _MAGIC_POSITION < end and view[position + _MAGIC_POSITION] in (0, 1):
        _, size = _LEGACY_HEADER.unpack_from(view, position)
        if size < 0:
            return end  # corrupt: let the reference decoder say so
        if position + 12 + size > end:
            return position if partial_ok else end
        position += 12 + size
    return position


def _as_view(data: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


@dataclass
class _Budget:
    """Rows still wanted (None: all), shared by the calls of one iteration."""

    remaining: int | None

    def take(self, rows: int) -> None:
        if self.remaining is not None:
            self.remaining -= rows

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0


def _check_limits(max_rows: int | None, rows_per_batch: int | None) -> None:
    if max_rows is not None and max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, not {max_rows}")
    if rows_per_batch is not None and rows_per_batch <= 0:
        raise ValueError(f"rows_per_batch must be > 0, not {rows_per_batch}")


def _decode_range(
    view: memoryview,
    *,
    file: str | None,
    base_position: int,
    verify_crc: bool,
    budget: _Budget,
    rows_per_batch: int | None,
    max_column_bytes: int,
    partial_ok: bool,
    projection: Projection = FULL,
) -> Generator[pa.RecordBatch, None, int]:
    """Yield the records of ``view``; return how many bytes were consumed (all, unless partial_ok)."""
    position, skip = 0, 0
    while position < len(view) and not budget.exhausted:
        try:
            cols = _native.decode_v2(
                view,
                position,
                verify_crc,
                -1 if budget.remaining is None else budget.remaining,
                skip,
                _DECOMPRESSORS,
                max_column_bytes,
                partial_ok,
                projection.key_bytes,
                projection.value_bytes,
                projection.flags,
            )
        except _native.DecodeError as exc:
            where, reason = exc.args
            raise CorruptRecordError(reason, file=file, position=base_position + where) from exc
        if cols["rows"]:
            budget.take(cols["rows"])
            yield from _slices(record_batch(cols, projection), rows_per_batch)
        position, skip = cols["position"], cols["skip"]
        if cols["stop"] == _STOP_PARTIAL:
            return position
        if cols["stop"] == _STOP_LEGACY:
            end = _legacy_run_end(view, position, partial_ok)
            if end == position:  # a legacy entry cut short: wait for more bytes
                return position
            logger.debug("%s: legacy entries at %d..%d decoded by the reference path", file, position, end)
            legacy = decode_reference(
                view[position:end],
                file=file,
                base_position=base_position + position,
                verify_crc=verify_crc,
                max_rows=budget.remaining,
                projection=projection,
            )
            budget.take(legacy.num_rows)
            if legacy.num_rows:
                yield from _slices(legacy, rows_per_batch)
            position = end
    return position


def iter_record_batches(
    data: bytes | bytearray | memoryview,
    *,
    file: str | None = None,
    base_position: int = 0,
    verify_crc: bool = True,
    max_rows: int | None = None,
    rows_per_batch: int | None = None,
    max_column_bytes: int = MAX_COLUMN_BYTES,
    projection: Projection = FULL,
) -> Iterator[pa.RecordBatch]:
    """Decode the whole batches in ``data`` into RecordBatches with :data:`RECORD_SCHEMA` (or the
    ``projection``'s schema).

    ``data`` is a segment or a slice of one that starts and ends on batch boundaries; ``base_position``
    is the file position of ``data[0]`` (used in error positions only). ``max_rows`` stops after that
    many records in total; ``rows_per_batch`` caps each yielded RecordBatch (zero-copy slices). A new
    RecordBatch also starts before any binary column would pass ``max_column_bytes`` (2 GiB - 1, the
    limit of Arrow's 32-bit offsets), so each yielded batch is valid ``binary``.
    """
    _check_limits(max_rows, rows_per_batch)
    yield from _decode_range(
        _as_view(data),
        file=file,
        base_position=base_position,
        verify_crc=verify_crc,
        budget=_Budget(max_rows),
        rows_per_batch=rows_per_batch,
        max_column_bytes=max_column_bytes,
        partial_ok=False,
        projection=projection,
    )


def iter_stream_record_batches(
    source: BinaryIO | Iterable[bytes],
    *,
    file: str | None = None,
    base_position: int = 0,
    verify_crc: bool = True,
    max_rows: int | None = None,
    rows_per_batch: int | None = None,
    read_size: int = 8 << 20,
    projection: Projection = FULL,
) -> Iterator[pa.RecordBatch]:
    """Decode batches from a binary stream (or an iterable of byte chunks) without loading it whole.

    Chunks need not end on batch boundaries (a fetched range of a remote segment, a file read in
    pieces): each read is decoded up to its last complete batch and the tail is kept for the next one,
    so memory stays around ``read_size`` plus one batch. The stream must start on a batch boundary at
    file position ``base_position``; a batch still incomplete at the end is a CorruptRecordError.
    """
    _check_limits(max_rows, rows_per_batch)
    if read_size <= 0:
        raise ValueError(f"read_size must be > 0, not {read_size}")
    chunks: Iterable[bytes]
    if hasattr(source, "read"):
        stream = source

        def reader() -> Iterator[bytes]:
            while chunk := stream.read(read_size):
                yield chunk

        chunks = reader()
    else:
        chunks = source
    # batches wholly inside a chunk are decoded where they lie; only an entry cut by a chunk's end is copied
    # and completed from the next chunk (joining the tail to the whole next chunk copied every chunk twice)
    decoder = ChunkDecoder(
        file=file,
        base_position=base_position,
        verify_crc=verify_crc,
        projection=projection,
        max_rows=max_rows,
        rows_per_batch=rows_per_batch,
    )
    for chunk in chunks:
        yield from decoder.feed(chunk)
        if decoder.exhausted:
            return
    yield from decoder.finish()


def _complete_entry(pending: bytearray, view: memoryview) -> int:
    """Complete the entry (batch or legacy message) that `pending` starts, from the start of `view`: its
    length is in its first 12 bytes. Returns how many bytes of `view` it took, or -1 when `view` ended
    first (all of it is then in `pending`)."""
    i = 0
    if len(pending) < 12:
        i = min(12 - len(pending), len(view))
        pending += view[:i]
        if len(pending) < 12:
            return -1
    need = 12 + max(0, int.from_bytes(pending[8:12], "big", signed=True))
    take = max(0, min(need - len(pending), len(view) - i))
    pending += view[i : i + take]
    i += take
    return i if len(pending) >= need else -1


class ChunkDecoder:
    """Push-style streaming decode: :meth:`feed` the bytes of a segment in order, in chunks that need not
    end on batch boundaries; each call returns the RecordBatches of the batches it completed.

    For a caller that reads a file into one reused buffer and hands the same chunk to other consumers (the
    RSM's copy checks integrity and validates records over the same reads): every call is done with the
    chunk when it returns. Batches wholly inside a chunk are decoded in place; only a batch cut by the end
    of a chunk is kept (copied) and completed from the start of the next one, so memory is one batch plus
    the decoded columns of a chunk, and no chunk is copied whole. :meth:`finish` refuses a batch still
    incomplete at the end (CorruptRecordError). ``max_rows`` stops it after that many records in all and
    ``rows_per_batch`` caps each RecordBatch, as for :func:`iter_stream_record_batches`, which is this
    decoder over a stream.
    """

    def __init__(
        self,
        *,
        file: str | None = None,
        base_position: int = 0,
        verify_crc: bool = True,
        projection: Projection = FULL,
        max_column_bytes: int = MAX_COLUMN_BYTES,
        max_rows: int | None = None,
        rows_per_batch: int | None = None,
    ) -> None:
        self.file = file
        self.position = base_position  # file position of the next byte not yet decoded
        self.verify_crc = verify_crc
        self.projection = projection
        self.max_column_bytes = max_column_bytes
        self.rows_per_batch = rows_per_batch
        self._budget = _Budget(max_rows)
        self._pending = bytearray()  # the start of a batch cut by the end of the last chunk

    @property
    def exhausted(self) -> bool:
        """`max_rows` rows were decoded: nothing more is (`feed` and `finish` return nothing)."""
        return self._budget.exhausted

    def _decode(self, view: memoryview, partial_ok: bool, out: list[pa.RecordBatch]) -> int:
        gen = _decode_range(
            view,
            file=self.file,
            base_position=self.position,
            verify_crc=self.verify_crc,
            budget=self._budget,
            rows_per_batch=self.rows_per_batch,
            max_column_bytes=self.max_column_bytes,
            partial_ok=partial_ok,
            projection=self.projection,
        )
        while True:
            try:
                out.append(next(gen))
            except StopIteration as stop:
                consumed: int = stop.value
                self.position += consumed
                return consumed

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[pa.RecordBatch]:
        """Decode what the next bytes complete; returns its RecordBatches (possibly none)."""
        view = _as_view(chunk)
        out: list[pa.RecordBatch] = []
        i = 0
        pending = self._pending
        if pending:
            i = _complete_entry(pending, view)
            if i < 0:
                return out
            consumed = self._decode(memoryview(bytes(pending)), True, out)
            if consumed != len(pending):  # cannot happen for one whole entry; keep what is left
                del pending[:consumed]
                pending += view[i:]
                return out
            pending.clear()
        if self.exhausted:
            return out
        consumed = self._decode(view[i:], True, out)
        pending += view[i + consumed :]
        return out

    def finish(self) -> list[pa.RecordBatch]:
        """The end of the stream: decode (and so refuse, with its position) anything left over."""
        out: list[pa.RecordBatch] = []
        if self._pending and not self.exhausted:
            self._decode(memoryview(bytes(self._pending)), False, out)
            self._pending.clear()
        return out


def _slices(batch: pa.RecordBatch, rows_per_batch: int | None) -> Iterator[pa.RecordBatch]:
    if rows_per_batch is None or batch.num_rows <= rows_per_batch:
        yield batch
        return
    for start in range(0, batch.num_rows, rows_per_batch):
        yield batch.slice(start, rows_per_batch)


def decode_batches(
    data: bytes | bytearray | memoryview,
    *,
    file: str | None = None,
    base_position: int = 0,
    verify_crc: bool = True,
    max_rows: int | None = None,
    projection: Projection = FULL,
) -> pa.RecordBatch:
    """Decode the whole batches in ``data`` into one RecordBatch (the fast path).

    The common case (only magic-2 batches, under 2 GiB per column) is a single kernel call and no copy.
    Raises ``ValueError`` if a column would pass 2 GiB: use :func:`iter_record_batches` for such ranges.
    """
    parts = list(
        iter_record_batches(
            data,
            file=file,
            base_position=base_position,
            verify_crc=verify_crc,
            max_rows=max_rows,
            projection=projection,
        )
    )
    if not parts:
        return empty_batch(projection)
    if len(parts) == 1:
        return parts[0]
    try:
        if hasattr(pa, "concat_batches"):  # pyarrow >= 19
            return pa.concat_batches(parts)
        combined = pa.Table.from_batches(parts, schema=parts[0].schema).combine_chunks().to_batches()
        if len(combined) != 1:
            raise pa.ArrowInvalid("columns did not combine into one chunk")
        return combined[0]
    except pa.ArrowInvalid as exc:  # offsets overflow
        raise ValueError(f"decoded records of {file or 'data'} exceed 2 GiB in a column: {exc}") from exc


def decode_reference(
    data: bytes | bytearray | memoryview,
    *,
    file: str | None = None,
    base_position: int = 0,
    verify_crc: bool = True,
    max_rows: int | None = None,
    projection: Projection = FULL,
) -> pa.RecordBatch:
    """The pure-Python reference: same arguments and output as :func:`decode_batches`.

    One Python loop iteration per record over ``segment_format.records`` objects, on purpose: it is
    the plainly readable definition of every column that the C kernel is tested against.
    """
    schema = projection.schema
    columns: dict[str, list[Any]] = {name: [] for name in RECORD_SCHEMA.names}
    offsets, timestamps, timestamp_types = columns["offset"], columns["timestamp"], columns["timestamp_type"]
    keys, values, headers = columns["key"], columns["value"], columns["headers"]
    epochs, producer_ids = columns["partition_leader_epoch"], columns["producer_id"]
    producer_epochs, sequences = columns["producer_epoch"], columns["base_sequence"]
    transactional, control, batch_offsets = (
        columns["is_transactional"],
        columns["is_control"],
        columns["batch_base_offset"],
    )
    key_bytes, value_bytes = projection.key_bytes, projection.value_bytes

    def cut(data: bytes | None, n: int) -> bytes | None:
        return data if data is None or n < 0 else data[:n]

    rows = 0
    try:
        for _, batch in log_entries.iter_batches(_as_view(data), file=file):
            if max_rows is not None and rows >= max_rows:
                break
            if verify_crc:
                batch.ensure_valid()
            batch_fields = (
                int(batch.timestamp_type),
                batch.partition_leader_epoch,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.is_transactional,
                batch.is_control_batch,
                batch.base_offset,
            )
            if batch.magic == 2 and (
                batch.record_count == 0 or (batch.is_control_batch and not projection.control)
            ):
                # As Kafka's DefaultRecordBatch.iterator(), an empty batch's payload is never read; an
                # unknown codec id is still corruption. A control batch left out is not read either.
                _ = batch.compression_type
                continue
            for record in batch.records():
                if max_rows is not None and rows >= max_rows:
                    break
                offsets.append(record.offset)
                timestamps.append(record.timestamp)
                keys.append(cut(record.key, key_bytes))
                values.append(cut(record.value, value_bytes))
                headers.append([{"key": header_key(h.key), "value": h.value} for h in record.headers])
                (ts_type, epoch, producer_id, producer_epoch, sequence, txn, ctrl, base) = batch_fields
                timestamp_types.append(ts_type)
                epochs.append(epoch)
                producer_ids.append(producer_id)
                producer_epochs.append(producer_epoch)
                sequences.append(sequence)
                transactional.append(txn)
                control.append(ctrl)
                batch_offsets.append(base)
                rows += 1
    except CorruptRecordError as exc:
        if not base_position:
            raise
        raise exc.with_location(file=file, position_offset=base_position) from exc
    return pa.RecordBatch.from_pydict({name: columns[name] for name in schema.names}, schema=schema)
