"""Index integrity: a segment's ``.index`` / ``.timeindex`` against its batches (segment_format.index_check).

Indexes built by the project's builder (Kafka's rule, checked elsewhere against Kafka's own files) and the
real brokers' fixtures pass; every kind of damaged entry is refused naming the index file and the entry.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from fixtures_data import FIXTURES

from segment_format.errors import CorruptRecordError
from segment_format.index_check import SegmentIndexChecker
from segment_format.indexes import build_indexes
from segment_format.log_entries import iter_batches
from segment_format.segment import LogSegment, SegmentVerifier
from segment_format.writer import build_batch

BASE = 1000


def _segment(batches: int = 40, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    out, offset, ts = [], BASE, 1_700_000_000_000
    for _ in range(batches):
        n = rng.randint(1, 30)
        records = []
        for _ in range(n):
            ts += rng.randint(-5, 20)  # timestamps go back a little now and then
            records.append((b"k", rng.randbytes(rng.randint(10, 200)), [], ts))
        out.append(build_batch(records, base_offset=offset))
        offset += n
    return b"".join(out)


def _check(log: bytes, offset_index: bytes | None, time_index: bytes | None, chunk: int = 1000) -> None:
    checker = SegmentIndexChecker(
        BASE,
        offset_index=offset_index,
        time_index=time_index,
        offset_index_file="x.index",
        time_index_file="x.timeindex",
    )
    verifier = SegmentVerifier(file="x.log", base_offset=BASE, indexes=checker, exact_end_offset=False)
    for i in range(0, len(log), chunk):
        verifier.update(log[i : i + chunk])
    verifier.finish()


def _batches(log: bytes) -> list[tuple[int, int, int, int]]:
    return [(p, b.base_offset, b.last_offset, b.max_timestamp) for p, b in iter_batches(log)]


def test_built_indexes_pass() -> None:
    log = _segment()
    for interval in (0, 100, 4096, 10**9):
        offset_index, time_index = build_indexes(log, BASE, interval)
        _check(log, offset_index, time_index)
    offset_index, time_index = build_indexes(log, BASE, 100)
    assert len(offset_index) > 8 * 10 and len(time_index) > 12 * 5
    _check(log, offset_index + bytes(80), time_index + bytes(24))  # a preallocated zero tail
    _check(log, b"", b"")
    _check(log, None, None)


def test_real_brokers_indexes_pass() -> None:
    segments = [
        LogSegment(p)
        for p in sorted(FIXTURES.glob("public/segments/*/*/*.log"))
        if p.with_suffix(".index").exists()
    ]
    assert len(segments) >= 4
    for segment in segments:
        segment.verify(check_indexes=True)


def _entry(data: bytes, fmt: str, i: int) -> tuple[int, ...]:
    return struct.unpack_from(fmt, data, i * struct.calcsize(fmt))


def _put(data: bytes, fmt: str, i: int, *fields: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, i * struct.calcsize(fmt), *fields)
    return bytes(out)


def _refused(log: bytes, offset_index: bytes, time_index: bytes, file: str, entry: int, words: str) -> None:
    with pytest.raises(CorruptRecordError) as info:
        _check(log, offset_index, time_index)
    assert info.value.file == file
    assert info.value.position == entry * (8 if file == "x.index" else 12)
    assert words in info.value.reason, info.value.reason


def test_damaged_offset_index_entries_are_refused() -> None:
    log = _segment()
    oi, ti = build_indexes(log, BASE, 100)
    batches = _batches(log)
    rel, pos = _entry(oi, ">ii", 3)
    _refused(log, _put(oi, ">ii", 3, rel, pos + 1), ti, "x.index", 3, "not the start of a batch")
    _refused(log, _put(oi, ">ii", 3, rel, pos - 1), ti, "x.index", 3, "not the start of a batch")
    start = next(i for i, b in enumerate(batches) if b[0] == pos)
    before = batches[start - 1][2] - BASE  # the previous batch's last offset, still above entry 2's
    if before > _entry(oi, ">ii", 2)[0]:
        _refused(log, _put(oi, ">ii", 3, before, pos), ti, "x.index", 3, "where the batch holds offsets")
    last_rel, last_pos = _entry(oi, ">ii", len(oi) // 8 - 1)
    past = _put(oi, ">ii", len(oi) // 8 - 1, last_rel, len(log) + 10)
    _refused(log, past, ti, "x.index", len(oi) // 8 - 1, "past the end")
    inside = oi + struct.pack(">ii", batches[-1][2] - BASE + 1, batches[-1][0] + 5)
    _refused(log, inside, ti, "x.index", len(oi) // 8, "not the start of a batch")
    # out of order: refused when parsed
    swapped = _put(_put(oi, ">ii", 4, *_entry(oi, ">ii", 3)), ">ii", 3, *_entry(oi, ">ii", 4))
    _refused(log, swapped, ti, "x.index", 4, "out of order")


def test_damaged_time_index_entries_are_refused() -> None:
    log = _segment()
    oi, ti = build_indexes(log, BASE, 100)
    ts, rel = _entry(ti, ">qi", 2)
    prev_ts = _entry(ti, ">qi", 1)[0]
    if ts - 1 > prev_ts:
        _refused(log, oi, _put(ti, ">qi", 2, ts - 1, rel), "x.timeindex", 2, "largest timestamp")
    last = len(ti) // 12 - 1
    last_ts, last_rel = _entry(ti, ">qi", last)
    _refused(log, oi, _put(ti, ">qi", last, last_ts + 1, last_rel), "x.timeindex", last, "largest timestamp")
    end = _batches(log)[-1][2] - BASE
    _refused(log, oi, ti + struct.pack(">qi", last_ts + 5, end + 1), "x.timeindex", last + 1, "no batch")
    _refused(log, oi, _put(ti, ">qi", 2, prev_ts - 1, rel), "x.timeindex", 2, "out of order")


def test_offset_in_a_gap_between_batches_is_refused() -> None:
    # two batches with an offset gap between them (a compacted log)
    log = build_batch([(b"k", b"v", [], 10)], base_offset=BASE) + build_batch(
        [(b"k", b"v", [], 20)], base_offset=BASE + 5
    )
    _check(log, struct.pack(">ii", 5, len(log) // 2), struct.pack(">qi", 10, 0) + struct.pack(">qi", 20, 5))
    with pytest.raises(CorruptRecordError, match="which no batch of the segment holds"):
        _check(log, b"", struct.pack(">qi", 10, 0) + struct.pack(">qi", 20, 3))


def test_log_segment_verify_checks_sibling_indexes(tmp_path: Path) -> None:
    log = _segment()
    oi, ti = build_indexes(log, BASE, 100)
    path = tmp_path / f"{BASE:020d}.log"
    path.write_bytes(log)
    path.with_suffix(".index").write_bytes(oi)
    path.with_suffix(".timeindex").write_bytes(ti)
    LogSegment(path).verify(check_indexes=True)
    rel, pos = _entry(oi, ">ii", 1)
    path.with_suffix(".index").write_bytes(_put(oi, ">ii", 1, rel, pos + 3))
    LogSegment(path).verify()  # without the option the indexes are not read
    with pytest.raises(CorruptRecordError) as info:
        LogSegment(path).verify(check_indexes=True)
    assert info.value.file == str(path.with_suffix(".index")) and info.value.position == 8
