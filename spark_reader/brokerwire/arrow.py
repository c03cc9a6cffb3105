"""A chunk of raw batches from the brokers -> the Arrow rows a consumer sees, through segment_format's
columnar decoder (the one the store path uses), so both sides of a hybrid read are one decoder.

Per chunk: `segment_format.columnar.iter_record_batches` over the chunk's bytes (C kernel, CRCs checked),
then one mask: control records out, records of aborted transactions out under read_committed
(`spark_reader.brokerwire.aborts`, from the chunk's own aborted list), and offsets outside the chunk's
window out (a compressed batch comes back whole from before the fetch offset; the last batch may run past
the end): offsets ascend, so the window is a slice of the decoded rows, cut without a copy. Rows come
in `RECORD_SCHEMA` (offset, timestamp, timestamp_type, key, value, headers, then the batch fields), or
the `projection`'s columns.

Without aborted transactions to apply, control batches are skipped by the decoder unread
(`Projection.control`); with some, the decode keeps them and the batch fields, which the filter reads,
and drops what the caller's projection did not ask for afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from segment_format.columnar import FULL, Projection, iter_record_batches
from segment_format.errors import CorruptRecordError
from spark_reader.brokerwire.aborts import AbortedBatches
from spark_reader.brokerwire.client import BrokerWire
from spark_reader.brokerwire.errors import WireError
from spark_reader.brokerwire.reader import WireChunk, read_range
from spark_reader.options import IsolationLevel


def decode_chunk(
    chunk: WireChunk,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    projection: Projection = FULL,
) -> Iterator[pa.RecordBatch]:
    """The rows of `chunk` a consumer at `isolation` sees, in offset order (see the module docstring)."""
    committed = isolation is IsolationLevel.READ_COMMITTED and bool(chunk.aborted)
    decode_as = (
        dataclasses.replace(projection, batch_fields=True, control=True)
        if committed
        else dataclasses.replace(projection, control=False)
    )
    aborts = AbortedBatches(chunk.aborted) if committed else None
    where = f"{chunk.topic}-{chunk.partition} from the brokers (fetch at offset {chunk.start})"
    try:
        for batch in iter_record_batches(chunk.records, file=where, projection=decode_as):
            if aborts is not None:  # first: its walk must see every batch of the response
                keep = aborts.keep(batch)
                if keep.false_count:
                    batch = batch.filter(keep)
            batch = _window(batch, chunk.start, chunk.end)
            if decode_as.names != projection.names:
                batch = batch.select(projection.names)
            if batch.num_rows:
                yield batch
    except CorruptRecordError as exc:
        raise WireError(f"corrupt records: {exc}") from None


def _window(batch: pa.RecordBatch, start: int, end: int) -> pa.RecordBatch:
    """The rows of `batch` with start <= offset < end: a slice (no copy), offsets being ascending."""
    offsets = batch.column("offset").to_numpy()
    if not len(offsets) or (offsets[0] >= start and offsets[-1] < end):
        return batch
    lo, hi = np.searchsorted(offsets, (start, end))
    return batch.slice(lo, hi - lo)


def decode_chunks(
    chunks: Iterable[WireChunk],
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    projection: Projection = FULL,
) -> Iterator[pa.RecordBatch]:
    """`decode_chunk` over chunks in order (each with its own aborted list: read_committed's state lives
    for one Fetch response, as in the Java consumer)."""
    for chunk in chunks:
        yield from decode_chunk(chunk, isolation, projection)


def read_arrow(
    client: BrokerWire,
    topic: str,
    partition: int,
    start: int,
    end: int,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    projection: Projection = FULL,
) -> Iterator[pa.RecordBatch]:
    """Offsets [start, end) of a partition from the brokers as a consumer at `isolation` sees them."""
    yield from decode_chunks(
        read_range(client, topic, partition, start, end, isolation), isolation, projection
    )
