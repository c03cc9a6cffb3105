"""Packing the planner's splits into the columnar scan's Spark tasks, the way Spark packs files.

The planner (`FilteringBatchReader.partitions`) makes one input partition per segment split: the unit of
reading, chosen by the source's rules. Spark's own file sources do not run one task per file either:
`FilePartition.getFilePartitions` packs files into tasks of up to `maxSplitBytes`, where

    maxSplitBytes = min(spark.sql.files.maxPartitionBytes,
                        max(spark.sql.files.openCostInBytes, totalBytes / minPartitionNum))

`totalBytes` counts each file plus the open cost and `minPartitionNum` is
`spark.sql.files.minPartitionNum` or the default parallelism. Why the columnar scan packs too: a
Spark task has a fixed price (scheduling, a worker round trip, a reader set up, a decryption key
unwrapped), measured at ~4 ms on local[2] beside a split's own ~10-20 ms of decoding, and a header-only
`count()` spends more on 16 tasks than on its data. With more cores than splits nothing is packed.

Where it departs from Spark: the number of tasks. Spark's next-fit leaves a short last task (26 splits of
~11 MiB at 128 MiB per task: 8, 8, 8 and 2 splits), and on two cores the slot that runs the short one
then idles while the other finishes a whole task: measured on the benchmark's `sum(crc32(value))`, tasks
of 482, 539, 407 and 117 ms, one core idle for a quarter of the query. Here the count is Spark's (the
fewest tasks of at most maxSplitBytes) rounded up to a multiple of minPartitionNum (the slots), and the
splits are cut into runs of about equal bytes, the bigger first (7, 7, 6, 6 splits): every slot gets the
same work.

What is not changed: which rows each split gives, and their order. Splits are packed in the planner's
order (consecutive runs, not Spark's size-sorted first-fit), and a task reads its splits one after the other,
so a packed scan returns the same rows in the same order as one task per split. Only splits of the
tiered store are packed; a hybrid query's live tail from the brokers stays a task of its own. A query
whose options choose its tasks (`minPartitions`, `maxRecordsPerPartition`, as in Spark's Kafka source)
is not packed at all (`jvm_ops._plan`).
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_reader.offset_range import OffsetRangePartition


def split_bytes(part: object) -> int | None:
    """The stored bytes a split reads (`OffsetRangePartition.stored_bytes`); None for one that is never
    packed: a live tail from the brokers, or anything not a split."""
    return part.stored_bytes() if isinstance(part, OffsetRangePartition) else None


def pack(parts: Sequence[object], max_bytes: int, open_cost: int, min_partitions: int) -> list[list[object]]:
    """The tasks: runs of consecutive tiered splits, as many as Spark's `maxSplitBytes` needs rounded up
    to a multiple of the slots, of about equal bytes (module docstring)."""
    sizes = [split_bytes(p) for p in parts]
    slots = max(1, min_partitions)
    total = sum(s + open_cost for s in sizes if s is not None)
    limit = min(max_bytes, max(open_cost, total // slots))
    tasks: list[list[object]] = []
    run: list[tuple[object, int]] = []
    for part, size in zip(parts, sizes, strict=True):
        if size is not None:
            run.append((part, size + open_cost))
            continue
        tasks += _even_runs(run, limit, slots)
        tasks.append([part])
        run = []
    return tasks + _even_runs(run, limit, slots)


def _even_runs(run: Sequence[tuple[object, int]], limit: int, slots: int) -> list[list[object]]:
    """`run` (splits with their packing weight) cut into consecutive runs of about equal weight: the fewest
    of at most `limit` each (by next-fit, as Spark counts them), rounded up to a multiple of `slots`."""
    if not run:
        return []
    fewest, filled = 1, 0
    for _, weight in run:
        if filled and filled + weight > limit:
            fewest, filled = fewest + 1, 0
        filled += weight
    count = min(len(run), -(-fewest // slots) * slots)
    # each task takes splits until it holds its share of what is left, the split that crosses the share
    # included: earlier tasks come out a little bigger, never smaller, than later ones, which is what
    # Spark's slots want (they take tasks in order; a small one last evens them out)
    tasks: list[list[object]] = []
    left = sum(weight for _, weight in run)
    i = 0
    for k in range(count):
        share, taken, task = left / (count - k), 0, []
        last = k == count - 1  # takes whatever is left (splits of no weight included)
        while i < len(run) and (not task or last or (taken < share and len(run) - i > count - k - 1)):
            task.append(run[i][0])
            taken += run[i][1]
            i += 1
        tasks.append(task)
        left -= taken
    return tasks
