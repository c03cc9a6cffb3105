"""`rsm migrate` throughput, as ratios measured in one run.

    python benchmarks/migrate.py [--segments 4] [--segment-mib 64] [--s3-segment-mib 32] [--no-s3] [--json out.json]

A topic of `--segments` segments (one per partition; uncompressed magic-2 batches of ~64 KiB, values half
text half random) is tiered through the RSM, compressed and encrypted, to the file store and to S3 over
HTTP (moto's server in its own process). Then, alternating each contender with its baseline and keeping the
best of `--repeat` runs of each (the machine is shared: paired runs see the same load):

One S3 client serves every contender and baseline, made before anything is timed: each S3FileSystem
makes its botocore client on first use (~0.15 s of loading its service model here), a cost of starting a
process, not of moving bytes, and the plain copies do not pay it either.

The topics' location records are marked complete first, as an operator does once for a store (`rsm store
locate --record`), so planning reads the record rather than listing whole buckets.

- move: the whole topic to another prefix and back (`rsm migrate move`, local engine, `--parallel`), MB/s of
  stored bytes, planning included, against a plain copy of the topic's objects, finding them included:
  `cp -r` of its directory on the file store; on S3 a listing then s3fs's `copy` (a server-side copy, the
  issue's baseline), with one `CopyObject` per object from `--parallel` threads reported beside it (a
  stricter baseline: no checks, no journal, no commit protocol; on moto s3fs's copy of large objects is
  several times slower than that). Target: at least 0.8x the plain copy. On
  the file store move makes hard links when it can (its default, measured too), so the target is taken on
  a move forced to copy.
- rekey: re-wrapping every data key under another key id, for segments of `--segment-mib` and of 1/8 of
  that: the time per segment must not grow with the segment size (target: large / small <= 1.5).
- verify and verify --deep: MB/s of stored bytes checked (`--parallel` segments at once), the process
  pinned to one CPU, against the limit of the work alone in the same process on that CPU: AES-GCM
  decryption, zstd decompression and the CRC-32C of every batch, over the stored chunks already in memory.
  On S3 the same CPU must also receive the bytes: the CPU time this process spends on the same 16 MiB GETs
  (`--parallel` segments at once, nothing done with them) adds to the work's, and that sum is the limit
  there. Target: --deep at least 0.5x the limit (the work's alone is reported beside it on S3, with the
  sequential "download, then work" figure).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import cramjam
import crc32c
from _common import Target, finish, make_segment, pin_to_one_cpu, print_table
from rsm_copy_fetch import _batch_template, start_moto

from rsm import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.catalog import TopicCatalog
from rsm.config.keyring import generate_key
from rsm.config.settings import RsmConfig
from rsm.fetch.reader import cipher_for
from rsm.migrate import plan as plans
from rsm.migrate.context import Context, JobSpec
from rsm.migrate.engines import LocalEngine, execute
from rsm.migrate.journal import job_id
from rsm.migrate.verify import READ_GROUP_BYTES
from rsm.store.layout import Location
from rsm.store.objects import ObjectStore
from rsm.stored.pieces import Codec, PieceKind

MiB = 1 << 20


def tier(configs: dict[str, str], topic: str, segments: list[tuple[Path, int, int]]) -> uuid.UUID:
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    tid = uuid.uuid4()
    for p, (path, last, size) in enumerate(segments):
        tip = TopicIdPartition(tid, topic, p)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), 0, last, 0, 0, 0, size, {0: 0})
        d = path.parent
        data = LogSegmentData(path, d / f"{path.stem}.index", d / f"{path.stem}.timeindex", None,
                              d / f"{path.stem}.snapshot", b"0\n1\n0 0\n")  # fmt: skip
        rsm.copy_log_segment_data(md, data)
    rsm.close()
    return tid


def run_job(
    configs: dict[str, str],
    plan: plans.Plan,
    parallel: int,
    links: bool = True,
    store: ObjectStore | None = None,
) -> float:
    job = job_id(plan.command, plan.topic, plan.topic_id, plan.params)
    spec = JobSpec(tuple(sorted(configs.items())), job, 1, (("file_links", links),))
    start = time.perf_counter()
    report = execute(plan, spec, engine=LocalEngine(parallel), context=Context(spec, store=store))
    elapsed = time.perf_counter() - start
    if report.failed or not report.results:
        raise RuntimeError(f"{plan.command}: {report.summary()} {[r.message for r in report.failed][:3]}")
    return elapsed


def stored_bytes(configs: dict[str, str], topic: str, tid: uuid.UUID) -> tuple[int, list]:
    catalog = TopicCatalog(RsmConfig(configs))
    segs = catalog.segments(topic, tid)
    return sum(s.manifest.stored_bytes for s in segs), segs


def move_once(
    configs: dict[str, str], topic: str, tid: uuid.UUID, to: Location, parallel: int, links: bool = True,
    store: ObjectStore | None = None,
) -> float:  # fmt: skip
    start = time.perf_counter()
    catalog = TopicCatalog(RsmConfig(configs), store)
    plan = plans.plan_move(catalog, topic, tid, None, to)
    return (time.perf_counter() - start) + run_job(configs, plan, parallel, links, catalog.store)


def plain_copy(
    configs: dict[str, str], store: ObjectStore, topic_dir: str, to: str, tool: str = "cp", parallel: int = 4
) -> float:
    """The topic's objects copied by a plain tool, finding them included (as `move` plans): `cp -r` of its
    directory on the file store; on S3 a listing then s3fs's `copy` (`s3fs`) or one `CopyObject` per object
    from `parallel` threads (`copy_object`), both server-side copies."""
    bucket = configs["bucket"]
    if configs["storage.backend"] == "file":
        root = Path(configs["storage.file.root"]) / bucket
        dst = root / to
        shutil.rmtree(dst, ignore_errors=True)
        start = time.perf_counter()
        subprocess.run(["cp", "-r", str(root / topic_dir), str(dst)], check=True)
        elapsed = time.perf_counter() - start
        shutil.rmtree(dst, ignore_errors=True)
        return elapsed
    fs = store.fs
    start = time.perf_counter()
    keys = store.list(bucket, topic_dir)
    targets = [f"{to}{k}" for k in keys]
    if tool == "s3fs":
        fs.copy([f"{bucket}/{k}" for k in keys], [f"{bucket}/{t}" for t in targets])
    else:
        from concurrent.futures import ThreadPoolExecutor

        def one(pair: tuple[str, str]) -> None:
            fs.call_s3(
                "copy_object", Bucket=bucket, Key=pair[1], CopySource={"Bucket": bucket, "Key": pair[0]}
            )

        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(one, zip(keys, targets, strict=True)))
    elapsed = time.perf_counter() - start
    fs.rm([f"{bucket}/{t}" for t in targets])
    return elapsed


def log_reads(store: ObjectStore, seg) -> Iterator[bytes]:  # noqa: ANN001 - a catalog StoredSegment
    """A segment's stored `.log` in the 16 MiB GETs verify makes (`rsm.migrate.verify.READ_GROUP_BYTES`)."""
    size = seg.manifest.log.stored_size
    key = seg.manifest.location["log"]
    for a in range(0, size, READ_GROUP_BYTES):
        yield store.get_range(seg.bucket, key, a, min(a + READ_GROUP_BYTES, size))


def deep_limit(
    configs: dict[str, str], segs: list, store: ObjectStore, download: bool = False
) -> tuple[float, int]:
    """Seconds of the work alone (decrypt, decompress, CRC-32C of every batch) over the stored chunks,
    read into memory first (not timed; with `download`, read in the timed part, in the 16 MiB requests
    verify makes); and the stored bytes."""
    from rsm.config.keyring import Keyring

    keyring = Keyring(configs["encryption.keyring.path"])

    pieces = []
    total = 0
    for seg in segs:
        m = seg.manifest
        data = b"" if download else b"".join(log_reads(store, seg))
        total += m.stored_bytes
        pieces.append((cipher_for(m, keyring), m, data, seg))
    start = time.perf_counter()
    for cipher, m, data, seg in pieces:
        if download:
            data = b"".join(log_reads(store, seg))
        index = m.log
        carry = b""
        for i in range(index.count):
            lo, hi = index.stored_span(i)
            payload = cipher.decrypt(PieceKind.LOG, i, memoryview(data)[lo:hi])
            a, b = index.original_span(i)
            plain = (
                cramjam.zstd.decompress(payload, output_len=b - a)
                if index.codecs[i] is Codec.ZSTD
                else payload
            )
            view = memoryview(carry + bytes(plain)) if carry else memoryview(plain)
            pos = 0
            while pos + 12 <= len(view):
                length = int.from_bytes(view[pos + 8 : pos + 12], "big")
                if pos + 12 + length > len(view):
                    break
                crc32c.crc32c(view[pos + 21 : pos + 12 + length])
                pos += 12 + length
            carry = bytes(view[pos:])
    return time.perf_counter() - start, total


def download_only(segs: list, store: ObjectStore, parallel: int) -> tuple[float, float]:
    """(seconds, CPU seconds of this process) to bring every segment's stored `.log` bytes in as verify
    does (16 MiB GETs, `parallel` segments at once) and do nothing with them. The CPU time is what
    receiving the bytes costs on the core verify is pinned to: on S3 it adds to the work's (one CPU does
    both), so their sum is verify --deep's limit there; the wall time is the rate the store delivers at."""
    from concurrent.futures import ThreadPoolExecutor

    def one(seg) -> int:  # noqa: ANN001
        return sum(map(len, log_reads(store, seg)))

    start, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, segs))
    return time.perf_counter() - start, time.process_time() - cpu


def bench_store(
    name: str, configs: dict[str, str], tmp: Path, args: argparse.Namespace, seg_mib: int
) -> dict:
    out: dict[str, object] = {}
    store = ObjectStore.from_config(RsmConfig(configs))
    segs_dir = tmp / f"segs-{name}"
    large = [make_segment(segs_dir / f"l{i}", seg_mib * MiB, lambda r: _batch_template(r, 64, 1000), seed=i)
             for i in range(args.segments)]  # fmt: skip
    small = [make_segment(segs_dir / f"s{i}", seg_mib * MiB // 8, lambda r: _batch_template(r, 64, 1000), seed=i)
             for i in range(args.segments)]  # fmt: skip
    tid = tier(configs, "bench", large)
    tid_small = tier(configs, "small", small)
    # as an operator does once (`rsm store locate --record`): planners then read the location record
    # instead of listing the buckets
    catalog = TopicCatalog(RsmConfig(configs))
    for topic, t in (("bench", tid), ("small", tid_small)):
        catalog.registry.mark_complete(topic, t, catalog.scan_buckets())
    shutil.rmtree(segs_dir, ignore_errors=True)
    nbytes, segs = stored_bytes(configs, "bench", tid)
    here, there = Location(configs["bucket"], ""), Location(configs["bucket"], "moved/")
    file_store = configs["storage.backend"] == "file"
    variants = [("copying", False), ("links", True)] if file_store else [("server-side", True)]
    best = {v: float("inf") for v, _ in variants}
    tools = ["cp"] if file_store else ["s3fs", "copy_object"]
    copies = {t: float("inf") for t in tools}
    at = here
    for _ in range(args.repeat):
        _, segs = stored_bytes(configs, "bench", tid)  # where they are now
        topic_dir = segs[0].manifest_key.split("/0/", 1)[0] + "/"
        for tool in tools:
            copies[tool] = min(
                copies[tool], plain_copy(configs, store, topic_dir, "plaincopy/", tool, args.parallel)
            )
        for variant, links in variants:
            at = there if at == here else here
            best[variant] = min(
                best[variant], move_once(configs, "bench", tid, at, args.parallel, links, store)
            )
    if at != here:
        move_once(configs, "bench", tid, here, args.parallel, store=store)  # back home for what follows
    # the baseline: `cp`, s3fs's copy; on S3 move is also compared with plain CopyObject calls
    copy_best = copies["cp" if file_store else "s3fs"]
    if not file_store:
        out["move_vs_copy_object"] = copies["copy_object"] / min(best.values())
    out["plain_copies_mb_s"] = {t: nbytes / MiB / v for t, v in copies.items()}
    print(f"{name}: plain copies " + ", ".join(f"{t} {nbytes / MiB / v:.0f} MB/s" for t, v in copies.items()))
    main_variant = variants[0][0]
    out["move_mb_s"] = {v: nbytes / MiB / t for v, t in best.items()}
    out["plain_copy_mb_s"] = nbytes / MiB / copy_best
    out["move_vs_copy"] = {v: copy_best / t for v, t in best.items()}
    out["move_target_variant"] = main_variant
    for v in best:
        print(f"{name}: move ({v}) {out['move_mb_s'][v]:.0f} MB/s, plain copy {out['plain_copy_mb_s']:.0f} MB/s "
              f"({out['move_vs_copy'][v]:.2f}x) over {nbytes / MiB:.0f} MiB in {args.segments} segments")  # fmt: skip
    if not file_store:
        print(f"{name}: move / one CopyObject per object from {args.parallel} threads: "
              f"{out['move_vs_copy_object']:.2f}x")  # fmt: skip

    rekey: dict[str, float] = {}
    for label, topic, t in (("large", "bench", tid), ("small", "small", tid_small)):
        best = float("inf")
        for i in range(args.repeat):
            catalog = TopicCatalog(RsmConfig(configs), store)
            start = time.perf_counter()
            plan = plans.plan_rekey(catalog, topic, t, None, "k2" if i % 2 == 0 else "k1")
            best = min(
                best, time.perf_counter() - start + run_job(configs, plan, args.parallel, store=catalog.store)
            )
        rekey[label] = best / args.segments * 1000
    out["rekey_ms_per_segment"] = rekey
    out["rekey_large_vs_small"] = rekey["large"] / rekey["small"]
    print(f"{name}: rekey {rekey['large']:.1f} ms per {seg_mib} MiB segment, {rekey['small']:.1f} ms per "
          f"{seg_mib / 8:g} MiB segment ({out['rekey_large_vs_small']:.2f}x)")  # fmt: skip

    cpu = pin_to_one_cpu()
    verify_best = deep_best = limit_best = download_best = delivery_best = receive_cpu = float("inf")
    _, segs = stored_bytes(configs, "bench", tid)
    for _ in range(args.repeat):
        catalog = TopicCatalog(RsmConfig(configs), store)
        for deep in (False, True):
            start = time.perf_counter()
            plan = plans.plan_verify(catalog, "bench", tid, None, deep)
            elapsed = time.perf_counter() - start + run_job(configs, plan, args.parallel, store=catalog.store)
            if deep:
                deep_best = min(deep_best, elapsed)
            else:
                verify_best = min(verify_best, elapsed)
        seconds, _ = deep_limit(configs, segs, store)
        limit_best = min(limit_best, seconds)
        if not file_store:
            seconds, _ = deep_limit(configs, segs, store, download=True)
            download_best = min(download_best, seconds)
            wall, cpu_s = download_only(segs, store, args.parallel)
            delivery_best, receive_cpu = min(delivery_best, wall), min(receive_cpu, cpu_s)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    # the limit the target is taken on: the work's; on S3 the work's plus receiving the bytes, both on the
    # one CPU (the page cache hands the file store's bytes over for next to nothing)
    target_limit = limit_best if file_store else limit_best + receive_cpu
    out["deep_target_limit"] = "work" if file_store else "work + receiving"
    out["deep_target_limit_mb_s"] = nbytes / MiB / target_limit
    out["deep_vs_target_limit"] = target_limit / deep_best
    if not file_store:
        out["deep_limit_with_download_mb_s"] = nbytes / MiB / download_best
        out["deep_vs_limit_with_download"] = download_best / deep_best
        out["s3_delivery_mb_s"] = nbytes / MiB / delivery_best
        out["s3_receive_cpu_mb_s"] = nbytes / MiB / receive_cpu
        print(f"{name}: limit with the download (the same GETs + the work) {out['deep_limit_with_download_mb_s']:.0f} MB/s: "
              f"verify --deep is {out['deep_vs_limit_with_download']:.2f}x that")  # fmt: skip
        print(f"{name}: the same GETs ({args.parallel} segments at once, nothing done with them): the store "
              f"delivers {out['s3_delivery_mb_s']:.0f} MB/s, receiving costs one CPU {receive_cpu:.2f} s "
              f"({out['s3_receive_cpu_mb_s']:.0f} MB/s of CPU); the work + receiving: "
              f"{out['deep_target_limit_mb_s']:.0f} MB/s, verify --deep {out['deep_vs_target_limit']:.2f}x that")  # fmt: skip
    out.update(verify_mb_s=nbytes / MiB / verify_best, verify_deep_mb_s=nbytes / MiB / deep_best,
               deep_limit_mb_s=nbytes / MiB / limit_best, deep_vs_limit=limit_best / deep_best, cpu=cpu)  # fmt: skip
    print(f"{name}: verify {out['verify_mb_s']:.0f} MB/s, verify --deep {out['verify_deep_mb_s']:.0f} MB/s, "
          f"limit (decrypt + decompress + CRC) {out['deep_limit_mb_s']:.0f} MB/s ({out['deep_vs_limit']:.2f}x), one CPU")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--segment-mib", type=int, default=256)
    ap.add_argument("--s3-segment-mib", type=int, default=256)
    ap.add_argument("--chunk-mib", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-file", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results: dict[str, object] = {"segments": args.segments, "segment_mib": args.segment_mib,
                                  "s3_segment_mib": args.s3_segment_mib, "chunk_mib": args.chunk_mib}  # fmt: skip
    moto = None
    with tempfile.TemporaryDirectory(prefix="rsm-bench-migrate-", dir=os.environ.get("RSM_BENCH_DIR")) as t:
        tmp = Path(t)
        keyring = tmp / "keyring.json"
        keyring.write_text(json.dumps({"k1": generate_key(), "k2": generate_key()}))
        base = {"chunk.size": str(args.chunk_mib * MiB), "encryption.keyring.path": str(keyring),
                "encryption.enabled": "true", "encryption.key.id": "k1", "bucket": "bench"}  # fmt: skip
        stores = {
            "file": (
                {**base, "storage.backend": "file", "storage.file.root": str(tmp / "store")},
                args.segment_mib,
            )
        }
        if args.no_file:
            stores = {}
        try:
            if not args.no_s3:
                moto, endpoint = start_moto()
                import boto3

                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                             aws_secret_access_key="testing").create_bucket(Bucket="bench")  # fmt: skip
                stores["s3"] = ({**base, "storage.backend": "s3", "storage.s3.endpoint.url": endpoint,
                                 "storage.s3.region": "us-east-1", "storage.s3.access.key.id": "testing",
                                 "storage.s3.secret.access.key": "testing"}, args.s3_segment_mib)  # fmt: skip
            for name, (configs, seg_mib) in stores.items():
                results[name] = bench_store(name, configs, tmp, args, seg_mib)
        finally:
            if moto is not None:
                moto.terminate()
                moto.wait(timeout=30)
    rows = []
    targets = []
    for name in stores:
        r = results[name]
        assert isinstance(r, dict)
        v = r["move_target_variant"]
        moves = " / ".join(f"{x:.0f}" for x in r["move_mb_s"].values())
        ratios = " / ".join(f"{x:.2f}" for x in r["move_vs_copy"].values())
        rows.append((f"{name} ({' / '.join(r['move_mb_s'])})", moves, f"{r['plain_copy_mb_s']:.0f}", ratios,
                     f"{r['rekey_ms_per_segment']['large']:.1f} / {r['rekey_ms_per_segment']['small']:.1f}",
                     f"{r['verify_mb_s']:.0f}", f"{r['verify_deep_mb_s']:.0f}",
                     f"{r['deep_target_limit_mb_s']:.0f} ({r['deep_target_limit']})",
                     f"{r['deep_vs_target_limit']:.2f}"))  # fmt: skip
        targets += [
            Target(f"{name}: move ({v}) / plain copy", r["move_vs_copy"][v], 0.8),
            Target(
                f"{name}: rekey time per segment, large / small",
                r["rekey_large_vs_small"],
                1.5,
                at_least=False,
            ),
            Target(
                f"{name}: verify --deep / its limit ({r['deep_target_limit']})",
                r["deep_vs_target_limit"],
                0.5,
            ),
        ]
    print_table("rsm migrate", ["store", "move MB/s", "copy MB/s", "move/copy", "rekey ms/seg (large/small)",
                                "verify MB/s", "deep MB/s", "deep limit MB/s", "deep/limit"], rows)  # fmt: skip
    return finish(targets, results, args.json)


if __name__ == "__main__":
    sys.exit(main())
