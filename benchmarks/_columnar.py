"""The columnar scan's side of benchmarks/spark_read.py: its workers' own figures, and big segments.

The scan's Python workers append one JSON line per split read to `$KAFKA_TIERED_WORKER_STATS/<pid>.jsonl`
(`spark_reader.jvm_ops`): rows, record payloads decompressed, and the worker's peak RSS. The benchmark
sets that directory before the session starts (workers inherit the JVM's environment) and reads it around
a query: a `count()` must decompress nothing, and the peak RSS of any worker is the bounded-memory figure.

The RSS figure is taken on big segments (256 MiB by default), written here without a broker: one
segment per partition, zstd batches of incompressible 100-byte values, through the RSM's own copy path
(tests/tiering.PartitionLog), so memory is measured where segment size would show if it leaked in.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

STATS_ENV = "KAFKA_TIERED_WORKER_STATS"


def clear_stats(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)


def read_stats(directory: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def big_segments_store(work: Path, segment_mib: int, partitions: int) -> tuple[dict[str, str], int]:
    """A file store holding `partitions` partitions of one ~`segment_mib` MiB segment each; (store, rows)."""
    from tiering import PartitionLog

    from rsm import RemoteStorageManager, TopicIdPartition

    store = {"storage.backend": "file", "storage.file.root": str(work / "big-store"), "bucket": "big"}
    rsm = RemoteStorageManager()
    rsm.configure(store)
    tid = uuid.uuid4()
    rows = 0
    per_batch = 2000
    t = time.monotonic()
    try:
        for p in range(partitions):
            log = PartitionLog(rsm, TopicIdPartition(tid, "big", p), work / f"big-w{p}")
            size = 0
            while size < segment_mib << 20:
                log.append(per_batch, codec=4, value_size=100, incompressible=True, headers=False)
                size += len(log.pending[-1])
                rows += per_batch
                log.records.clear()  # the expectations: not needed here, and they would dominate memory
            log.roll()
    finally:
        rsm.close()
    print(f"  big segments: {partitions} x {segment_mib} MiB, {rows:,} records, {time.monotonic() - t:.0f} s")
    return store, rows
