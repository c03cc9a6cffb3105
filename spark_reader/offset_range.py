"""One input partition type: one topic partition's offset range, read from one source.

Every split a query plans is a range of offsets of one partition and one place to read them from: the
store's segment copies (`partition_reader.TieredPartition`, a byte range of one segment) or the Kafka
brokers (`tail.BrokerTailPartition`, a hybrid read's live tail). Both give the same rows in the same Arrow
schema, so what the rest of the source asks of a split is asked of this type and answered by its variant:

- `rows`: its rows as Arrow batches of the source's schema (or only the columns asked for), what a task
  reads for both Spark adapters (the Python Data Source's `read`, the columnar scan's worker);
- `count`: how many rows `rows` gives, from batch headers where they say it exactly;
- `stored_bytes`: the store's bytes it reads (what the columnar scan packs tasks by), None from the brokers;
- `planned_rows`: the offsets it spans, an upper bound of its rows (Spark's statistics);
- `arrow_schema`: the schema of its rows; `source`: where they are read from.

A variant's errors leave `rows` and `count` as the source's own (`errors.ReaderError`);
`partition_reader.read_partition` words them for Spark. The variants keep their own modules and names: a
split crosses to executors (and to the columnar scan's JVM side) pickled by its class's path.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_reader.schema import arrow_schema


class OffsetRangePartition(InputPartition, abc.ABC):
    """Offsets [start, end) of one topic partition, read from one source (see the module docstring)."""

    topic: str
    partition: int
    start: int  # the first offset it may read
    end: int  # one past the last

    @abc.abstractmethod
    def rows(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Its rows as Arrow batches of the source's schema, or of only `columns` in that order."""

    def count(self) -> int:
        """The rows `rows` gives; a variant counts from batch headers where they say it exactly."""
        return self.read_count()

    def read_count(self) -> int:
        """The rows `rows` gives, by decoding every batch: the definition `count` is held to."""
        return sum(batch.num_rows for batch in self.rows(("offset",)))

    def stored_bytes(self) -> int | None:
        """The store's bytes it reads; None when it reads none (it is then never packed with others)."""
        return None

    def planned_rows(self) -> int:
        """The offsets it spans: at most that many rows."""
        return max(0, self.end - self.start)

    @property
    @abc.abstractmethod
    def include_headers(self) -> bool:
        """Whether its rows carry the `headers` column."""

    @property
    @abc.abstractmethod
    def flags_violations(self) -> bool:
        """Whether its rows carry the `violation` column (violations=flag)."""

    @property
    @abc.abstractmethod
    def source(self) -> str:
        """Where its offsets are read from (an object of the store, the brokers' addresses): no secret."""

    def arrow_schema(self, columns: Sequence[str] | None = None) -> pa.Schema:
        """The schema of its rows (of only `columns`, in that order, when given)."""
        schema = arrow_schema(self.include_headers, self.flags_violations)
        return schema if columns is None else pa.schema([schema.field(c) for c in columns])
