"""``rsm dump-log FILE...``: the ``kafka-dump-log`` equivalent, built on :mod:`segment_format`.

Understands ``.log``, ``.index``, ``.timeindex``, ``.txnindex``, producer ``.snapshot`` and
``leader-epoch-checkpoint`` files. ``--json`` prints one JSON object per line with the field names Kafka
uses (camelCase, as kafka-dump-log and the test oracle print them); otherwise a human listing. With
``--verify`` every CRC, size and offset is checked (index entries against their ``.log``) and the exit
status is non-zero on any corruption, with a message naming file and byte.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

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
from segment_format.records import AnyRecordBatch, Record

log = logging.getLogger(__name__)

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``dump-log`` subcommand."""
    parser = subparsers.add_parser(
        "dump-log",
        help="print the content of Kafka log, index, snapshot and checkpoint files",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="segment files to dump")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print every record (keys, values, headers) of .log files",
    )
    parser.add_argument(
        "--verify", action="store_true", help="check CRCs, sizes and offsets; exit 1 on corruption"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--max-payload", type=int, default=200, help="human output: truncate keys/values to this many bytes"
    )
    parser.set_defaults(func=run)


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


def _human_batch(d: dict[str, Any]) -> str:
    ts_label = d["timestampType"] if d["timestampType"] != "NoTimestampType" else "NoTimestamp"
    return (
        f"baseOffset: {d['baseOffset']} lastOffset: {d['lastOffset']} count: {d['count']} "
        f"baseSequence: {d['baseSequence']} lastSequence: {d['lastSequence']} producerId: {d['producerId']} "
        f"producerEpoch: {d['producerEpoch']} partitionLeaderEpoch: {d['partitionLeaderEpoch']} "
        f"isTransactional: {str(d['isTransactional']).lower()} isControl: {str(d['isControl']).lower()} "
        f"deleteHorizonMs: {d['deleteHorizonMs']} position: {d['position']} {ts_label}: {d['maxTimestamp']} "
        f"size: {d['size']} magic: {d['magic']} compresscodec: {d['compressCodec']} crc: {d['crc']} "
        f"isvalid: {str(d['isValid']).lower()}"
    )


def _payload(b64: str | None, limit: int) -> str:
    if b64 is None:
        return "null"
    raw = base64.b64decode(b64)
    text = raw[:limit].decode("utf-8", errors="backslashreplace")
    return text + (f"... ({len(raw)} bytes)" if len(raw) > limit else "")


def _human_record(r: dict[str, Any], limit: int) -> str:
    parts = [f"| offset: {r['offset']} timestamp: {r['timestamp']} sequence: {r['sequence']}"]
    if "controlType" in r:
        parts.append(f"controlType: {r['controlType']}")
        if "coordinatorEpoch" in r:
            parts.append(f"coordinatorEpoch: {r['coordinatorEpoch']}")
    else:
        keys = [h["key"] for h in r["headers"]]
        parts.append(f"headerKeys: {keys}")
        parts.append(f"key: {_payload(r['key'], limit)}")
        parts.append(f"payload: {_payload(r['value'], limit)}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    """Dump every file; 1 when any file is corrupt (with --verify, also any bad CRC), else 0."""
    out = sys.stdout
    console = Console(file=out, highlight=False, soft_wrap=True)
    err_console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    status = 0
    for path in args.files:
        if not args.json:
            console.print(f"[bold]Dumping {escape(str(path))}[/bold]")
        try:
            for item in dump_file(path, print_data=args.print_data_log, verify=args.verify):
                if args.json:
                    out.write(json.dumps({"file": str(path), **item}) + "\n")
                elif "baseOffset" in item:
                    console.print(escape(_human_batch(item)))
                    for r in item.get("records", ()):
                        console.print(escape(_human_record(r, args.max_payload)))
                else:
                    console.print(escape(" ".join(f"{k}: {v}" for k, v in item.items())))
                if args.verify and "isValid" in item and not item["isValid"]:
                    status = 1
        except CorruptRecordError as exc:
            status = 1
            if args.json:
                out.write(
                    json.dumps(
                        {
                            "file": str(path),
                            "error": exc.reason,
                            "position": exc.position,
                            "message": str(exc),
                        }
                    )
                    + "\n"
                )
            err_console.print(f"[red]corrupt:[/red] {escape(str(exc))}")
        except (OSError, ValueError) as exc:
            status = 1
            err_console.print(f"[red]error:[/red] {escape(str(exc))}")
    out.flush()
    return status
