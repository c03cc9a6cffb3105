"""Packing the planner's splits into the columnar scan's tasks (`spark_reader.packing`): Spark's
maxSplitBytes rule for how big a task may be, a task count that is a multiple of the slots with the
splits spread evenly (no slot idles behind a short last task), consecutive runs in the planner's order
(so rows keep their order), nothing packed when there are cores enough, and a hybrid query's live tail
never packed; a packed task read by the worker (`jvm_ops.read`) gives the rows and the count of its
splits read one by one.
"""

from __future__ import annotations

import io
import pickle
from types import SimpleNamespace

import pyarrow as pa
import pytest

from spark_reader.packing import pack, split_bytes
from spark_reader.partition_reader import TieredPartition

MIB = 1 << 20


def _split(size: int, n: int) -> TieredPartition:
    part = TieredPartition.__new__(TieredPartition)
    part.split = SimpleNamespace(start_position=0, end_position=size, n=n)
    return part


def test_splits_are_packed_like_spark_files_in_the_planners_order() -> None:
    parts = [_split(10 * MIB, i) for i in range(16)]
    tasks = pack(parts, max_bytes=128 * MIB, open_cost=4 * MIB, min_partitions=2)
    assert [len(t) for t in tasks] == [8, 8]
    assert [p.split.n for t in tasks for p in t] == list(range(16))


@pytest.mark.parametrize("slots", [2, 3])
def test_every_slot_gets_the_same_work(slots: int) -> None:
    """26 splits of 11 MiB at 128 MiB per task: Spark's next-fit makes 8, 8, 8, 2 (one slot idles through
    a whole task at the end); here as many tasks as that, rounded up to a multiple of the slots, evened,
    the bigger first (Spark's slots take tasks in order)."""
    parts = [_split(11 * MIB, i) for i in range(26)]
    tasks = pack(parts, max_bytes=128 * MIB, open_cost=4 * MIB, min_partitions=slots)
    sizes = [len(t) for t in tasks]
    assert len(tasks) % slots == 0
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert all(sum(p.split.end_position + 4 * MIB for p in t) <= 128 * MIB for t in tasks)
    assert [p.split.n for t in tasks for p in t] == list(range(26))
    if slots == 2:
        assert sizes == [7, 7, 6, 6]


def test_uneven_splits_keep_their_order_and_leave_no_task_empty() -> None:
    sizes = [100, 1, 1, 1, 1, 60, 2, 2, 50, 3]
    parts = [_split(s * MIB, i) for i, s in enumerate(sizes)]
    tasks = pack(parts, max_bytes=128 * MIB, open_cost=4 * MIB, min_partitions=4)
    assert all(tasks) and len(tasks) % 4 == 0
    assert [p.split.n for t in tasks for p in t] == list(range(len(sizes)))


def test_splits_of_no_weight_are_packed_too() -> None:
    """openCostInBytes 0 and empty splits (start == end) weigh nothing: every split still lands in a task."""
    parts = [_split(s * MIB, i) for i, s in enumerate([10, 0, 0, 10, 0])]
    for slots in (1, 2):
        tasks = pack(parts, max_bytes=128 * MIB, open_cost=0, min_partitions=slots)
        assert [p.split.n for t in tasks for p in t] == list(range(5)) and all(tasks)


def test_nothing_is_packed_with_cores_enough_and_tasks_stay_under_max_bytes() -> None:
    parts = [_split(10 * MIB, i) for i in range(16)]
    assert [len(t) for t in pack(parts, 128 * MIB, 4 * MIB, min_partitions=200)] == [1] * 16
    tasks = pack(parts, max_bytes=30 * MIB, open_cost=4 * MIB, min_partitions=1)
    assert [len(t) for t in tasks] == [2] * 8


def test_a_partition_not_of_the_store_stands_alone() -> None:
    tail = object()
    parts = [_split(MIB, 0), _split(MIB, 1), tail, _split(MIB, 2)]
    tasks = pack(parts, 128 * MIB, 4 * MIB, min_partitions=1)
    assert [len(t) for t in tasks] == [2, 1, 1]
    assert tasks[1] == [tail] and split_bytes(tail) is None


@pytest.mark.parametrize("count", [False, True])
def test_a_packed_task_reads_its_splits_in_order(monkeypatch: pytest.MonkeyPatch, count: bool) -> None:
    from spark_reader import jvm_ops

    parts = [_split(MIB, i) for i in range(3)]
    for p in parts:
        p.settings = SimpleNamespace(include_headers=False, violations="include")

    def rows(part, columns):  # noqa: ANN001, ANN202
        yield pa.record_batch([pa.array([part.split.n] * (part.split.n + 1), pa.int64())], names=["offset"])

    monkeypatch.setattr(jvm_ops, "read_partition", rows)
    monkeypatch.setattr(jvm_ops, "count_partition", lambda part: part.split.n + 1)
    monkeypatch.delenv(jvm_ops.STATS_ENV, raising=False)
    out = io.BytesIO()
    status, trailer, _ = jvm_ops.read({"columns": ["offset"], "count": count}, pickle.dumps(parts), out)
    assert status == jvm_ops.OK and trailer["rows"] == 6
    if not count:
        table = pa.ipc.open_stream(out.getvalue()).read_all()
        assert table.column("offset").to_pylist() == [0, 1, 1, 2, 2, 2]
