"""`.index`, `.timeindex`, `.txnindex`, producer `.snapshot` and `leader-epoch-checkpoint` files."""

from __future__ import annotations

import os
from typing import BinaryIO

from rsm.cli.kafka_dump.common import (
    INDEX_ENTRY,
    TIME_ENTRY,
    DumpError,
    Findings,
    Options,
    base_offset_of,
    decrement_sequence,
    java_file_name,
    optional_long,
)
from rsm.cli.kafka_dump.log import Batch, iter_entries
from segment_format.errors import CorruptRecordError

# ------------------------------------------------------------------------------------------- indexes


def _index_entries(path: str, size: int) -> list[tuple[int, int]]:
    with open(path, "rb") as fh:
        raw = fh.read()
    n = len(raw) // size
    fmt = INDEX_ENTRY if size == 8 else TIME_ENTRY
    return [fmt.unpack_from(raw, i * size) for i in range(n)]


def _first_batch_last_offset(log: memoryview, position: int, limit: int, file: str) -> int | None:
    view = log[position : min(len(log), position + limit)] if position <= len(log) else log[0:0]
    for b in iter_entries(view, file):
        return _last_offset(b, view)
    return None


def _last_offset(b: Batch, data: memoryview) -> int:
    if b.magic >= 2:
        return b.fields[0] + b.fields[6]
    return b.fields[0]


def _sibling(path: str, suffix: str) -> str:
    name = os.path.basename(path)
    return os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".")[0] + suffix)


def _read_log(path: str) -> memoryview:
    try:
        with open(path, "rb") as fh:
            return memoryview(fh.read())
    except FileNotFoundError:
        raise DumpError(path) from None


def dump_index(
    path: str, out: BinaryIO, opts: Options, findings: Findings, shown_as: str | None = None
) -> None:
    """DumpLogSegments.dumpIndex: entries checked against the sibling .log."""
    base = base_offset_of(os.path.basename(path))
    log = _read_log(_sibling(path, ".log"))
    raw_size = os.path.getsize(path)
    entries = _index_entries(path, 8)
    shown = java_file_name(shown_as or path).encode("utf-8", "surrogateescape")
    if not entries:
        out.write(shown + b" is empty.\n")
        return
    if opts.index_sanity_check:
        last = base + entries[-1][0]
        if last < base:
            raise DumpError(
                f"Corrupt index found, index file ({os.path.abspath(path)}) has non-zero size but the last "
                f"offset is {last} which is less than the base offset {base}."
            )
        if raw_size % 8:
            raise DumpError(
                f"Index file {os.path.basename(path)} is corrupt, found {raw_size} bytes which is neither "
                "positive nor a multiple of 8."
            )
        out.write(shown + b" passed sanity check.\n")
        return
    lines = []
    for i, (rel, position) in enumerate(entries):
        offset = base + rel
        if offset == base and i > 0:
            break
        last = _first_batch_last_offset(log, position, opts.max_message_size, path)
        if last is None:
            raise DumpError(f"index entry {i} ({offset} -> {position}) points at no batch of the log")
        if last != offset:
            findings.index_mismatches.setdefault(os.path.abspath(path), {})[offset] = last
        if not opts.verify_index_only:
            lines.append(b"offset: %d position: %d\n" % (offset, position))
    out.write(b"".join(lines))


def _lookup(entries: list[tuple[int, int]], base: int, target: int) -> int:
    """OffsetIndex.lookup: position of the largest entry with offset <= target, else 0."""
    found = 0
    lo, hi = 0, len(entries) - 1
    if not entries or base + entries[0][0] > target:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if base + entries[mid][0] <= target:
            lo = mid
        else:
            hi = mid - 1
    found = entries[lo][1]
    return found


def _max_record_timestamp(b: Batch, data: memoryview) -> int:
    from segment_format.log_entries import parse_batch

    batch = parse_batch(bytes(data[b.position : b.position + b.size]), position=b.position)
    return max((r.timestamp for r in batch.records()), default=-1)


def dump_time_index(
    path: str, out: BinaryIO, opts: Options, findings: Findings, shown_as: str | None = None
) -> None:
    """DumpLogSegments.dumpTimeIndex: entries checked against the .index and .log beside it."""
    base = base_offset_of(os.path.basename(path))
    log = _read_log(_sibling(path, ".log"))
    index_path = _sibling(path, ".index")
    if not os.path.exists(index_path):
        raise DumpError(f"{index_path} (No such file or directory)")
    index = _index_entries(index_path, 8)
    entries = _index_entries(path, 12)
    raw_size = os.path.getsize(path)
    shown = java_file_name(shown_as or path).encode("utf-8", "surrogateescape")
    name = os.path.abspath(path)
    if opts.index_sanity_check:
        if entries:
            first_ts, last_ts = entries[0][0], entries[-1][0]
            last_off = base + entries[-1][1]
            if last_ts < first_ts:
                raise DumpError(
                    f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                    f"timestamp is {last_ts} which is less than the first timestamp {first_ts}"
                )
            if last_off < base:
                raise DumpError(
                    f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                    f"offset is {last_off} which is less than the first offset {base}"
                )
        if raw_size % 12:
            raise DumpError(
                f"Time index file {os.path.basename(path)} is corrupt, found {raw_size} bytes which is neither "
                "positive nor a multiple of 12."
            )
        out.write(shown + b" passed sanity check.\n")
        return
    prev = -1
    lines = []
    for i, (ts, rel) in enumerate(entries):
        offset = base + rel
        if offset == base and i > 0:
            break
        position = _lookup(index, base, offset)
        view = log[position:]
        match = None
        for b in iter_entries(view, name):
            if _last_offset(b, view) >= offset:
                match = b
                break
        if match is None:
            findings.time_not_found.setdefault(name, []).append((offset, -1))
        elif _last_offset(match, view) != offset:
            findings.time_not_found.setdefault(name, []).append((offset, _last_offset(match, view)))
        else:
            max_ts = max(-1, _max_record_timestamp(match, view))
            if max_ts != ts:
                findings.time_mismatches.setdefault(name, []).append((ts, max_ts))
            if prev >= ts:
                findings.time_out_of_order.setdefault(name, []).append((ts, prev))
        if not opts.verify_index_only:
            lines.append(b"timestamp: %d offset: %d\n" % (ts, offset))
        prev = ts
    out.write(b"".join(lines))


def dump_txn_index(path: str, out: BinaryIO) -> None:
    from segment_format import TransactionIndex

    lines = [
        b"version: 0 producerId: %d firstOffset: %d lastOffset: %d lastStableOffset: %d\n"
        % (a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)
        for a in TransactionIndex.read(path)
    ]
    out.write(b"".join(lines))


def dump_producer_snapshot(path: str, out: BinaryIO, err: BinaryIO) -> None:
    from segment_format import ProducerSnapshot

    try:
        entries = list(ProducerSnapshot.read(path))
    except CorruptRecordError as exc:
        err.write(exc.reason.encode() + b"\n")
        return
    for e in entries:
        line = (
            b"producerId: %d producerEpoch: %d coordinatorEpoch: %d currentTxnFirstOffset: %s lastTimestamp: %d"
            % (e.producer_id, e.producer_epoch, e.coordinator_epoch,
               optional_long(e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None), e.timestamp)
        )  # fmt: skip
        if e.last_offset >= 0:
            line += b" firstSequence: %d lastSequence: %d lastOffset: %d offsetDelta: %d timestamp: %d" % (
                decrement_sequence(e.last_sequence, e.offset_delta), e.last_sequence, e.last_offset,
                e.offset_delta, e.timestamp)  # fmt: skip
        out.write(line + b"\n")


def dump_leader_epoch_checkpoint(path: str, out: BinaryIO) -> None:
    """Ours (Kafka's tool does not read it): one ``epoch: E startOffset: O`` line per entry."""
    from segment_format import LeaderEpochCheckpoint

    out.write(
        b"".join(
            b"epoch: %d startOffset: %d\n" % (e.epoch, e.start_offset)
            for e in LeaderEpochCheckpoint.read(path)
        )
    )
