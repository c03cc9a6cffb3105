"""Planning cost against history: does a narrow query's planning grow with the range, not the topic?

For each size (default 2,000, 8,000 and 20,000 small segments over 4 partitions) a topic is tiered onto
moto's S3 server (its own process, over HTTP). Each partition's first segment goes through the RSM's own
copy path (`copy_log_segment_data`; `tests/tiering.PartitionLog` writes Kafka's segment files, 10 records a
segment); the others are written directly as that copy's objects would be for their offsets (the same
`.log` and `.indexes` bytes, a manifest re-made for the segment's offsets, id and keys, `.log` and
`.indexes` first, the manifest last), sixteen writes at a time: the RSM's copy of 20,000 segments takes
long on a shared machine (`--copy-path` copies every segment through it instead). The trigger's 10 new
segments go through the copy path. Then, each measured through the functions Spark calls on its Python
workers, with the requests
counted by the planner's store (`IOStats`: GETs and listing pages, 1,000 keys a page) and the time taken:

- full: `TieredBatchReader.partitions()` over the whole topic;
- 1%: the same with startingOffsets/endingOffsets naming 1% of each partition's offsets, in the middle;
- timestamp: `startingTimestamp` in the middle of the topic, endingOffsets 1% further;
- trigger: a stream (`TieredStreamReader`) that had planned up to the end, after 10 new segments were
  tiered: `latestOffset` + `partitions` of that trigger (two planners, as Spark calls them);
- restart: a query restarted from its checkpoint in the middle of the topic (a new reader, remembering no
  base offset), far behind its end (`maxOffsetsPerTrigger`: one segment a partition): its first trigger;
- du: `rsm store du` (`topic_usage`): listings, and the first and last segments' manifests.

The store is recorded from its first segment, so the RSM's first copy marks the location record and no
plan lists the bucket whole; "1%, record unmarked" is the 1% plan with that marker removed, as for a
store whose segments may predate the record until `rsm store locate --record` runs.

Targets (ratios within one run): at the largest size, the 1% plan makes at most 5% of the full plan's
object reads and takes at most a tenth of its time; a trigger's requests stay flat from the smallest size
to the largest (at most 10% more, and at most 2 more); a restarted query's first trigger grows at most
as the logarithm of the history (at most twice the smallest size's requests at ten times the segments).

    python benchmarks/plan_scale.py [--segments 2000 8000 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _common import Target, console, finish, print_table  # noqa: E402
from rsm_copy_fetch import start_moto  # noqa: E402
from tiering import BASE_TS, PartitionLog  # noqa: E402

from rsm import RemoteStorageManager, TopicIdPartition  # noqa: E402
from rsm.catalog import TopicCatalog  # noqa: E402
from rsm.catalog.usage import topic_usage  # noqa: E402
from rsm.config.settings import RsmConfig  # noqa: E402
from rsm.fetch.reader import SegmentReader  # noqa: E402
from rsm.store.layout import Location, SegmentKeys  # noqa: E402
from rsm.stored.location_record import REGISTRY_DIR, SCANNED_MARKER  # noqa: E402
from rsm.stored.manifest import INDEX_NUMBERS, Manifest, SegmentInfo  # noqa: E402
from rsm.stored.pieces import PieceKind, bind_crc32c, piece_tag  # noqa: E402
from segment_format.crc import crc32c  # noqa: E402
from spark_reader.options import parse_options  # noqa: E402
from spark_reader.source import TieredBatchReader  # noqa: E402
from spark_reader.stream import TieredStreamReader  # noqa: E402

log = logging.getLogger("plan_scale")

TOPIC = "history"
PARTITIONS = 4
RECORDS = 10  # a segment's records (offsets)


def _tier(logs: list[PartitionLog], per_partition: int) -> None:
    """`per_partition` more segments on every partition, the partitions copied at once (as brokers do)."""

    def one(pl: PartitionLog) -> None:
        for _ in range(per_partition):
            pl.append(RECORDS, value_size=20, headers=False)
            pl.roll()

    threads = [threading.Thread(target=one, args=(pl,)) for pl in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _write_directly(rsm: RemoteStorageManager, logs: list[PartitionLog], per_partition: int) -> None:
    """`per_partition` segments a partition, the first copied by the RSM, the rest written as its objects
    (see the module docstring); each log then goes on from the last offset written."""
    store = rsm.store
    jobs: list[tuple[str, str, bytes]] = []
    for pl in logs:
        pl.append(RECORDS, value_size=20, headers=False)
        md, _ = pl.roll()
        keys = SegmentKeys.of(Location(str(rsm.config.get("bucket")), str(rsm.config.get("prefix"))), md)
        template = Manifest.from_bytes(store.get(keys.bucket, keys.manifest))
        log_bytes, index_bytes = store.get(keys.bucket, keys.log), store.get(keys.bucket, keys.indexes)
        reader = SegmentReader(store, keys.bucket, template, None)
        plain = {t: crc32c(reader.index(t)) for t in template.indexes}  # CRCs bound to each copy's id
        for i in range(1, per_partition):
            base = i * RECORDS
            seg_id = uuid.uuid4()
            seg_md = dataclasses.replace(
                md,
                remote_log_segment_id=dataclasses.replace(md.remote_log_segment_id, id=seg_id),
                start_offset=base,
                end_offset=base + RECORDS - 1,
                max_timestamp_ms=BASE_TS + base + RECORDS - 1,
                segment_leader_epochs={0: base},
            )
            seg_keys = SegmentKeys.of(keys.location, seg_md)
            manifest = dataclasses.replace(
                template,
                copy_id=uuid.uuid4().hex,
                segment=SegmentInfo.of(seg_md, template.segment.txn_idx_empty),
                location={**template.location, "log": seg_keys.log, "indexes": seg_keys.indexes},
                indexes={
                    t: dataclasses.replace(
                        e, crc32c=bind_crc32c(plain[t], piece_tag(seg_id, PieceKind.INDEX, INDEX_NUMBERS[t]))
                    )
                    for t, e in template.indexes.items()
                },
                integrity={
                    **template.integrity,
                    "last_offset": base + RECORDS - 1,
                    "first_batch_timestamp_ms": BASE_TS + base + RECORDS - 1,
                },
                seal=None,
            )
            jobs.append((seg_keys.log, seg_keys.indexes, seg_keys.manifest, manifest.to_bytes()))  # type: ignore[arg-type]
        pl.next_offset = per_partition * RECORDS
        pl.records.clear()

        def write(
            job: tuple[str, str, str, bytes],
            log_bytes: bytes = log_bytes,
            index_bytes: bytes = index_bytes,
            bucket: str = keys.bucket,
        ) -> None:
            log_key, index_key, manifest_key, manifest_bytes = job
            store.put(bucket, log_key, log_bytes)
            store.put(bucket, index_key, index_bytes)
            store.put(bucket, manifest_key, manifest_bytes)  # the commit point, last

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(write, jobs))
        jobs.clear()


def _measure(fn: Callable[[], object], stats: Callable[[], dict[str, int]]) -> dict[str, float]:
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    s = stats()
    return {"seconds": seconds, "reads": s["reads"], "lists": s["lists"], "requests": s["reads"] + s["lists"]}


def run_size(endpoint: str, segments: int, tmp: Path, copy_path: bool) -> dict[str, dict[str, float]]:
    bucket = f"plan-{segments}-{uuid.uuid4().hex[:6]}"
    store = {
        "storage.backend": "s3",
        "storage.s3.endpoint.url": endpoint,
        "storage.s3.region": "us-east-1",
        "storage.s3.access.key.id": "testing",
        "storage.s3.secret.access.key": "testing",
        "bucket": bucket,
    }
    rsm = RemoteStorageManager()
    rsm.configure(store)
    rsm.store.fs.call_s3("create_bucket", Bucket=bucket)
    tid = uuid.uuid4()
    logs = [
        PartitionLog(rsm, TopicIdPartition(tid, TOPIC, p), tmp / f"{segments}-{p}") for p in range(PARTITIONS)
    ]
    per_partition = segments // PARTITIONS
    started = time.perf_counter()
    if copy_path:
        _tier(logs, per_partition)
    else:
        _write_directly(rsm, logs, per_partition)
    console.print(f"{segments:,} segments tiered in {time.perf_counter() - started:.0f} s")
    registry = TopicCatalog(RsmConfig(store)).registry  # type: ignore[arg-type]
    # the store was recorded from its first segment: the RSM's first copy marked it, so plans never scan
    assert registry.scanned_since() is not None, "the RSM did not mark a store recorded from its start"

    offsets = per_partition * RECORDS
    out: dict[str, dict[str, float]] = {}

    def batch(name: str, **options: str) -> None:
        reader = TieredBatchReader(parse_options({**store, "subscribe": TOPIC, **options}))
        parts: list[object] = []
        out[name] = _measure(
            lambda: parts.extend(reader.partitions()),
            lambda: reader.last_planner.catalog.store.stats.snapshot(),  # type: ignore[union-attr]
        )
        out[name]["input_partitions"] = len(parts)

    batch("full")
    lo, n = offsets // 2, max(1, offsets // 100)
    batch(
        "1%",
        startingOffsets=json.dumps({TOPIC: {str(p): lo for p in range(PARTITIONS)}}),
        endingOffsets=json.dumps({TOPIC: {str(p): lo + n for p in range(PARTITIONS)}}),
    )
    # the same plan where segments may predate the record (no marker): it also lists the bucket whole
    marker = f"{registry.prefix}{REGISTRY_DIR}{SCANNED_MARKER}"
    kept = rsm.store.get(bucket, marker)
    rsm.store.delete(bucket, marker)
    batch(
        "1%, record unmarked",
        startingOffsets=json.dumps({TOPIC: {str(p): lo for p in range(PARTITIONS)}}),
        endingOffsets=json.dumps({TOPIC: {str(p): lo + n for p in range(PARTITIONS)}}),
    )
    rsm.store.put(bucket, marker, kept)
    batch(
        "timestamp",
        startingTimestamp=str(BASE_TS + lo),
        endingOffsets=json.dumps({TOPIC: {str(p): lo + n for p in range(PARTITIONS)}}),
    )

    # a stream that planned up to the end, then a trigger finding 10 new segments
    stream = TieredStreamReader(parse_options({**store, "subscribe": TOPIC, "startingOffsets": "latest"}))
    start = stream.initialOffset()
    _tier(logs[:2], 5)
    planners = []

    def trigger() -> None:
        end = stream.latestOffset(start, stream.getDefaultReadLimit())
        planners.append(stream.last_planner)
        parts = stream.partitions(start, end)
        planners.append(stream.last_planner)
        assert len(parts) == 10, (start, end, len(parts))

    def trigger_stats() -> dict[str, int]:
        snaps = [p.catalog.store.stats.snapshot() for p in planners]
        return {k: sum(s[k] for s in snaps) for k in ("reads", "lists")}

    out["trigger"] = _measure(trigger, trigger_stats)

    # a query restarted from a checkpoint in the middle: a new reader, its first trigger (one segment a
    # partition: maxOffsetsPerTrigger), the rest of the topic still ahead of it
    restarted = TieredStreamReader(
        parse_options({**store, "subscribe": TOPIC, "maxOffsetsPerTrigger": str(RECORDS * PARTITIONS)})
    )
    checkpoint = {TOPIC: {str(p): lo for p in range(PARTITIONS)}}
    restart_planners = []

    def restart() -> None:
        end = restarted.latestOffset(checkpoint, restarted.getDefaultReadLimit())
        restart_planners.append(restarted.last_planner)
        parts = restarted.partitions(checkpoint, end)
        restart_planners.append(restarted.last_planner)
        assert parts, (checkpoint, end)

    def restart_stats() -> dict[str, int]:
        snaps = [p.catalog.store.stats.snapshot() for p in restart_planners]
        return {k: sum(s[k] for s in snaps) for k in ("reads", "lists")}

    out["restart"] = _measure(restart, restart_stats)

    du_catalog = TopicCatalog(RsmConfig(store))  # type: ignore[arg-type]
    rows: list[object] = []
    out["du"] = _measure(lambda: rows.extend(topic_usage(du_catalog, TOPIC)), du_catalog.store.stats.snapshot)
    rsm.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, nargs="+", default=[2000, 8000, 20000])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--copy-path", action="store_true", help="tier every segment through the RSM's copy")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    moto, endpoint = start_moto()
    results: dict[str, dict[str, dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="rsm-plan-scale-") as tmp:
            for segments in args.segments:
                results[str(segments)] = run_size(endpoint, segments, Path(tmp), args.copy_path)
                rows = [
                    (
                        name,
                        f"{m['seconds']:.2f}",
                        int(m["reads"]),
                        int(m["lists"]),
                        int(m.get("input_partitions", 0)) or "-",
                    )
                    for name, m in results[str(segments)].items()
                ]
                print_table(
                    f"{segments:,} segments over {PARTITIONS} partitions (moto S3)",
                    ["plan", "seconds", "GETs", "listing pages", "input partitions"],
                    rows,
                )
    finally:
        moto.terminate()
        moto.wait(timeout=30)
    small, big = results[str(min(args.segments))], results[str(max(args.segments))]
    targets = [
        Target(
            f"1% plan's object reads <= 5% of the full plan's ({max(args.segments):,} segments)",
            big["1%"]["reads"] / big["full"]["reads"],
            0.05,
            at_least=False,
        ),
        Target(
            f"1% plan's time <= a tenth of the full plan's ({max(args.segments):,} segments)",
            big["1%"]["seconds"] / big["full"]["seconds"],
            0.10,
            at_least=False,
        ),
        Target(
            f"a trigger's requests flat from {min(args.segments):,} to {max(args.segments):,} segments",
            big["trigger"]["requests"] / max(1.0, small["trigger"]["requests"] + 2),
            1.10,
            at_least=False,
        ),
        Target(
            f"a restarted query's first trigger from {min(args.segments):,} to {max(args.segments):,} "
            "segments: at most twice the requests",
            big["restart"]["requests"] / max(1.0, small["restart"]["requests"]),
            2.0,
            at_least=False,
        ),
    ]
    return finish(targets, results, args.json)


if __name__ == "__main__":
    sys.exit(main())
