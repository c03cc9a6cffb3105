"""The operations the columnar scan's JVM side asks of its Python worker (`spark_reader.jvm_worker`).

Each one calls the entry point the Python Data Source calls for the same step, so the two paths share one
implementation of every rule: options and schema (`KafkaTieredDataSource`), filters and planning
(`FilteringBatchReader.pushFilters` / `.partitions`), streaming offsets (`TieredStreamReader`) and the rows
(`read_partition`, or `counting.count_partition` when Spark needs no column). Nothing here decides what a
query reads; it only translates Spark's JVM-side objects (filters as JSON, offsets as JSON strings) into
what those entry points take, and their answers back.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import pickle
import resource
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import BinaryIO

import pyarrow as pa

from segment_format.columnar import decompressed_sections
from spark_reader.counting import count_partition
from spark_reader.handoff import PipeSender, SharedSlots, SlotSender
from spark_reader.offset_range import OffsetRangePartition
from spark_reader.packing import pack, split_bytes
from spark_reader.partition_reader import read_partition

OK, ERROR = 0, 1
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
FILTER_KINDS = ("EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "In")
STATS_ENV = "KAFKA_TIERED_WORKER_STATS"  # a directory: each worker appends one JSON line per split read


def one_line(exc: BaseException) -> str:
    """The message the JVM raises: `kafka-tiered: ` and the source's own one line, or the exception's type
    and first line (as the Python Data Source's task errors read: `errors.TaskError`)."""
    from spark_reader.errors import SOURCE, ReaderError

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{SOURCE}: " + (text if isinstance(exc, ReaderError) else f"{type(exc).__name__}: {text}")


def _source(options: dict[str, str]):  # noqa: ANN202 - KafkaTieredDataSource (pyspark is imported lazily)
    from spark_reader.source import KafkaTieredDataSource

    return KafkaTieredDataSource(dict(options))


def _filters(specs: Sequence[dict]) -> list:
    """Spark's JVM filters (as the jar sends them) as the pyspark filter objects `pushFilters` takes."""
    from pyspark.sql import datasource as ds

    out = []
    for spec in specs:
        kind = spec["kind"]
        if kind not in FILTER_KINDS:
            raise ValueError(f"unknown filter kind {kind!r}")
        values = spec["value"] if kind == "In" else [spec["value"]]
        if spec.get("micros"):
            values = [EPOCH + dt.timedelta(microseconds=int(v)) for v in values]
        value = tuple(values) if kind == "In" else values[0]
        out.append(getattr(ds, kind)((spec["attribute"],), value))
    return out


def _batch_reader(header: dict):  # noqa: ANN202 - FilteringBatchReader
    from spark_reader.source import FilteringBatchReader

    reader = FilteringBatchReader(_source(header["options"])._options())
    filters = _filters(header.get("filters") or ())
    rejected = {id(f) for f in reader.pushFilters(filters)}
    return reader, [i for i, f in enumerate(filters) if id(f) not in rejected]


def _schema(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    return {"schema": _source(header["options"]).schema().json()}, []


def _push(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    return {"accepted": _batch_reader(header)[1]}, []


def _estimates(parts: Sequence[OffsetRangePartition]) -> dict[str, int]:
    """Upper bounds for Spark's optimizer (SupportsReportStatistics): offsets and segment bytes planned."""
    rows = size = 0
    for part in parts:  # the brokers' bytes are not known: a live tail's count as none
        rows += part.planned_rows()
        size += split_bytes(part) or 0
    return {"rows": rows, "bytes": size}


def _plan(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    """The input partitions; with `packing` (Spark's file-packing settings, sent by the scan) each one a
    run of consecutive splits read by one task (`spark_reader.packing`), unless the options chose the
    tasks (minPartitions or maxRecordsPerPartition, as in Spark's Kafka source)."""
    reader, _accepted = _batch_reader(header)
    parts = reader.partitions()
    body = {"estimates": _estimates(parts)}
    spec = header.get("packing")
    if not spec or reader.opts.min_partitions or reader.opts.max_records_per_partition:
        # the user asked for these splits as tasks (minPartitions, maxRecordsPerPartition): as given
        body["descriptions"] = [repr(p) for p in parts]
        return body, [pickle.dumps(p, protocol=5) for p in parts]
    tasks = pack(parts, int(spec["maxBytes"]), int(spec["openCost"]), int(spec["minPartitions"]))
    body["descriptions"] = [" + ".join(map(repr, t)) for t in tasks]
    return body, [pickle.dumps(t[0] if len(t) == 1 else t, protocol=5) for t in tasks]


STREAM_READERS_KEPT = 16
_stream_readers: OrderedDict[str, object] = OrderedDict()  # options' hash -> reader


def _stream_reader(header: dict):  # noqa: ANN202 - TieredStreamReader
    """The stream reader for these options, kept by this worker for the next request.

    Why kept: a reader remembers where each partition's next listing may start
    (`TieredStreamReader._listed_from`), which is what keeps a trigger from listing whole
    partitions; the JVM asks for every offset and plan in a request of its own, so a reader made per
    request never had that memory. What it remembers is a fact about the store and topic (the offsets
    before a base need no key), true for any query with the same options, so the key is the options. A
    few are kept (the last used), in the process that serves the driver's requests."""
    from spark_reader.stream import TieredStreamReader

    key = hashlib.sha256(
        json.dumps(header["options"], sort_keys=True).encode()
    ).hexdigest()  # no secrets kept
    reader = _stream_readers.pop(key, None) or TieredStreamReader(_source(header["options"])._options())
    _stream_readers[key] = reader
    while len(_stream_readers) > STREAM_READERS_KEPT:
        _stream_readers.popitem(last=False)
    return reader


def _stream_initial(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    return {"offset": json.dumps(_stream_reader(header).initialOffset())}, []


def _stream_default_limit(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    return {"maxRows": _stream_reader(header).opts.max_offsets_per_trigger or None}, []


def _stream_latest(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    """The end of the next micro-batch: Spark's rate limit, then (Trigger.AvailableNow) the cap, the
    latest offsets when the trigger started, so a backfill runs in micro-batches of maxOffsetsPerTrigger
    and stops where it began."""
    from spark_reader.offsets import from_stream_offset, to_stream_offset
    from spark_reader.stream import rate_limit
    from spark_reader.streaming_api import ReadAllAvailable, ReadMaxRows  # PySpark 4.1 has no such module

    reader = _stream_reader(header)
    start = json.loads(header["start"]) if header.get("start") else {}
    cap = header.get("cap")
    if cap is None:
        limit = ReadMaxRows(header["maxRows"]) if header.get("maxRows") else ReadAllAvailable()
        return {"offset": json.dumps(reader.latestOffset(start, limit))}, []
    latest = from_stream_offset(reader.latestOffset(start, ReadAllAvailable()))
    capped = from_stream_offset(json.loads(cap))
    begin = from_stream_offset(start) if start else {}
    bounded = {k: min(v, capped.get(k, begin.get(k, v))) for k, v in latest.items()}
    for k, v in begin.items():
        bounded[k] = max(bounded.get(k, v), v)
    if header.get("maxRows"):
        bounded = rate_limit(begin, bounded, int(header["maxRows"]))
    return {"offset": json.dumps(to_stream_offset(bounded))}, []


def _stream_partitions(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    reader = _stream_reader(header)
    parts = reader.partitions(json.loads(header["start"]), json.loads(header["end"]))
    return {"descriptions": [repr(p) for p in parts]}, [pickle.dumps(p, protocol=5) for p in parts]


def _ping(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    return {"pid": os.getpid()}, []


_slots: SharedSlots | None = None  # this worker's shared-memory slots, once the JVM has had them mapped


def _map_slots(header: dict, _: bytes) -> tuple[dict, list[bytes]]:
    """Map the JVM's /dev/shm file (`spark_reader.handoff`); any failure leaves the worker on the pipe."""
    global _slots
    _slots = SharedSlots(str(header["path"]), int(header["slotBytes"]))
    return {"slotBytes": _slots.slot_bytes}, []


OPERATIONS: dict[str, Callable[[dict, bytes], tuple[dict, list[bytes]]]] = {
    "ping": _ping,
    "shm.map": _map_slots,
    "schema": _schema,
    "push": _push,
    "plan": _plan,
    "stream.initial": _stream_initial,
    "stream.defaultLimit": _stream_default_limit,
    "stream.latest": _stream_latest,
    "stream.partitions": _stream_partitions,
}


def call(op: str | None, header: dict, blob: bytes) -> tuple[dict, list[bytes]]:
    """Run one request-reply operation."""
    handler = OPERATIONS.get(op or "")
    if handler is None:
        raise ValueError(f"unknown operation {op!r}")
    return handler(header, blob)


def _output_schema(part: object, columns: Sequence[str] | None, count: bool) -> pa.Schema:
    if count:
        return pa.schema([])
    if not isinstance(part, OffsetRangePartition):
        return pa.schema([])
    return part.arrow_schema(columns)


def read(
    header: dict, blob: bytes, out: BinaryIO, acks: BinaryIO | None = None
) -> tuple[int, dict, Callable[[], None]]:
    """Stream one split's rows to the JVM (or count them): through the shared slots when the JVM asks for
    them (`slots`, acknowledged on `acks`), else as Arrow IPC on `out`. Returns how it ended (status and
    trailer) and what to call once the trailer is written: in slot mode, taking the acknowledgements the
    JVM sends for the batches it still held (`handoff.SlotSender.drain`)."""
    columns, count = header.get("columns"), bool(header.get("count"))
    try:
        loaded = pickle.loads(blob)  # noqa: S301 - bytes this scan's own planner pickled
        parts = loaded if isinstance(loaded, list) else [loaded]  # a packed task: its splits in order
        schema = _output_schema(parts[0], columns, count)
    except Exception as exc:  # noqa: BLE001
        parts, schema, failure = [], pa.schema([]), exc
    else:
        failure = None
    if header.get("slots"):
        if _slots is None or acks is None:
            raise RuntimeError("the JVM asked for shared-memory slots this worker has not mapped")
        sender: SlotSender | PipeSender = SlotSender(_slots, out, acks, schema)
    else:
        sender = PipeSender(out, schema)
    before, rows = decompressed_sections(), 0
    try:
        if failure is None and count:
            rows = sum(count_partition(part) for part in parts)
        elif failure is None:
            for part in parts:
                for batch in read_partition(part, columns):
                    sender.send(batch)
                    rows += batch.num_rows
    except Exception as exc:  # noqa: BLE001 - reported in the trailer, after the stream ended cleanly
        failure = exc
    finally:
        sender.close()
    stats = {
        "rows": rows,
        "decompressed": decompressed_sections() - before,
        "maxRssKiB": peak_rss_kib(),
        "batches": sender.counts(),
    }
    _record(stats)
    if failure is not None:
        return ERROR, {"error": one_line(failure), "type": type(failure).__name__, **stats}, sender.drain
    return OK, stats, sender.drain


def peak_rss_kib() -> int:
    """This process's peak resident set (KiB): VmHWM, the high-water mark of its own memory map.

    Not `getrusage().ru_maxrss`: Linux carries that over exec from the image the process replaced, and the
    JVM starts its workers by vfork and exec, so a worker's ru_maxrss starts at the JVM's whole RSS."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _record(stats: dict) -> None:
    where = os.environ.get(STATS_ENV)
    if where:
        with open(os.path.join(where, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(stats) + "\n")
