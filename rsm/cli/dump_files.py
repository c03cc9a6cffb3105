"""Dumping files on disk as Kafka's kafka-dump-log prints them (text) or as JSON: what `rsm dump-log` does
for local files, and for a tiered segment once it is materialised from the store (`rsm.cli.dump_tiered`)."""

from __future__ import annotations

import argparse
import base64
import errno
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from segment_format import (
    ControlRecordType,
    CorruptRecordError,
    EndTransactionMarker,
    LeaderEpochCheckpoint,
    LogSegment,
    OffsetIndex,
    ProducerSnapshot,
    TimeIndex,
    TransactionIndex,
    parse_segment_name,
)
from segment_format.log_entries import AnyRecordBatch
from segment_format.records import Record

log = logging.getLogger(__name__)

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def record_to_dict(record: Record, batch: AnyRecordBatch) -> dict[str, Any]:
    """A record as the oracle / kafka-dump-log names its fields (key, value base64)."""
    out: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "sequence": record.sequence,
        "sizeInBytes": record.size_in_bytes,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [{"key": h.key, "value": _b64(h.value)} for h in record.headers],
    }
    if batch.is_control_batch:
        ctype = ControlRecordType.parse(record.key)
        out["controlType"] = ctype.name
        if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            out["coordinatorEpoch"] = EndTransactionMarker.from_record(record).coordinator_epoch
    return out


def batch_to_dict(batch: AnyRecordBatch, *, with_records: bool) -> dict[str, Any]:
    """A batch with kafka-dump-log's field names."""
    out: dict[str, Any] = {
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": batch.record_count,
        "position": batch.position,
        "size": batch.size_in_bytes,
        "magic": batch.magic,
        "compressCodec": batch.compression_type.kafka_name,
        "crc": batch.crc,
        "isValid": batch.is_valid(),
        "timestampType": batch.timestamp_type.kafka_name,
        "maxTimestamp": batch.max_timestamp,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "baseSequence": batch.base_sequence,
        "lastSequence": batch.last_sequence,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control_batch,
        "deleteHorizonMs": batch.delete_horizon_ms,
    }
    if with_records:
        out["records"] = [record_to_dict(r, batch) for r in batch.records()]
    return out


def _kind(path: Path) -> str:
    if path.name == "leader-epoch-checkpoint" or path.name.endswith(".leader-epoch-checkpoint"):
        return "leader-epoch-checkpoint"
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            return suffix
    raise ValueError(f"{path}: do not know how to dump it (.log, .index, .timeindex, .txnindex, .snapshot)")


def dump_file(path: Path, *, print_data: bool = False, verify: bool = False) -> Iterator[dict[str, Any]]:
    """Dump one file as dicts (one per batch or entry); CorruptRecordError on corruption.

    With ``verify``, a batch with a bad CRC raises instead of being reported with ``isValid: false``.
    """
    kind = _kind(path)
    if kind == ".log":
        segment = LogSegment(path, base_offset=_base_offset_or_zero(path))
        if verify:
            segment.verify(deep=True)
        for batch in segment.batches():
            yield batch_to_dict(batch, with_records=print_data)
    elif kind == ".index":
        base = parse_segment_name(path)
        index = OffsetIndex.read(path, base)
        if verify:
            _verify_offset_index(path, index)
        for e in index:
            yield {"offset": e.offset, "relativeOffset": e.offset - base, "position": e.position}
    elif kind == ".timeindex":
        base = parse_segment_name(path)
        tindex = TimeIndex.read(path, base)
        if verify:
            _verify_time_index(path, tindex)
        for t in tindex:
            yield {"timestamp": t.timestamp, "offset": t.offset, "relativeOffset": t.offset - base}
    elif kind == ".txnindex":
        for a in TransactionIndex.read(path):
            yield {
                "producerId": a.producer_id,
                "firstOffset": a.first_offset,
                "lastOffset": a.last_offset,
                "lastStableOffset": a.last_stable_offset,
            }
    elif kind == ".snapshot":
        for s in ProducerSnapshot.read(path):
            yield {
                "producerId": s.producer_id,
                "producerEpoch": s.producer_epoch,
                "coordinatorEpoch": s.coordinator_epoch,
                "lastTimestamp": s.timestamp,
                "currentTxnFirstOffset": s.current_txn_first_offset,
                "lastSequence": s.last_sequence,
                "lastOffset": s.last_offset,
                "offsetDelta": s.offset_delta,
            }
    else:
        for e in LeaderEpochCheckpoint.read(path):
            yield {"epoch": e.epoch, "startOffset": e.start_offset}


def _base_offset_or_zero(path: Path) -> int:
    try:
        return parse_segment_name(path)
    except ValueError:
        return 0


def _verify_offset_index(path: Path, index: OffsetIndex) -> None:
    """Each entry must point at the start of a batch of the sibling .log holding its offset."""
    log_path = path.with_suffix(".log")
    if not log_path.exists():
        return
    spans = {b.position: (b.base_offset, b.last_offset) for b in LogSegment(log_path).batches()}
    for i, e in enumerate(index):
        span = spans.get(e.position)
        if span is None or not span[0] <= e.offset <= span[1]:
            raise CorruptRecordError(
                f"index entry {i} ({e.offset} -> {e.position}) does not point at the batch holding that offset "
                f"in {log_path.name}",
                file=str(path),
                position=i * 8,
            )


def _verify_time_index(path: Path, tindex: TimeIndex) -> None:
    """Each entry's offset must be in the sibling .log and its timestamp reached by then."""
    log_path = path.with_suffix(".log")
    if not log_path.exists():
        return
    # (base offset, last offset, max timestamp) only: batch bytes are not kept
    spans = [(b.base_offset, b.last_offset, b.max_timestamp) for b in LogSegment(log_path).batches()]
    for i, t in enumerate(tindex):
        if not any(base <= t.offset <= last for base, last, _ in spans):
            raise CorruptRecordError(
                f"time index entry {i} ({t.timestamp}, {t.offset}) names an offset not in {log_path.name}",
                file=str(path),
                position=i * 12,
            )
        if not any(ts >= t.timestamp for _, last, ts in spans if last <= t.offset):
            raise CorruptRecordError(
                f"time index entry {i}: timestamp {t.timestamp} not reached by offset {t.offset}",
                file=str(path),
                position=i * 12,
            )


def _kafka_options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from rsm.cli.kafka_dump import Options

    return Options(
        print_data=args.print_data_log,
        deep=args.deep_iteration or args.print_data_log,
        skip_record_metadata=args.skip_record_metadata,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
        max_payload=args.max_payload,
    )


def dump_text(
    path: str, out: BinaryIO, err: BinaryIO, opts: Any, findings: Any, shown: str | None = None
) -> None:
    """One file as Kafka's DumpLogSegments prints it (``Dumping ...`` line included); ``shown`` is the
    name printed for it (a tiered segment's object rather than its temporary copy)."""
    from rsm.cli import kafka_dump as k

    # a stored object's name is printed as it is (`s3://b/k`: Java's File would fold its '//'); a path as Java
    name = shown if shown is not None else k.java_file_name(path)
    out.write(b"Dumping " + name.encode("utf-8", "surrogateescape") + b"\n")
    _must_exist(Path(path))
    kind = _kind(Path(path))
    if kind == ".log":
        k.dump_log(path, out, opts, findings, shown)
    elif kind == ".index":
        k.dump_index(path, out, opts, findings, shown)
    elif kind == ".timeindex":
        k.dump_time_index(path, out, opts, findings, shown)
    elif kind == ".txnindex":
        k.dump_txn_index(path, out)
    elif kind == ".snapshot":
        k.dump_producer_snapshot(path, out, err)
    else:
        k.dump_leader_epoch_checkpoint(path, out)


def _must_exist(path: Path) -> None:
    """A missing file is said to be missing first, before its name is parsed (Kafka's tool says so too)."""
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))


def verify_file(path: Path, shown: str | None = None) -> str:
    """``--verify``: check one file whole; the line saying what was checked (CorruptRecordError if bad)."""
    kind = _kind(path)
    name = shown or str(path)
    if kind == ".log":
        summary = LogSegment(path, base_offset=_base_offset_or_zero(path)).verify(deep=True)
        if not summary.batch_count:
            return f"Verified {name}: no batches"
        return (
            f"Verified {name}: {summary.batch_count} batches, {summary.record_count} records, offsets "
            f"{summary.base_offset}..{summary.last_offset}; every CRC, size and offset is intact"
        )
    items = list(dump_file(path, verify=True))
    what = {
        ".index": "each entry points at the batch of the .log holding its offset",
        ".timeindex": "each entry names an offset of the .log whose timestamp is reached by then",
        ".txnindex": "entries parse",
        ".snapshot": "the CRC matches and entries parse",
        "leader-epoch-checkpoint": "entries parse",
    }[kind]
    if kind in (".index", ".timeindex") and not path.with_suffix(".log").exists():
        what = "entries parse (no .log beside it to check them against)"
    return f"Verified {name}: {len(items)} entries; {what}"


def dump_files(args: argparse.Namespace, files: list[str], shown: dict[str, str] | None = None) -> int:
    """Dump local files (``shown`` maps a file to the name printed for it)."""
    from rsm.cli import kafka_dump as k

    out = sys.stdout.buffer
    err = sys.stderr
    status = 0
    opts = _kafka_options(args)
    findings = k.Findings()
    for name in files:
        path = Path(name)
        try:
            if args.json:
                _must_exist(path)
                for item in dump_file(path, print_data=args.print_data_log, verify=args.verify):
                    out.write((json.dumps({"file": str(path), **item}) + "\n").encode())
                    if args.verify and "isValid" in item and not item["isValid"]:
                        status = 1
                continue
            dump_text(name, out, err.buffer, opts, findings, shown.get(name) if shown else None)
            if args.verify:
                out.flush()
                verified = verify_file(path, shown.get(name) if shown else None)
                out.write((verified + "\n").encode("utf-8", "surrogateescape"))
        except CorruptRecordError as exc:
            status = 1
            out.flush()
            if args.json:
                doc = {"file": str(path), "error": exc.reason, "position": exc.position, "message": str(exc)}
                out.write((json.dumps(doc) + "\n").encode())
            err.write(f"rsm dump-log: corrupt: {exc}\n")
        except BrokenPipeError:
            raise
        except (k.DumpError, OSError, ValueError) as exc:
            status = 1
            out.flush()
            err.write(f"rsm dump-log: {shown.get(name, name) if shown else name}: {_reason(exc)}\n")
        err.flush()
    out.flush()
    for line in findings.lines(kafkas_start=not args.verify):
        err.write(line + "\n")
    if args.verify and findings:
        status = 1
    return status


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
