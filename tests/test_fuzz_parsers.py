"""Fuzzing the parsers: random and mutated bytes raise only CorruptRecordError, never hang or blow up.

Bounded (max_examples, deadline) so it stays in the normal suite. Memory is capped with RLIMIT_AS in
each test so that a bogus length allocating its claimed size fails loudly as MemoryError.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_format import (
    CompressionType,
    CorruptRecordError,
    LeaderEpochCheckpoint,
    OffsetIndex,
    ProducerSnapshot,
    ProducerStateEntry,
    SegmentVerifier,
    TimeIndex,
    TransactionIndex,
    build_batch,
    build_control_batch,
    compress,
    decompress,
    iter_batches,
)
from segment_format.records import ControlRecordType

FUZZ = settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "200")),
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
MEMORY_CAP = 2 * 1024**3  # far above what parsing these inputs needs, far below a bogus 2 GiB-per-length


@pytest.fixture(autouse=True)
def _cap_memory() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = MEMORY_CAP + _current_vm()
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _current_vm() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _seed_log() -> bytes:
    parts = []
    offset = 0
    for i, codec in enumerate(CompressionType):
        recs = [(f"k{j}".encode(), b"v" * (j * 7), [("h", b"x")], 1000 + j) for j in range(3)]
        parts.append(build_batch(recs, base_offset=offset, compression=codec, producer_id=i, producer_epoch=0,
                                 base_sequence=0))  # fmt: skip
        offset += 3
    parts.append(build_control_batch(ControlRecordType.COMMIT, base_offset=offset, producer_id=1, producer_epoch=0,
                                     timestamp=5))  # fmt: skip
    offset += 1
    for magic in (0, 1):
        for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4):
            parts.append(build_batch([(b"a", b"b", [], 7), (None, b"c", [], 8)], base_offset=offset, magic=magic,
                                     compression=codec))  # fmt: skip
            offset += 2
    return b"".join(parts)


SEED = _seed_log()


def parse_everything(data: bytes) -> None:
    """Everything a reader does with a log: iterate, check CRCs, decode records, verify."""
    for _, batch in iter_batches(data, file="fuzz.log", strict=False):
        batch.is_valid()
        batch.records()
    v = SegmentVerifier(file="fuzz.log", deep=True)
    v.update(data)
    v.finish()


def only_corrupt(fn, data: bytes) -> None:  # type: ignore[no-untyped-def]
    try:
        fn(data)
    except CorruptRecordError as exc:
        assert exc.reason and str(exc).startswith(exc.file or "<bytes>")


@st.composite
def mutated(draw: st.DrawFn, seed: bytes = SEED) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x01]))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[pos : pos + draw(st.integers(1, 16))]
    return bytes(data)


@FUZZ
@given(mutated())
def test_mutated_logs_raise_only_corrupt_record_error(data: bytes) -> None:
    only_corrupt(parse_everything, data)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_corrupt_record_error(data: bytes) -> None:
    only_corrupt(parse_everything, data)


@FUZZ
@given(st.sampled_from([c for c in CompressionType if c is not CompressionType.NONE]), st.data())
def test_mutated_compressed_payloads(codec: CompressionType, data: st.DataObject) -> None:
    good = compress(codec, b"some record bytes " * 40)
    bad = data.draw(mutated(good))
    only_corrupt(lambda d: decompress(codec, d), bad)
    only_corrupt(lambda d: decompress(codec, d, magic=0), bad)


INDEX_SEEDS = {
    "index": OffsetIndex(0).to_bytes() + bytes.fromhex("0000000a00001000000000140000200000000030"),
    "snapshot": ProducerSnapshot([ProducerStateEntry(1, 0, 5, 10, 2, 99, -1, -1)]).to_bytes(),
    "checkpoint": b"0\n2\n0 0\n3 100\n",
}


@FUZZ
@given(st.sampled_from(sorted(INDEX_SEEDS)), st.data())
def test_mutated_index_files(kind: str, data: st.DataObject) -> None:
    raw = data.draw(mutated(INDEX_SEEDS[kind]))
    parsers = {
        "index": [lambda d: OffsetIndex.from_bytes(d, 0), lambda d: TimeIndex.from_bytes(d, 0),
                  lambda d: TransactionIndex.from_bytes(d)],
        "snapshot": [lambda d: ProducerSnapshot.from_bytes(d)],
        "checkpoint": [lambda d: LeaderEpochCheckpoint.from_bytes(d)],
    }[kind]  # fmt: skip
    for parse in parsers:
        only_corrupt(parse, raw)
