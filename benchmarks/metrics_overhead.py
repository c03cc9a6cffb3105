"""What rsm.metrics costs: copy and fetch throughput with metrics on and off, measured in one run.

    python benchmarks/metrics_overhead.py [--size-mib 32] [--rounds 201] [--block 25] [--json out.json]

One RemoteStorageManager on a file store, pinned to one core, its recorder switched between rsm.metrics'
(``metrics.enabled=true``, the default) and the one of ``metrics.enabled=false`` between blocks of work,
and its methods between themselves and the same without the wrapper that counts their failures:
the same instance, memory and cache on both sides (each side its own segment readers, made before the
blocks), so what differs is the metrics alone (two instances of the same configuration differed by 10-15%
here, far more than the metrics cost). Blocks are paired and alternate their order (on then off, off then
on, ...), as many of each; each cost is the geometric mean of the median on/off ratio of each order, so
both sides see the same interference from the machine's other work and the first block of a pair, slower
whatever it measures, weighs on neither. A control run switches
between two identical sides ("off vs off"): what it shows is the noise of the measurement.

- copy: the whole segment (uncompressed magic-2 batches, ~64 KiB each), MB/s;
- fetch: blocks of ``--block`` fetches of 1 MiB at random positions of the copied segment, each opened,
  read into one buffer and closed, as the bridge does for one Kafka fetch, with every chunk in the chunk
  cache: the cheapest fetch there is (tens of microseconds), so what the metrics add weighs the most here;
- the same with the chunk cache emptied before each block: every chunk read from the store and checked,
  as fetches of old data are (through the bridge a 1 MiB fetch takes about 1 ms either way).

Also the recording alone: what one fetch adds (its record at close and two clock readings), in a loop.
Targets: the metrics cost under 2% of copy and of fetch throughput, for fetches reading chunks
from the store as the RSM serves old data, and for the cached fetch, which does nothing but the bookkeeping
of a fetch and one memory copy: the worst case (through the bridge a 1 MiB fetch takes about 1 ms, see the
last row). The control row shows how far the measurement itself wanders.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import Target, finish, make_segment, metadata_for, pin_to_one_cpu, print_table
from rsm_copy_fetch import _batch_template

from rsm import RemoteStorageManager, metrics

MiB = 1 << 20


def paired(
    work: Callable[[], object], switch: Callable[[bool], None], pairs: int
) -> tuple[float, float, float]:
    """Median time of ``work`` with metrics on, off, and the on/off ratio; the pairs alternate their order.

    The first block of a pair runs slower than the second whatever it measures (an off-vs-off control
    showed +1.3% from that alone), so the ratio is taken as the geometric mean of the medians over the
    on-first and over the off-first pairs: the order's effect cancels."""
    on: list[float] = []
    off: list[float] = []
    ratios: tuple[list[float], list[float]] = ([], [])
    for r in range(pairs + pairs % 2):  # as many pairs of each order
        times = {}
        for enabled in (True, False) if r % 2 == 0 else (False, True):
            switch(enabled)
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                work()
                times[enabled] = time.perf_counter() - start
            finally:
                gc.enable()
        on.append(times[True])
        off.append(times[False])
        ratios[r % 2].append(times[True] / times[False])
    ratio = math.sqrt(statistics.median(ratios[0]) * statistics.median(ratios[1]))
    return statistics.median(on), statistics.median(off), ratio


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=201, help="pairs of fetch blocks")
    parser.add_argument("--block", type=int, default=25, help="fetches per block")
    parser.add_argument("--copies", type=int, default=15, help="pairs of copies")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cpu = pin_to_one_cpu()
    with tempfile.TemporaryDirectory(prefix="rsm-metrics-bench-") as tmp:
        tmpdir = Path(tmp)
        path, last, size = make_segment(
            tmpdir / "seg", args.size_mib * MiB, lambda rng: _batch_template(rng, 64, 1000)
        )
        rsm = RemoteStorageManager()
        rsm.configure(
            {
                "storage.backend": "file",
                "storage.file.root": str(tmpdir / "store"),
                "compression.enabled": "false",
                "cache.chunk.bytes": str(
                    2 * size
                ),  # every chunk stays cached: fetches measure the fetch path
            }
        )
        recorders = {True: rsm._state.metrics, False: metrics.NoMetrics()}
        # segment readers keep the recorder they were made with: each side keeps its own, so a block measures
        # fetches and not the making of a reader
        readers = {True: rsm._state.readers, False: type(rsm._state.readers)(rsm._state.readers.max_entries)}
        # the methods as they are (their failures counted) and without that wrapper, as with no metrics
        cls = type(rsm)
        methods = {
            True: (cls.copy_log_segment_data, cls.fetch_log_segment),
            False: (cls.copy_log_segment_data.__wrapped__, cls.fetch_log_segment),  # fetch counts inline
        }
        current = list(methods[True])

        def switch(enabled: bool) -> None:  # what metrics.enabled chooses at configure
            rsm._state.metrics = recorders[enabled]
            rsm._state.readers = readers[enabled]
            current[:] = methods[enabled]

        def control(enabled: bool) -> None:  # the same switching, both sides without metrics
            switch(False)

        def copy() -> None:
            md, data = metadata_for(path, last, size)
            current[0](rsm, md, data)

        md, data = metadata_for(path, last, size)
        md = dataclasses.replace(md, custom_metadata=rsm.copy_log_segment_data(md, data))
        with rsm.fetch_log_segment(md, 0) as s:  # every chunk into the cache
            while s.read(8 * MiB):
                pass
        rng = random.Random(1)
        positions = [rng.randrange(0, size - MiB) for _ in range(args.block)]
        buf = bytearray(MiB)

        def fetch() -> None:
            fetch_log_segment = current[1]
            for pos in positions:
                s = fetch_log_segment(rsm, md, pos)
                s.readinto(buf)
                s.close()

        def cold_fetch() -> None:
            rsm._state.chunks.clear()  # every chunk read from the store and checked again, as for old data
            fetch()

        copy_on, copy_off, copy_ratio = paired(copy, switch, args.copies)
        fetch_on, fetch_off, fetch_ratio = paired(fetch, switch, args.rounds)
        _, _, control_ratio = paired(fetch, control, args.rounds)
        cold_on, cold_off, cold_ratio = paired(cold_fetch, switch, max(5, args.rounds // 4))
        recorded = metrics.REGISTRY.values().get("segment-fetch-total", 0)
        rsm.close()
    assert recorded >= args.rounds * args.block, "metrics on recorded nothing"

    # -- the recording alone: what one fetch adds (its record at close, two clock readings)
    stats = metrics.RsmMetrics(metrics.MetricsRegistry()).partition("bench", 0)
    assert stats is not None
    n = 200_000
    start = time.perf_counter()
    for _ in range(n):
        opened = time.monotonic()
        stats.fetched(MiB, time.monotonic() - opened)
    stats.fetches.fold()
    per_fetch_us = (time.perf_counter() - start) / n * 1e6

    copy_cost, fetch_cost, cold_cost = (copy_ratio - 1) * 100, (fetch_ratio - 1) * 100, (cold_ratio - 1) * 100
    fetch_us = {"on": fetch_on / args.block * 1e6, "off": fetch_off / args.block * 1e6}
    print_table(
        f"metrics on vs off ({args.size_mib} MiB segment; {args.copies} pairs of copies; {args.rounds} pairs of "
        f"{args.block} cached 1 MiB fetches; medians; cpu {cpu})",
        ["", "metrics on", "metrics off", "cost (median of on/off)"],
        [
            [
                "copy MB/s",
                f"{size / MiB / copy_on:,.0f}",
                f"{size / MiB / copy_off:,.0f}",
                f"{copy_cost:+.2f}%",
            ],
            [
                "fetch GB/s",
                f"{args.block * MiB / fetch_on / 1e9:,.2f}",
                f"{args.block * MiB / fetch_off / 1e9:,.2f}",
                f"{fetch_cost:+.2f}%",
            ],
            ["control: off vs off, cached fetches", "", "", f"{(control_ratio - 1) * 100:+.2f}%"],
            [
                "fetch GB/s, chunks from the store",
                f"{args.block * MiB / cold_on / 1e9:,.2f}",
                f"{args.block * MiB / cold_off / 1e9:,.2f}",
                f"{cold_cost:+.2f}%",
            ],
            [
                "us per cached fetch",
                f"{fetch_us['on']:,.1f}",
                f"{fetch_us['off']:,.1f}",
                f"{fetch_us['on'] - fetch_us['off']:+.2f} us",
            ],
            [
                "recording alone, us per fetch",
                f"{per_fetch_us:.2f}",
                "",
                f"{per_fetch_us / fetch_us['off'] * 100:.2f}% of a cached fetch",
            ],
            [
                "... of a 1 MiB fetch through the bridge at 1 GB/s",
                "",
                "",
                f"{per_fetch_us / (MiB / 1e9 * 1e6) * 100:.2f}%",
            ],
        ],
    )
    results = {
        "copy_mb_s": {"on": size / MiB / copy_on, "off": size / MiB / copy_off},
        "fetch_gb_s": {"on": args.block * MiB / fetch_on / 1e9, "off": args.block * MiB / fetch_off / 1e9},
        "cold_fetch_gb_s": {"on": args.block * MiB / cold_on / 1e9, "off": args.block * MiB / cold_off / 1e9},
        "cold_fetch_cost_percent": cold_cost,
        "control_percent": (control_ratio - 1) * 100,
        "us_per_fetch": fetch_us,
        "copy_cost_percent": copy_cost,
        "fetch_cost_percent": fetch_cost,
        "recording_us_per_fetch": per_fetch_us,
    }
    targets = [
        Target("copy throughput lost to metrics", copy_cost, 2.0, at_least=False, unit="%"),
        Target(
            "cached fetch throughput lost to metrics (the worst case)",
            fetch_cost,
            2.0,
            at_least=False,
            unit="%",
        ),  # fmt: skip
        Target(
            "fetch throughput (chunks from the store) lost to metrics",
            cold_cost,
            2.0,
            at_least=False,
            unit="%",
        ),
    ]
    return finish(targets, results, args.json)


if __name__ == "__main__":
    sys.exit(main())
