"""A soak through the bridge: copies, fetches and deletes at once for a bounded time; errors, memory, latency.

    python benchmarks/soak.py [--seconds 120] [--fetchers 12] [--copiers 2] [--json out.json]

A bridge process (`rsm bridge serve`, file store, compressed and encrypted segments) serves, for
``--seconds``: ``--copiers`` threads each copying fresh ~4 MiB segments and deleting the oldest once more
than a few are live (Kafka's copier and expiration threads), and ``--fetchers`` threads each fetching 1 MiB
from a random position of a random live segment and comparing every byte with the segment's file (Kafka's
remote readers). Every call goes through the Python client over the bridge's socket.

Reported: operations by kind, errors (any exception, and any fetch whose bytes differ), fetch latency
p50/p99, and the bridge's resident memory after a warm-up, at the end and at its peak. Targets: zero
errors, zero wrong bytes, and memory flat: the bridge ends within 25% (and 64 MiB) of its warm RSS.
`tests/broker/test_soak.py` runs the same soak for a few seconds in CI.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Target, finish, make_segment, metadata_for, print_table  # noqa: E402
from bridge import bridge_batch, start_bridge  # noqa: E402

from rsm.bridge.client import BridgeClient  # noqa: E402
from rsm.config.keyring import generate_key  # noqa: E402

MiB = 1 << 20
READ_BYTES = MiB
LIVE_SEGMENTS = 6  # per copier: older ones are deleted, as retention does


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class SoakResult:
    seconds: float
    copies: int = 0
    deletes: int = 0
    fetches: int = 0
    errors: list[str] = field(default_factory=list)
    wrong_bytes: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    rss_warm_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_peak_mib: float = 0.0

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        return {
            "seconds": round(self.seconds, 1),
            "copies": self.copies,
            "deletes": self.deletes,
            "fetches": self.fetches,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
            "wrong_bytes": self.wrong_bytes,
            "p50_ms": round(statistics.median(lat), 2) if lat else None,
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2) if lat else None,
            "rss_warm_mib": round(self.rss_warm_mib, 1),
            "rss_end_mib": round(self.rss_end_mib, 1),
            "rss_peak_mib": round(self.rss_peak_mib, 1),
        }

    @property
    def memory_flat(self) -> bool:
        return self.rss_end_mib <= max(self.rss_warm_mib * 1.25, self.rss_warm_mib + 64)


def run_soak(
    work: Path, seconds: float, fetchers: int = 12, copiers: int = 2, segment_mib: int = 4
) -> SoakResult:
    """Run the soak in `work` (a fresh directory); returns what happened (see the module docstring)."""
    keyring = work / "keyring.json"
    keyring.write_text(json.dumps({"k1": generate_key()}))
    keyring.chmod(0o600)
    configs = {
        "storage.backend": "file",
        "storage.file.root": str(work / "store"),
        "encryption.enabled": "true",
        "encryption.keyring.path": str(keyring),
        "encryption.key.id": "k1",
        "chunk.size": str(MiB),
        "cache.chunk.bytes": str(16 * MiB),
    }
    sources = []
    for i in range(copiers):
        path, last, size = make_segment(work / f"src{i}", segment_mib * MiB, bridge_batch, seed=i)
        sources.append((path, last, size, path.read_bytes()))
    proc, sock = start_bridge(work, configs)
    result = SoakResult(seconds=seconds)
    live: list[tuple[Any, bytes]] = []  # (metadata with custom metadata, original bytes)
    lock = threading.Lock()
    stop = threading.Event()

    def error(what: str, exc: BaseException) -> None:
        with lock:
            result.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:300])

    def copier(i: int) -> None:
        import dataclasses

        client = BridgeClient(sock)
        path, last, size, original = sources[i]
        mine: list[Any] = []
        while not stop.is_set():
            md, data = metadata_for(path, last, size)
            try:
                custom = client.copy_log_segment_data(md, data)
                md = dataclasses.replace(md, custom_metadata=custom)
                mine.append(md)
                with lock:
                    live.append((md, original))
                    result.copies += 1
                if len(mine) > LIVE_SEGMENTS:
                    old = mine.pop(0)
                    with lock:
                        live[:] = [x for x in live if x[0] is not old]
                    client.delete_log_segment_data(old)
                    with lock:
                        result.deletes += 1
            except Exception as exc:  # noqa: BLE001 - counted
                error("copy/delete", exc)
        client.close()

    def fetcher(seed: int) -> None:
        rng = random.Random(seed)
        client = BridgeClient(sock)
        while not stop.is_set():
            with lock:  # one of the newest few
                target = live[-1 - rng.randrange(min(len(live), LIVE_SEGMENTS))] if live else None
            if target is None:
                time.sleep(0.01)
                continue
            md, original = target
            pos = rng.randrange(0, len(original) - READ_BYTES)
            t0 = time.perf_counter()
            try:
                with client.fetch_log_segment(md, pos) as stream:
                    got = bytearray()
                    while len(got) < READ_BYTES and (piece := stream.read(READ_BYTES - len(got))):
                        got += piece
            except Exception as exc:  # noqa: BLE001 - a segment deleted under a reader is a race, not a fault
                with lock:
                    deleted = not any(x[0] is md for x in live)
                if not deleted:
                    error("fetch", exc)
                continue
            elapsed = (time.perf_counter() - t0) * 1000
            with lock:
                result.fetches += 1
                result.latencies_ms.append(elapsed)
                if got != original[pos : pos + READ_BYTES]:
                    result.wrong_bytes += 1
        client.close()

    threads = [threading.Thread(target=copier, args=(i,), daemon=True) for i in range(copiers)]
    threads += [threading.Thread(target=fetcher, args=(100 + i,), daemon=True) for i in range(fetchers)]
    try:
        for t in threads:
            t.start()
        warm = min(10.0, seconds / 4)
        time.sleep(warm)
        result.rss_warm_mib = rss_mib(proc.pid)
        deadline = time.monotonic() + seconds - warm
        while time.monotonic() < deadline:
            result.rss_peak_mib = max(result.rss_peak_mib, rss_mib(proc.pid))
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(60)
        time.sleep(2)  # the bridge trims its heap once requests stop
        result.rss_end_mib = rss_mib(proc.pid)
        result.rss_peak_mib = max(result.rss_peak_mib, result.rss_end_mib)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--fetchers", type=int, default=12)
    parser.add_argument("--copiers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsm-soak-") as tmp:
        result = run_soak(Path(tmp), args.seconds, args.fetchers, args.copiers)
    s = result.summary()
    print_table("soak through the bridge", list(s), [[str(v) for v in s.values()]])
    flat_limit = max(result.rss_warm_mib * 1.25, result.rss_warm_mib + 64)
    targets = [
        Target("errors", s["errors"], 0, at_least=False),
        Target("fetches with wrong bytes", s["wrong_bytes"], 0, at_least=False),
        Target("bridge RSS at the end (warm + 25% or 64 MiB)", result.rss_end_mib, flat_limit, False, " MiB"),
    ]
    return finish(targets, s, args.json)


if __name__ == "__main__":
    sys.exit(main())
