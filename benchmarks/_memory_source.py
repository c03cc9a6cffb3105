"""The ceiling of benchmarks/spark_read.py: a Python data source yielding prebuilt Arrow batches from memory.

    spark.dataSource.register(MemoryBatchesDataSource)
    spark.read.format("bench-memory-batches").option("batches", json.dumps([[rows, rows, ...], ...]))
         .option("topic", "t").load()

One input partition per inner list, yielding one batch of each size: the same partitions and batch
sizes as `format("kafka-tiered")` yields for a topic, in its schema (Spark's Kafka source's, no
headers), with the topic's name, 100-byte values and null keys. Nothing is read or decoded: each Python worker builds
one batch once (kept in this module while Spark reuses the worker) and yields zero-copy slices of it,
so what is measured is the cost of a Python data source handing Arrow batches to Spark, plus the query.

It lives in a module of its own so Spark's workers import it by name (a class defined in a script
run as __main__ is pickled by value, and its cache would not outlive one task).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spark_reader.schema import arrow_schema, constant_string, spark_schema

FORMAT_NAME = "bench-memory-batches"
VALUE_SIZE = 100

_template: list[pa.RecordBatch] = []  # this worker's batch, built on first use


def template(rows: int, topic: str) -> pa.RecordBatch:
    """A batch of at least ``rows`` rows of the source's schema (random 100-byte values, null keys)."""
    if _template and _template[0].num_rows >= rows and _template[0].column("topic")[0].as_py() == topic:
        return _template[0]
    rng = np.random.default_rng(rows)
    values = rng.integers(0, 256, rows * VALUE_SIZE, dtype=np.uint8).tobytes()
    value_offsets = np.arange(rows + 1, dtype=np.int32) * np.int32(VALUE_SIZE)
    timestamps = 1_700_000_000_000_000 + np.arange(rows, dtype=np.int64) * 1000
    columns = [
        pa.nulls(rows, pa.binary()),
        pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)]),
        constant_string(topic, rows),
        pa.array(np.zeros(rows, dtype=np.int32)),
        pa.array(np.arange(rows, dtype=np.int64)),
        pa.array(timestamps, pa.timestamp("us", tz="UTC")),
        pa.array(np.zeros(rows, dtype=np.int32)),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(False))
    _template[:] = [batch]
    return batch


class MemoryPartition(InputPartition):
    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__(None)
        self.sizes = list(sizes)


class MemoryBatchesReader(DataSourceReader):
    def __init__(self, batches: list[list[int]], topic: str) -> None:
        self.batches = batches
        self.topic = topic

    def partitions(self) -> Sequence[InputPartition]:
        return [MemoryPartition(sizes) for sizes in self.batches]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MemoryPartition)
        if not partition.sizes:
            return
        batch = template(max(partition.sizes), self.topic)
        for n in partition.sizes:
            yield batch.slice(0, n)


class MemoryBatchesDataSource(DataSource):
    """`format("bench-memory-batches")`: `batches`, a JSON list (partitions) of lists (batch rows); `topic`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self):  # -> StructType
        return spark_schema(False)

    def reader(self, schema) -> DataSourceReader:  # noqa: ANN001 - pyspark's StructType
        return MemoryBatchesReader(json.loads(self.options["batches"]), self.options.get("topic", "bench"))
