"""What the bridge costs: fetches through `rsm bridge serve` vs the same RemoteStorageManager in process.

    python benchmarks/bridge.py [--size-mib 128] [--readers 10] [--fetches 40] [--json out.json]

One segment is tiered into a file store once; then, in the same run, two identical workloads read it with
``--readers`` concurrent threads (Kafka runs ten remote reader threads):
- ``kafka-like``: fetch from a random position with no end, read 1 MiB (Kafka's default partition fetch
  size), close the stream early (the bridge cancels the rest);
- ``sequential``: every reader streams the whole segment from position 0.
Every reader, in process or in the JVM, reads into one reused buffer of 1 MiB (Kafka's fetch size: the
broker's RemoteLogManager reads a remote fetch into one buffer of that size).
"in-process" calls ``RemoteStorageManager.fetch_log_segment`` directly; "bridge" sends the same calls
through a bridge process over its Unix socket with the Python client (``rsm.bridge.client``), and with the
JVM plugin itself (``BenchDriver``, one JVM per transport): ``shm`` (fetched bytes through the bridge's
shared-memory rings, the plugin's default) and ``socket`` (DATA frames, ``bridge.transport=socket``).
Reported: MB/s, fetch latency (p50/p99, time to first byte) and CPU seconds per GiB
(client + bridge processes). Runs for plain segments (the cheapest RSM work, the bridge's worst case)
and compressed+encrypted ones, each with a hot chunk cache (the segment is in memory: reads are memory
copies, a ceiling no inter-process path can match) and a cold one (reads decode chunks from the store,
as remote reads of old data do). Target, on the cold runs through the JVM plugin with its default
transport (shm): the bridge keeps at least 80% of the in-process throughput. The socket transport (the
fallback when no private tmpfs is usable) is reported beside it without a target.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Target, finish, make_segment, metadata_for, print_table

from rsm import RemoteLogSegmentMetadata, RemoteStorageManager
from rsm.bridge import shm
from rsm.bridge.client import BridgeClient
from rsm.bridge.server import DEFAULT_MMAP_THRESHOLD_BYTES, default_arena_blocks, tune_allocator
from rsm.bridge.shm import ChunkArena
from rsm.cli.bridge import serve_command

MiB = 1 << 20
READ_BYTES = 1 * MiB
CHUNK_BYTES = 4 * MiB  # the RSM's default chunk.size
WORKLOADS = {"kafka-like 1 MiB": False, "sequential": True}  # name -> reads the whole segment


def bridge_batch(rng: random.Random) -> bytes:
    """One uncompressed batch of 64 records with 1000-byte values (half random, half repeated JSON)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i in range(64):
        value = rng.randbytes(500) + (b'{"k":%d,"text":"abcdefgh"}' % rng.randrange(10**9)) * 17
        builder.append(i, 1_700_000_000_000 + i, f"key-{rng.randrange(10**9)}".encode(), value[:1000], [])
    return bytes(builder.build())


def _read(stream: Any, limit: int | None, view: memoryview) -> tuple[int, float]:
    """Read up to limit bytes (all when None) into ``view``; returns (bytes, seconds to the first byte).

    Every reader reads as Kafka does (RemoteLogManager reads a remote fetch into one buffer of the fetch
    size, 1 MiB) and as the JVM driver does: into a reused buffer of READ_BYTES. A smaller buffer would
    stay in the CPU's cache and make this side's copy cheaper than the broker's.
    """
    t0 = time.perf_counter()
    first = None
    total = 0
    while limit is None or total < limit:
        want = len(view) if limit is None else min(len(view), limit - total)
        n = stream.readinto(view[:want])
        if not n:
            break
        if first is None:
            first = time.perf_counter() - t0
        total += n
    return total, first or 0.0


def run_workload(
    fetch: Callable[[RemoteLogSegmentMetadata, int], Any],
    md: RemoteLogSegmentMetadata,
    size: int,
    readers: int,
    fetches: int,
    sequential: bool,
    seed: int,
) -> dict[str, float]:
    rng = random.Random(seed)
    plans = [
        [0] * max(1, fetches // 20)
        if sequential
        else [rng.randrange(0, size - READ_BYTES) for _ in range(fetches)]
        for _ in range(readers)
    ]
    latencies: list[float] = []
    ttfbs: list[float] = []
    moved = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(readers + 1)

    def reader(plan: list[int]) -> None:
        view = memoryview(bytearray(READ_BYTES))
        barrier.wait()
        for pos in plan:
            t0 = time.perf_counter()
            stream = fetch(md, pos)
            n, ttfb = _read(stream, None if sequential else READ_BYTES, view)
            stream.close()
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                ttfbs.append(ttfb + 0.0)
                moved[0] += n

    threads = [threading.Thread(target=reader, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    cpu0 = os.times()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu1 = os.times()
    latencies.sort()
    return {
        "bytes": moved[0],
        "wall_s": wall,
        "mb_s": moved[0] / MiB / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "client_cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
    }


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_bridge(work: Path, configs: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    props = work / "server.properties"
    props.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in configs.items()))
    sock = work / "b.sock"
    proc = subprocess.Popen(
        serve_command(props, sock),
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            BridgeClient(sock).health()
            return proc, sock
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("bridge did not start")


JVM_DIR = Path(__file__).resolve().parents[1] / "rsm" / "bridge" / "jvm"


def jvm_classpath() -> str | None:
    """Classpath of the plugin's classes, its bench driver and Kafka's client jars, or None (no JDK/Maven)."""
    import shutil

    if shutil.which("java") is None or shutil.which("mvn") is None:
        return None
    from rsm.cli.bridge import build_plugin

    build_plugin()
    cp_file = JVM_DIR / "target" / "classpath.txt"
    if not cp_file.exists():
        subprocess.run(
            ["mvn", "-B", "-q", "-f", str(JVM_DIR / "pom.xml"), "dependency:build-classpath",
             f"-Dmdep.outputFile={cp_file}", "-Dmdep.includeScope=provided"],
            check=True,
        )  # fmt: skip
    return os.pathsep.join(
        [
            str(JVM_DIR / "target" / "classes"),
            str(JVM_DIR / "target" / "test-classes"),
            cp_file.read_text().strip(),
        ]
    )


class JvmDriver:
    """The workload through the JVM plugin (BridgeRemoteStorageManager, Kafka's path) on a running bridge.

    One JVM per workload: it warms up (JIT) for ``warmup_s`` seconds of the same workload (a broker is a
    long-running JVM: its steady state is the figure to judge), then runs one measured run per `run()`, so
    its runs interleave with the other modes'.
    """

    def __init__(
        self, classpath: str, sock: Path, md: RemoteLogSegmentMetadata, size: int, readers: int, fetches: int,
        sequential: bool, work: Path, transport: str = "shm", warmup_s: float = 8.0,
    ) -> None:  # fmt: skip
        from rsm.bridge.protocol import uuid_to_kafka

        props = work / f"jvm-plugin-{transport}.properties"
        props.write_text(
            f"bridge.socket.path={sock}\nbridge.command=\nbridge.pool.size={readers + 2}\n"
            f"bridge.transport={transport}\n"
        )
        tip = md.remote_log_segment_id.topic_id_partition
        seg = {
            "topic_id": uuid_to_kafka(tip.topic_id), "topic": tip.topic, "partition": tip.partition,
            "segment_id": uuid_to_kafka(md.remote_log_segment_id.id), "start": md.start_offset,
            "end": md.end_offset, "size": size,
            "custom_metadata": base64.b64encode(md.custom_metadata.value).decode() if md.custom_metadata else None,
        }  # fmt: skip
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", "-cp", classpath, "io.tieredrsm.bridge.BenchDriver", str(props), json.dumps(seg),
             str(readers), str(fetches), str(-1 if sequential else READ_BYTES), "2",
             str(warmup_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert self.proc.stdout
        for line in self.proc.stdout:
            if line.startswith("@@ready"):
                return
        raise RuntimeError("the JVM bench driver failed to start")

    def run(self) -> dict[str, float]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                result = json.loads(line[3:])
                if result.get("bytes"):
                    return result
        raise RuntimeError("the JVM bench driver failed")

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=128)
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--fetches", type=int, default=40, help="1 MiB fetches per reader (kafka-like)")
    parser.add_argument("--prefetch", type=int, default=0, help="the RSM's fetch.prefetch.chunks")
    parser.add_argument("--frame-kib", type=int, default=256, help="bridge.frame.bytes / 1024")
    parser.add_argument(
        "--initial-frame-kib", type=int, default=256, help="bridge.frame.initial.bytes / 1024"
    )
    parser.add_argument(
        "--sndbuf-kib",
        type=int,
        default=1024,
        help="bridge.socket.send.buffer.bytes / 1024 (0: system default)",
    )
    parser.add_argument(
        "--no-malloc-tuning",
        action="store_true",
        help="leave glibc's mmap threshold at its default in the bridge and in this process",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra rsm.config.* setting for the bridge and the in-process RSM (repeatable), e.g. "
        "bridge.fetch.permits=3",
    )
    parser.add_argument("--rounds", type=int, default=5, help="measured runs per mode, interleaved")
    parser.add_argument(
        "--only", default="", help="run only the runs whose 'variant / workload' name contains this text"
    )
    parser.add_argument("--no-jvm", action="store_true", help="skip the runs through the JVM plugin")
    parser.add_argument(
        "--jvm-warmup-s", type=float, default=8.0, help="seconds of JIT warm-up per JVM before measuring"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    classpath = None if args.no_jvm else jvm_classpath()
    # the bridge raises glibc's mmap threshold (decoded chunks reuse heap memory instead of page-faulting
    # fresh mappings); the in-process baseline gets the same allocator policy, so the ratio measures the
    # bridge, not malloc (--no-malloc-tuning: neither side is tuned)
    mmap_threshold = 0 if args.no_malloc_tuning else DEFAULT_MMAP_THRESHOLD_BYTES
    tune_allocator(mmap_threshold)
    results: dict[str, Any] = {}
    targets: list[Target] = []
    info: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rsmbench-", dir="/tmp") as tmp:
        work = Path(tmp)
        seg_dir = work / "seg"
        seg_dir.mkdir()
        path, last, size = make_segment(seg_dir, args.size_mib * MiB, bridge_batch, seed=11)
        keyring = work / "keyring.json"
        keyring.write_text(json.dumps({"k1": base64.b64encode(os.urandom(32)).decode()}))
        keyring.chmod(0o600)
        # fetch.prefetch.chunks=0: with prefetch on, a reader that stops after 1 MiB leaves a whole 4 MiB
        # chunk decoded for nothing, and how often depends on reader pacing, not on the bridge (see the
        # --prefetch option to measure it anyway)
        base = {
            "storage.backend": "file",
            "storage.file.root": str(work / "store"),
            "bucket": "bench",
            "fetch.prefetch.chunks": str(args.prefetch),
            "bridge.frame.bytes": str(args.frame_kib * 1024),
            "bridge.frame.initial.bytes": str(args.initial_frame_kib * 1024),
            "bridge.socket.send.buffer.bytes": str(args.sndbuf_kib * 1024),
            "bridge.malloc.mmap.threshold.bytes": str(mmap_threshold),
            **dict(kv.split("=", 1) for kv in args.set),
        }
        plain = {**base, "prefix": "plain/", "compression.enabled": "false", "encryption.enabled": "false"}
        enc = {
            **base,
            "prefix": "enc/",
            "compression.enabled": "true",
            "encryption.enabled": "true",
            "encryption.keyring.path": str(keyring),
            "encryption.key.id": "k1",
        }
        # hot: the chunk cache holds the whole segment (reads are memory copies); cold: it holds 2 chunks,
        # so most reads decode chunks from the store, as remote reads of old data do in production
        hot = {"cache.chunk.bytes": str(2 * args.size_mib * MiB)}
        cold = {"cache.chunk.bytes": str(8 * MiB)}
        variants = {
            "plain, hot cache": {**plain, **hot},
            "plain, cold cache": {**plain, **cold},
            "compressed+encrypted, hot cache": {**enc, **hot},
            "compressed+encrypted, cold cache": {**enc, **cold},
        }
        rows = []
        for name, configs in variants.items():
            if not any(args.only in f"{name} / {w}" for w in WORKLOADS):
                continue
            md, data = metadata_for(path, last, size)
            rsm = RemoteStorageManager()
            rsm.configure(configs)
            # the in-process RSM decodes into the same kind of arena the bridge uses (private memory here):
            # chunks reuse pre-faulted blocks on both sides, so the ratio measures the crossing alone
            arena = ChunkArena.anonymous(
                default_arena_blocks(
                    int(configs["cache.chunk.bytes"]),
                    CHUNK_BYTES,
                    args.prefetch,
                    shm.DEFAULT_SLOTS * shm.DEFAULT_SLOT_BYTES,
                ),
                CHUNK_BYTES,
            )
            rsm.set_chunk_allocator(arena.allocate)
            custom = rsm.copy_log_segment_data(md, data, None)
            md = RemoteLogSegmentMetadata(**{**md.__dict__, "custom_metadata": custom})
            proc, sock = start_bridge(work, configs)
            client = BridgeClient(sock, pool_size=args.readers + 2)

            def in_process_reads(rsm: RemoteStorageManager = rsm) -> int:
                return rsm.store.stats.snapshot()["bytes_read"]

            def bridge_reads(client: BridgeClient = client) -> int:
                return int(client.health().get("store_bytes_read") or 0)

            def bridge_streamed(client: BridgeClient = client) -> int:
                return int(client.health().get("bytes_streamed") or 0)

            try:
                for workload, sequential in WORKLOADS.items():
                    if args.only not in f"{name} / {workload}":
                        continue
                    # the JVM plugin over both transports: shared-memory rings (the default) and socket frames
                    jvms = {
                        transport: JvmDriver(
                            classpath,
                            sock,
                            md,
                            size,
                            args.readers,
                            args.fetches,
                            sequential,
                            work,
                            transport,
                            args.jvm_warmup_s,
                        )
                        for transport in (("shm", "socket") if classpath else ())
                    }
                    modes: list[tuple[str, Callable[..., Any], Callable[[], int]]] = [
                        ("in-process", rsm.fetch_log_segment, in_process_reads),
                        ("bridge, Python client", client.fetch_log_segment, bridge_reads),
                    ]
                    for transport, jvm in jvms.items():
                        modes.append((f"bridge, JVM plugin, {transport}", jvm.run, bridge_reads))
                    # warm-up (caches, connections; the JVM warmed itself up), then --rounds measured runs
                    # per mode, interleaved (a, b, c, a, b, c, ...): on a shared machine every mode sees the
                    # same spells of load; the fastest run of each (the least disturbed) is reported
                    for _mode, fetch, _ in modes[:2]:
                        run_workload(fetch, md, size, args.readers, max(2, args.fetches // 10), sequential, 1)
                    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode, _, _ in modes}
                    try:
                        for _ in range(args.rounds):
                            for mode, fetch, counter in modes:
                                cpu0, read0, streamed0 = proc_cpu(proc.pid), counter(), bridge_streamed()
                                if mode.startswith("bridge, JVM plugin"):
                                    r = fetch()
                                else:
                                    r = run_workload(
                                        fetch, md, size, args.readers, args.fetches, sequential, 2
                                    )
                                bridge = mode != "in-process"
                                r["bridge_cpu_s"] = proc_cpu(proc.pid) - cpu0 if bridge else 0.0
                                r["store_read_bytes"] = counter() - read0
                                r["bridge_sent_bytes"] = (
                                    bridge_streamed() - streamed0 if bridge else r["bytes"]
                                )
                                r["cpu_s_per_gib"] = (r["client_cpu_s"] + r["bridge_cpu_s"]) / (
                                    r["bytes"] / (1 << 30)
                                )
                                runs[mode].append(r)
                    finally:
                        for jvm in jvms.values():
                            jvm.close()
                    out: dict[str, dict[str, Any]] = {}
                    for mode, mode_runs in runs.items():
                        r = max(mode_runs, key=lambda x: x["mb_s"])
                        out[mode] = {**r, "mb_s_all_rounds": [x["mb_s"] for x in mode_runs]}
                        rows.append(
                            (
                                f"{name} / {workload} / {mode}",
                                f"{r['mb_s']:,.0f}",
                                " ".join(f"{x['mb_s']:,.0f}" for x in mode_runs),
                                f"{r['p50_ms']:.1f}",
                                f"{r['p99_ms']:.1f}",
                                f"{r['cpu_s_per_gib']:.2f}",
                                f"{r['bridge_cpu_s'] / (r['bytes'] / (1 << 30)):.2f}",
                                f"{r['store_read_bytes'] / r['bytes']:.2f}",
                                f"{r['bridge_sent_bytes'] / r['bytes']:.2f}",
                            )
                        )
                    bridge_modes = (
                        ["bridge, JVM plugin, shm", "bridge, JVM plugin, socket"]
                        if classpath
                        else ["bridge, Python client"]
                    )
                    ratios = {m: out[m]["mb_s"] / out["in-process"]["mb_s"] for m in bridge_modes}
                    results[f"{name} / {workload}"] = {
                        **out,
                        "bridge_over_in_process": ratios[bridge_modes[0]],
                        "ratios": ratios,
                    }
                    for bridge_mode, ratio in ratios.items():
                        label = f"{bridge_mode} / in-process throughput, {name}, {workload}"
                        if "cold" not in name:
                            info.append(
                                f"{label} = {ratio:.2f} (no target: hot cache reads are memory copies)"
                            )
                        elif bridge_mode == bridge_modes[0]:
                            targets.append(Target(label, ratio, 0.8))
                        else:  # the socket fallback (no usable /dev/shm): reported, judged by the default
                            info.append(f"{label} = {ratio:.2f} (fallback transport: no target)")
            finally:
                client.close()
                proc.terminate()
                proc.wait(30)
                rsm.close()
    print_table(
        f"{args.readers} concurrent readers, {args.size_mib} MiB segment, file store",
        (
            "run",
            "MB/s (best)",
            "MB/s per round",
            "p50 ms",
            "p99 ms",
            "CPU s/GiB",
            "of which bridge",
            "store read/delivered",
            "sent/delivered",
        ),
        rows,
    )
    for line in info:
        print(line)
    return finish(targets, results, args.json)


if __name__ == "__main__":
    sys.exit(main())
