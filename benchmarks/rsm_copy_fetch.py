"""Copy and fetch figures of the RemoteStorageManager, as ratios measured in one run.

    python benchmarks/rsm_copy_fetch.py [--size-mib 256] [--chunk-mib 4] [--no-s3] [--no-clouds]
        [--cloud-size-mib 64] [--json out.json]

What it reports:
- copy MB/s of one segment (default 256 MiB of uncompressed magic-2 batches, ~64 KiB each, values half
  text half random so zstd has real work) to the file store and to S3 over HTTP (moto's server in its own
  process), plain / compressed / compressed+encrypted, against the "pipeline limit": the same bytes read
  in chunks through CRC-32C of every batch + zstd + AES-256-GCM alone. The machine is shared, so each
  variant runs in its own process which alternates limit and copy runs and keeps the best of each
  (`--repeat`); the ratio compares runs made under the same load;
- peak RSS above the process's baseline during each copy, measured in a child process that samples
  /proc/self/status every 2 ms (page cache is not RSS, so this is the copy's own memory);
- a 1 MiB fetch in the middle of the encrypted segment with cold caches: bytes downloaded over bytes
  requested (target <= 1 + chunk / request) and time to first byte;
- GCS and Azure rows (`cloud_rows`): copy and whole-segment fetch MB/s against fake-gcs-server's and
  Azurite's own plain upload and download of the same bytes through their SDKs, in the same run (target:
  at least 0.6x), on a `--cloud-size-mib` segment (the emulators keep objects in memory).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cramjam
import crc32c
from _common import Target, finish, make_segment, metadata_for, pin_to_one_cpu, print_table
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from rsm import LogConfig, RemoteStorageManager
from rsm.config.keyring import generate_key

MiB = 1 << 20


# -- data ------------------------------------------------------------------------------------------------
def _batch_template(rng: random.Random, records: int, value_size: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i in range(records):
        text = "".join(
            f'{{"order":{rng.randrange(10**9)},"sku":"item-{rng.randrange(5000)}","qty":{rng.randrange(99)}}},'
            for _ in range(value_size // 40)
        ).encode()
        value = text[: value_size * 3 // 4] + rng.randbytes(value_size - value_size * 3 // 4)
        builder.append(i, 1_700_000_000_000 + i, f"user-{rng.randrange(10**6)}".encode(), value, [])
    return bytes(builder.build())


# -- the pipeline limit -------------------------------------------------------------------------------------
def pipeline_limit(path: Path, chunk: int) -> float:
    """MB/s of the work alone: CRC-32C of every batch, then zstd and AES-GCM of each chunk, over a memory
    map of the (page-cached) file, with no copies, no verification logic and no output."""
    import mmap

    aead = AESGCM(os.urandom(32))
    start = time.perf_counter()
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        size = len(view)
        pos = 0
        while pos + 12 <= size:
            length = int.from_bytes(view[pos + 8 : pos + 12], "big")
            crc32c.crc32c(view[pos + 21 : pos + 12 + length])
            pos += 12 + length
        for n, lo in enumerate(range(0, size, chunk)):
            packed = cramjam.zstd.compress(view[lo : lo + chunk], level=3)
            aead.encrypt(n.to_bytes(12, "big"), packed, b"aad")
        view.release()
    return size / MiB / (time.perf_counter() - start)


# -- copies in a child process (RSS) ---------------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _copy_child(
    configs: dict[str, str], topic: dict[str, str], seg: tuple[str, int, int], repeat: int, out: mp.Queue
) -> None:
    """First copy: peak RSS sampled. Then `repeat - 1` pairs of (pipeline limit, copy) back to back, so
    each ratio compares runs made under the same load (the machine is shared); best of each is kept."""
    pin_to_one_cpu()  # copy and limit both get one core, whatever else runs on the machine
    path, last, size = Path(seg[0]), seg[1], seg[2]
    md, data = metadata_for(path, last, size)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    if configs.get("storage.backend") == "s3":  # warm the HTTP client so its set-up is not counted
        rsm.store.fs.ls(configs["bucket"])
    baseline = _rss()
    peak = baseline
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    rsm.copy_log_segment_data(md, data, LogConfig(topic))
    speeds = [size / MiB / (time.perf_counter() - start)]
    stop.set()
    sampler.join()
    stored = rsm.store.stats.snapshot()
    limits = []
    for _ in range(repeat - 1):
        limits.append(pipeline_limit(path, int(configs["chunk.size"])))
        start = time.perf_counter()
        rsm.copy_log_segment_data(md, data, LogConfig(topic))
        speeds.append(size / MiB / (time.perf_counter() - start))
    rsm.close()
    out.put({"mb_s": max(speeds), "runs_mb_s": speeds, "paired_limit_mb_s": max(limits) if limits else None,
             "rss_peak_above_baseline_mib": (peak - baseline) / MiB, "baseline_rss_mib": baseline / MiB,
             "stored_bytes": stored["bytes_written"]})  # fmt: skip


def run_copy(configs: dict[str, str], topic: dict[str, str], seg: tuple[str, int, int], repeat: int) -> dict:
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    p = ctx.Process(target=_copy_child, args=(configs, topic, seg, repeat, q))
    p.start()
    result = q.get(timeout=1800)
    p.join()
    return result


# -- fetch -----------------------------------------------------------------------------------------------
def measure_fetch(
    configs: dict[str, str], topic: dict[str, str], seg: tuple[str, int, int], request: int
) -> dict:
    path, last, size = Path(seg[0]), seg[1], seg[2]
    md, data = metadata_for(path, last, size)
    writer = RemoteStorageManager()
    writer.configure(configs)
    custom = writer.copy_log_segment_data(md, data, LogConfig(topic))
    writer.close()
    import dataclasses

    md = dataclasses.replace(md, custom_metadata=custom)
    rsm = RemoteStorageManager()  # cold caches
    rsm.configure(configs)
    if configs.get("storage.backend") == "s3":  # an open connection, as a running broker has
        rsm.store.fs.ls(configs["bucket"])
    start_pos = size // 2 - request // 2
    t0 = time.perf_counter()
    stream = rsm.fetch_log_segment(md, start_pos, start_pos + request - 1, LogConfig(topic))
    first = stream.read(1)
    ttfb = time.perf_counter() - t0
    rest = stream.read()
    total = time.perf_counter() - t0
    stream.close()
    with path.open("rb") as f:
        f.seek(start_pos)
        assert first + rest == f.read(request), "fetched bytes differ from the segment"
    downloaded = rsm.store.stats.snapshot()["bytes_read"]
    chunk = int(configs["chunk.size"])
    rsm.close()
    return {
        "request_bytes": request,
        "downloaded_bytes_incl_manifest": downloaded,
        "ratio": downloaded / request,
        "target_ratio": 1 + chunk / request,
        "ttfb_ms": ttfb * 1000,
        "total_ms": total * 1000,
    }


# -- moto server in its own process -------------------------------------------------------------------------
def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto server did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--chunk-mib", type=int, default=4)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-clouds", action="store_true", help="no GCS and Azure rows")
    ap.add_argument("--cloud-size-mib", type=int, default=64)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeat", type=int, default=5, help="copies per variant (first samples RSS), best kept")
    ap.add_argument(
        "--only", nargs="*", help="run only variants whose name contains one of these (file/encrypted)"
    )
    args = ap.parse_args()
    chunk = args.chunk_mib * MiB
    results: dict[str, object] = {"size_mib": args.size_mib, "chunk_mib": args.chunk_mib}
    with tempfile.TemporaryDirectory(prefix="rsm-bench-", dir=os.environ.get("RSM_BENCH_DIR")) as tmp:
        tmpdir = Path(tmp)
        (tmpdir / "seg").mkdir()
        path, last, size = make_segment(
            tmpdir / "seg", args.size_mib * MiB, lambda rng: _batch_template(rng, 64, 1000)
        )
        seg = (str(path), last, size)
        keyring = tmpdir / "keyring.json"
        keyring.write_text(json.dumps({"k1": generate_key()}))
        path.read_bytes()  # page cache warm for every contender alike
        limit = max(pipeline_limit(path, chunk) for _ in range(2))
        results["pipeline_limit_mb_s"] = limit
        print(
            f"segment {size / MiB:.0f} MiB, chunk {args.chunk_mib} MiB; pipeline limit (CRC-32C + zstd + AES-GCM): {limit:.0f} MB/s"
        )
        variants = {
            "plain": {"unchecked.rsm.compression.enabled": "false"},
            "compressed": {"unchecked.rsm.compression.enabled": "true"},
            "encrypted": {
                "unchecked.rsm.compression.enabled": "true",
                "unchecked.rsm.encryption.enabled": "true",
                "unchecked.rsm.encryption.key.id": "k1",
            },  # fmt: skip
        }
        base = {"chunk.size": str(chunk), "encryption.keyring.path": str(keyring)}
        stores: dict[str, dict[str, str]] = {}
        file_root = tmpdir / "store"
        stores["file"] = {
            **base,
            "storage.backend": "file",
            "storage.file.root": str(file_root),
            "bucket": "bench",
        }
        moto = None
        if not args.no_s3:
            moto, endpoint = start_moto()
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                         aws_secret_access_key="testing").create_bucket(Bucket="bench")  # fmt: skip
            stores["s3"] = {**base, "storage.backend": "s3", "storage.s3.endpoint.url": endpoint,
                            "storage.s3.region": "us-east-1", "storage.s3.access.key.id": "testing",
                            "storage.s3.secret.access.key": "testing", "bucket": "bench"}  # fmt: skip
        try:
            copies: dict[str, dict] = {}
            for store_name, configs in stores.items():
                for variant, topic in variants.items():
                    name = f"{store_name}/{variant}"
                    if args.only and not any(o in name for o in args.only):
                        continue
                    r = run_copy(configs, topic, seg, args.repeat)
                    limit_now = r["paired_limit_mb_s"] or limit
                    r["fraction_of_limit"] = r["mb_s"] / limit_now
                    copies[name] = r
                    print(f"copy {store_name:4s} {variant:10s}: {r['mb_s']:6.0f} MB/s (best of {len(r['runs_mb_s'])}), "
                          f"{r['fraction_of_limit']:4.0%} of the limit measured alongside ({limit_now:.0f} MB/s), "
                          f"peak RSS +{r['rss_peak_above_baseline_mib']:.1f} MiB, stored {r['stored_bytes'] / MiB:.0f} MiB")  # fmt: skip
                    if store_name == "file":
                        import shutil

                        shutil.rmtree(file_root, ignore_errors=True)
            results["copy"] = copies
            fetches: dict[str, dict] = {}
            for store_name, configs in stores.items():
                f = measure_fetch(configs, variants["encrypted"], seg, MiB)
                fetches[store_name] = f
                print(f"fetch {store_name:4s} 1 MiB mid-segment (encrypted): downloaded/requested {f['ratio']:.2f} "
                      f"(target <= {f['target_ratio']:.0f}), TTFB {f['ttfb_ms']:.1f} ms, total {f['total_ms']:.1f} ms")  # fmt: skip
            results["fetch"] = fetches
            if not args.no_clouds:
                results["clouds"] = _cloud_rows(tmpdir, args.cloud_size_mib, chunk, args.repeat)
        finally:
            if moto is not None:
                moto.terminate()
                moto.wait(timeout=30)
    copies = results.get("copy", {})
    print_table(
        f"RSM copy of a {size / MiB:.0f} MiB segment ({args.chunk_mib} MiB chunks)",
        ["store/variant", "MB/s", "limit MB/s", "of limit", "peak RSS MiB", "stored MiB"],
        [
            (name, f"{r['mb_s']:.0f}", f"{r['paired_limit_mb_s'] or limit:.0f}", f"{r['fraction_of_limit']:.0%}",
             f"+{r['rss_peak_above_baseline_mib']:.1f}", f"{r['stored_bytes'] / MiB:.0f}")
            for name, r in copies.items()
        ],
    )  # fmt: skip
    fetches = results.get("fetch", {})
    print_table(
        "RSM fetch of 1 MiB in the middle of the encrypted segment (cold caches)",
        ["store", "downloaded/requested", "target", "TTFB ms", "total ms"],
        [
            (
                name,
                f"{f['ratio']:.2f}",
                f"<= {f['target_ratio']:.0f}",
                f"{f['ttfb_ms']:.1f}",
                f"{f['total_ms']:.1f}",
            )
            for name, f in fetches.items()
        ],
    )
    targets = [
        Target(f"copy {name} / pipeline limit", r["fraction_of_limit"], 0.6)
        for name, r in copies.items()
        if name.startswith("file/") and not name.endswith("plain")
    ]
    targets += [
        Target(f"peak RSS above baseline, copy {name}", r["rss_peak_above_baseline_mib"], 64, at_least=False,
               unit=" MiB")
        for name, r in copies.items()
    ]  # fmt: skip
    targets += [
        Target(f"fetch {name}: downloaded / requested", f["ratio"], f["target_ratio"], at_least=False)
        for name, f in fetches.items()
    ]
    clouds = results.get("clouds", {})
    print_table(
        "GCS and Azure (emulators): the RSM against the SDK's own plain upload / download of the same bytes",
        ["cloud", "copy MB/s", "plain upload MB/s", "copy ratio", "fetch MB/s", "plain download MB/s",
         "fetch ratio"],
        [(name, f"{c['copy_mb_s']:.0f}", f"{c['plain_upload_mb_s']:.0f}", f"{c['copy_ratio']:.2f}x",
          f"{c['fetch_mb_s']:.0f}", f"{c['plain_download_mb_s']:.0f}", f"{c['fetch_ratio']:.2f}x")
         for name, c in clouds.items()],
    )  # fmt: skip
    targets += [
        Target(f"{what} {name} / the emulator's plain {plain}", c[f"{what}_ratio"], 0.6)
        for name, c in clouds.items()
        for what, plain in (("copy", "upload"), ("fetch", "download"))
    ]
    return finish(targets, results, args.json)


def _cloud_rows(tmpdir: Path, size_mib: int, chunk: int, repeat: int) -> dict[str, dict[str, float]]:
    """fake-gcs-server's and Azurite's rows (see `cloud_rows`), on a segment of their own size."""
    import cloud_rows

    (tmpdir / "cloud-seg").mkdir()
    path, last, size = make_segment(
        tmpdir / "cloud-seg", size_mib * MiB, lambda rng: _batch_template(rng, 64, 1000)
    )
    servers = cloud_rows.start_emulators()
    rows = {}
    try:
        for name, server in servers.items():
            rows[name] = row = cloud_rows.measure(name, server, (str(path), last, size), chunk, repeat)
            print(f"{name}: copy {row['copy_mb_s']:.0f} MB/s vs plain upload {row['plain_upload_mb_s']:.0f} "
                  f"({row['copy_ratio']:.2f}x); fetch {row['fetch_mb_s']:.0f} MB/s vs plain download "
                  f"{row['plain_download_mb_s']:.0f} ({row['fetch_ratio']:.2f}x)")  # fmt: skip
    finally:
        for server in servers.values():
            server.stop()
    return rows


if __name__ == "__main__":
    sys.exit(main())
