"""`rsm dump-log --print-data-log` against Kafka's own kafka-dump-log on the same 100k-record files.

    python benchmarks/dump_log.py [--records 100000] [--runs 3] [--check] [--json out.json]

Both tools run as a user runs them, one process each (start-up included), with stdout to a file; the
wall time (and CPU time) of each is the best of ``--runs``, the two measured alternately in one run so
they share the machine's load. Two shapes of segment: batches of 100 records (a producer with linger)
and one record per batch (a producer without). Kafka's tool is DumpLogSegments from kafka-tools 4.3.1,
resolved by Maven into .cache/dumplog-libs as the differential tests do (Java 17 and Maven needed).
The outputs must be byte-identical; the target: ours no slower than Kafka's.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks._common import Target, finish, print_table  # noqa: E402
from segment_format import SegmentWriter, build_batch  # noqa: E402


def write_segment(directory: Path, records: int, per_batch: int, seed: int = 1) -> Path:
    """``records`` records of ~100-byte JSON values with keys, a header on every tenth."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    with SegmentWriter(directory, 0) as w:
        offset = 0
        while offset < records:
            n = min(per_batch, records - offset)
            batch = [
                (
                    b"key-%d" % (offset + i),
                    b'{"id": %d, "amount": %d, "note": "%s"}'
                    % (offset + i, rng.randrange(10**6), rng.randbytes(30).hex().encode()),
                    [("trace", b"abc")] if (offset + i) % 10 == 0 else [],
                    1_700_000_000_000 + offset + i,
                )
                for i in range(n)
            ]
            w.append(
                build_batch(batch, base_offset=offset, producer_id=3, producer_epoch=0, base_sequence=offset)
            )
            offset += n
    return w.log_path


def timed(cmd: list[str], out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``cmd`` with stdout to ``out``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with out.open("wb") as fh:
        subprocess.run(cmd, stdout=fh, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from harness.maven import build_dump_log_tool, kafka_dump_log_command

    libs = build_dump_log_tool()
    rows, targets, results = [], [], {}
    with tempfile.TemporaryDirectory(prefix="bench-dump-log-") as tmp:
        for shape, per_batch in (("100 records per batch", 100), ("1 record per batch", 1)):
            log = write_segment(Path(tmp) / str(per_batch), args.records, per_batch)
            ours_cmd = [
                sys.executable,
                "-m",
                "rsm.cli.main",
                "dump-log",
                "--print-data-log",
                "--files",
                str(log),
            ]
            kafka_cmd = kafka_dump_log_command(libs, "--print-data-log", "--files", str(log))
            ours_out, kafka_out = Path(tmp) / "ours.txt", Path(tmp) / "kafka.txt"
            best: dict[str, tuple[float, float]] = {}
            for _ in range(args.runs):
                for name, cmd, out in (("kafka", kafka_cmd, kafka_out), ("rsm", ours_cmd, ours_out)):
                    wall, cpu = timed(cmd, out)
                    if name not in best or wall < best[name][0]:
                        best[name] = (wall, cpu)
            identical = ours_out.read_bytes() == kafka_out.read_bytes()
            size = os.path.getsize(log)
            for name in ("kafka", "rsm"):
                wall, cpu = best[name]
                rows.append((shape, name, f"{size / 1e6:.1f} MB", f"{wall:.2f} s", f"{cpu:.2f} s",
                             f"{args.records / wall / 1e3:.0f} k/s"))  # fmt: skip
            ratio = best["kafka"][0] / best["rsm"][0]
            results[shape] = {"kafka": best["kafka"], "rsm": best["rsm"], "identical": identical}
            targets.append(Target(f"{shape}: output identical to Kafka's (1 = yes)", float(identical), 1.0))
            targets.append(Target(f"{shape}: Kafka's wall time / ours", ratio, 1.0, unit="x"))
    print_table(
        f"dump-log --print-data-log, {args.records:,} records (best of {args.runs})",
        ("segment", "tool", "log size", "wall", "cpu", "records/s"),
        rows,
    )
    status = finish(targets, results, args.json)
    return status if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
