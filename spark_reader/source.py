"""`format("kafka-tiered")`: the data source, its batch reader and its stream reader.

Spark pickles the source and its readers to the Python workers that plan and read, so everything held
here is options and plans: store clients are made lazily where they are used (`Planner.catalog` on the
planning worker, `partition_reader.clients` on executors).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from spark_reader.errors import ReaderError, one_line_errors
from spark_reader.filters import PushedFilters, push_filters
from spark_reader.offsets import Kind, ending_spec, starting_spec
from spark_reader.options import SourceOptions, Violations, parse_options
from spark_reader.partition_reader import read_partition
from spark_reader.planning import Planner
from spark_reader.pushdown import ReaderKind, reader_kind
from spark_reader.schema import spark_schema
from spark_reader.stream import TieredStreamReader

log = logging.getLogger(__name__)

FORMAT_NAME = "kafka-tiered"


class KafkaTieredDataSource(DataSource):
    """Reads the segments the RSM tiered, straight from the store: a drop-in for Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _options(self) -> SourceOptions:
        return parse_options(self.options)

    @one_line_errors
    def schema(self):  # -> StructType
        opts = self._options()
        return spark_schema(opts.include_headers, opts.violations is Violations.FLAG)

    @one_line_errors
    def reader(self, schema) -> DataSourceReader:  # noqa: ANN001 - pyspark's StructType
        """The filtering reader where Spark pushes filters, else the plain one (`spark_reader.pushdown`)."""
        if reader_kind() is ReaderKind.PLAIN:
            return TieredBatchReader(self._options())
        return FilteringBatchReader(self._options())

    @one_line_errors
    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: ANN001
        return TieredStreamReader(self._options())


class TieredBatchReader(DataSourceReader):
    """A batch query: offsets from startingOffsets (earliest) to endingOffsets (latest), exclusive.

    This one takes no filters (Spark applies them to the rows it reads): it is what a session with
    `spark.sql.python.filterPushdown.enabled` off can use. `FilteringBatchReader` adds `pushFilters`."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.filters = PushedFilters()
        self.last_planner: Planner | None = (
            None  # the planner of the last partitions() (its store's counters)
        )

    @one_line_errors
    def partitions(self) -> Sequence[InputPartition]:
        planner = self.last_planner = Planner(self.opts)
        start, end = starting_spec(self.opts, streaming=False), ending_spec(self.opts)
        if self.filters.empty:
            return []
        if self.opts.bootstrap_servers:  # history from the store, the live tail from the brokers
            from spark_reader.hybrid import plan_batch

            return plan_batch(planner, self.filters, start, end)
        ranges = []
        for sp in planner.select(self.filters):
            first = start.position(sp.topic, sp.partition)
            pr = planner.partition_range(sp, first, end.position(sp.topic, sp.partition))
            if pr is not None:
                ranges.append(pr)
            elif first.kind is Kind.OFFSET and first.value is not None:
                _check_start(
                    sp.topic, sp.partition, first.value, sp.history.first_offset, sp.history.next_offset
                )
        parts = planner.plan(ranges, self.filters)
        log.info("kafka-tiered: %d input partition(s) over %d topic partition(s)", len(parts), len(ranges))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


def _check_start(topic: str, partition: int, start: int, first: int | None, end: int | None) -> None:
    """A batch query's starting offset past the partition's end is refused, as Spark's Kafka source refuses
    it ("Beginning offset ... is after the ending offset"), not read as an empty partition."""
    if end is not None and start > end:
        raise ReaderError(
            f"{topic}-{partition}: startingOffsets {start} is after the end of its data, offset {end} (it holds "
            f"offsets {first}..{end - 1}): an invalid startingOffsets, or the topic lost data"
        )


class FilteringBatchReader(TieredBatchReader):
    """The batch reader taking the filters on `partition`, `offset` and `timestamp` it can apply exactly
    (`spark_reader.filters`): planning skips the partitions, segments and chunks that cannot match."""

    def pushFilters(self, filters: list) -> Iterator:  # noqa: N802 - Spark's name
        pushed, rejected = push_filters(filters)
        self.filters = pushed
        yield from rejected
