"""read_committed from a Fetch response's own aborted-transaction list, as the Java consumer does it.

A Fetch response lists the aborted transactions that touch the records it returns, each only as
(producer id, offset of its first batch); where one ends is its producer's ABORT marker, a control batch
further on in the log. The Java consumer (`CompletedFetch`) walks the batches in order keeping the set of
producers inside an aborted transaction:

1. before a batch, every listed transaction whose first offset is at or before the batch's last offset
   enters the set (by producer id);
2. a control batch of a producer in the set is that transaction's ABORT marker: the producer leaves it
   (a producer's next control batch after an aborted transaction began can only be its abort marker, so
   the marker's type need not be read);
3. a transactional data batch of a producer in the set is aborted: its records are dropped;
4. control batches are never records a consumer sees.

Only producers the list names can be affected, so the walk covers their transactional batches alone and
is a Python loop over batches of those producers (never over records); the rest is Arrow compute over
the decoded columns. The state lives for one response: a later response lists again what it still
touches. Rows of one batch are consecutive in the decoder's output, possibly across RecordBatches, which
is why this is an object fed the RecordBatches of one response in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_reader.brokerwire.fetch import AbortedTransaction

#: the decoded columns the filter reads (batch fields of `segment_format.arrow_schema.RECORD_SCHEMA`)
NEEDED_COLUMNS = ("offset", "producer_id", "is_transactional", "is_control", "batch_base_offset")


class AbortedBatches:
    """The rows of one Fetch response a read_committed consumer keeps (see the module docstring)."""

    def __init__(self, aborted: Sequence[AbortedTransaction]) -> None:
        self._pending = deque(sorted(aborted, key=lambda a: a.first_offset))
        self._producers = pa.array(sorted({a.producer_id for a in aborted}), pa.int64())
        self._inside: set[int] = set()

    def keep(self, batch: pa.RecordBatch) -> pa.Array:
        """A boolean mask over `batch`'s rows: False for control records and aborted records."""
        not_control = pc.invert(batch.column("is_control"))
        if not len(self._producers):
            return not_control
        affected = pc.and_(
            batch.column("is_transactional"), pc.is_in(batch.column("producer_id"), value_set=self._producers)
        )
        rows = np.flatnonzero(affected.to_numpy(zero_copy_only=False))
        if not len(rows):
            return not_control
        bases = batch.column("batch_base_offset").to_numpy()[rows]
        offsets = batch.column("offset").to_numpy()[rows]
        producers = batch.column("producer_id").to_numpy()[rows]
        control = batch.column("is_control").to_numpy(zero_copy_only=False)[rows]
        starts = np.flatnonzero(np.concatenate(([True], bases[1:] != bases[:-1])))
        ends = np.append(starts[1:], len(rows))
        pending, inside, aborted = self._pending, self._inside, []
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            last = int(offsets[end - 1])
            while pending and pending[0].first_offset <= last:
                inside.add(pending.popleft().producer_id)
            producer = int(producers[start])
            if control[start]:
                inside.discard(producer)
            elif producer in inside:
                aborted.append(int(bases[start]))
        if not aborted:
            return not_control
        dropped = pc.is_in(batch.column("batch_base_offset"), value_set=pa.array(aborted, pa.int64()))
        return pc.and_(not_control, pc.invert(dropped))
