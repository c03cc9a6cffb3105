"""Packing the planner's splits into the columnar scan's Spark tasks, the way Spark packs files.

The planner (`FilteringBatchReader.partitions`) makes one input partition per segment split: the unit of
reading, chosen by the source's rules. Spark's own file sources do not run one task per file either:
`FilePartition.getFilePartitions` packs files into tasks of up to `maxSplitBytes`, where

    maxSplitBytes = min(spark.sql.files.maxPartitionBytes,
                        max(spark.sql.files.openCostInBytes, totalBytes / minPartitionNum))

`totalBytes` counts each file plus the open cost and `minPartitionNum` is
`spark.sql.files.minPartitionNum` or the default parallelism. Why the columnar scan does the same: a
Spark task has a fixed price (scheduling, a worker round trip, a reader set up, a decryption key
unwrapped), measured at ~4 ms on local[2] beside a split's own ~10-20 ms of decoding, and a header-only
`count()` spends more on 16 tasks than on its data. With more cores than splits nothing is packed.

What is not changed: which rows each split gives, and their order. Splits are packed in the planner's
order (next-fit, not Spark's size-sorted first-fit), and a task reads its splits one after the other,
so a packed scan returns the same rows in the same order as one task per split. Only splits of the
tiered store are packed; a hybrid query's live tail from the brokers stays a task of its own. A query
whose options choose its tasks (`minPartitions`, `maxRecordsPerPartition`, as in Spark's Kafka source)
is not packed at all (`jvm_ops._plan`).
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_reader.partition_reader import TieredPartition


def split_bytes(part: object) -> int | None:
    """The stored bytes a tiered split reads; None for a partition that is never packed."""
    if not isinstance(part, TieredPartition):
        return None
    return max(0, part.split.end_position - part.split.start_position)


def pack(parts: Sequence[object], max_bytes: int, open_cost: int, min_partitions: int) -> list[list[object]]:
    """The tasks: runs of consecutive tiered splits of at most Spark's `maxSplitBytes` (module docstring)."""
    sizes = [split_bytes(p) for p in parts]
    total = sum(s + open_cost for s in sizes if s is not None)
    limit = min(max_bytes, max(open_cost, total // max(1, min_partitions)))
    tasks: list[list[object]] = []
    current: list[object] = []
    filled = 0
    for part, size in zip(parts, sizes, strict=True):
        if size is None:
            if current:
                tasks.append(current)
            tasks.append([part])
            current, filled = [], 0
            continue
        if current and filled + size > limit:
            tasks.append(current)
            current, filled = [], 0
        current.append(part)
        filled += size + open_cost
    if current:
        tasks.append(current)
    return tasks
