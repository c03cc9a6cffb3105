"""One protocol for a partition's history: `PartitionHistory` (every manifest) and `RangedHistory` (the
manifests a range needs) both are a `rsm.catalog.History`, with the same operations readers call.

That both answer alike is tested against real stores in tests/rsm/test_ranged_planning.py; this holds the
shape: every operation of the protocol exists on both with parameters a caller of the protocol can pass.
"""

from __future__ import annotations

import inspect
import uuid

import pytest

from rsm.catalog import History, PartitionHistory, RangedHistory

OPERATIONS = [
    name for name, _ in inspect.getmembers(History) if not name.startswith("_") and name in vars(History)
]


def _histories() -> list[object]:
    whole = PartitionHistory(3, (), (), (), ())
    ranged = RangedHistory(None, "t", uuid.uuid4(), 3, [])  # type: ignore[arg-type] - nothing is read
    return [whole, ranged]


def test_the_protocol_names_what_readers_ask() -> None:
    assert sorted(OPERATIONS) == sorted(
        ["partition", "first_offset", "next_offset", "last_slice", "between", "gaps_between",
         "first_at_timestamp", "walk"]
    )  # fmt: skip


@pytest.mark.parametrize("history", _histories(), ids=["PartitionHistory", "RangedHistory"])
def test_both_histories_are_a_history(history: object) -> None:
    assert isinstance(history, History)
    for name in OPERATIONS:
        wanted = vars(History)[name]
        if isinstance(wanted, property):
            continue
        got = inspect.signature(getattr(history, name))
        params = list(inspect.signature(wanted).parameters)[1:]  # without self
        assert list(got.parameters)[: len(params)] == params, (type(history).__name__, name, got)
        assert all(p.default is not p.empty for p in list(got.parameters.values())[len(params) :]), name


@pytest.mark.parametrize("history", _histories(), ids=["PartitionHistory", "RangedHistory"])
def test_an_empty_history_answers_alike(history: History) -> None:
    assert history.partition == 3
    assert (history.first_offset, history.next_offset, history.last_slice) == (None, None, None)
    assert history.between(0, 10) == [] and history.gaps_between(0, 10) == []
    assert history.first_at_timestamp(0) is None and list(history.walk(0)) == []
