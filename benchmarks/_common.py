"""Small shared helpers for benchmark scripts: one core, one process, best-of timings, rich tables.

Benchmarks in this repository report speed targets as ratios measured in one run (never as timed test
assertions), so the helpers here are about making one run trustworthy: pin the process to one CPU,
repeat each measurement and keep the fastest (the least disturbed by other work on the machine), print
a table and a PASS/FAIL line per target.
"""

from __future__ import annotations

import gc
import json
import os
import random
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# the repository root, so the scripts run from a clone without installing it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from rsm import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from segment_format.indexes import build_indexes

__all__ = [
    "Target",
    "best_time",
    "best_times",
    "console",
    "make_segment",
    "metadata_for",
    "pin_to_one_cpu",
    "print_table",
    "report_targets",
    "finish",
]

# Wide enough for the result tables when output goes to a file or a CI log (no terminal to measure).
console = Console(width=None if sys.stdout.isatty() else 200)


def pin_to_one_cpu(cpu: int | None = None) -> int | None:
    """Pin this process to one CPU (the given one, else the highest allowed); returns it, or None.

    Pinning keeps "per core" figures honest: no thread of numpy/arrow/zlib can borrow a second core.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = cpu if cpu is not None else allowed[-1]
    os.sched_setaffinity(0, {chosen})
    return chosen


def best_times(
    fns: Sequence[Callable[[], object]], *, repeat: int = 5, min_seconds: float = 0.0, max_repeat: int = 50
) -> list[float]:
    """Fastest run of each function, running them in turn (a, b, a, b, ...).

    For a ratio of two measurements this matters on a shared machine: both sides see the same spells
    of interference, instead of one side getting a quiet minute and the other a busy one.
    """
    best = [float("inf")] * len(fns)
    spent = 0.0
    runs = 0
    while runs < repeat or (spent < min_seconds and runs < max_repeat):
        for i, fn in enumerate(fns):
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            best[i] = min(best[i], elapsed)
            spent += elapsed
        runs += 1
    return best


def best_time(
    fn: Callable[[], object], *, repeat: int = 5, min_seconds: float = 0.0, max_repeat: int = 50
) -> float:
    """Fastest of ``repeat`` runs of ``fn`` (more runs, up to ``max_repeat``, until ``min_seconds`` spent).

    The garbage collector is paused during each run so a collection triggered by earlier garbage is
    not charged to whatever happens to be measured.
    """
    return best_times([fn], repeat=repeat, min_seconds=min_seconds, max_repeat=max_repeat)[0]


@dataclass(frozen=True)
class Target:
    """One acceptance target: ``value`` compared against ``threshold`` (>= or <=)."""

    name: str
    value: float
    threshold: float
    at_least: bool = True
    unit: str = ""

    @property
    def passed(self) -> bool:
        return self.value >= self.threshold if self.at_least else self.value <= self.threshold

    def line(self) -> str:
        op = ">=" if self.at_least else "<="
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}: {self.name}: {self.value:,.2f}{self.unit} (target {op} {self.threshold:,.2f}{self.unit})"


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Print a rich table; numbers are right-aligned as given (format them before)."""
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    console.print(table)


def report_targets(targets: Sequence[Target]) -> bool:
    """Print one PASS/FAIL line per target; True when all passed."""
    for target in targets:
        style = "green" if target.passed else "bold red"
        console.print(target.line(), style=style, highlight=False)
    return all(t.passed for t in targets)


def finish(targets: Sequence[Target], results: object, json_path: Path | None) -> int:
    """End of a benchmark script: PASS/FAIL lines, the figures as JSON when asked; exit status 0 = passed."""
    ok = report_targets(targets)
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


def make_segment(
    directory: Path, size: int, batch: Callable[[random.Random], bytes], seed: int = 7
) -> tuple[Path, int, int]:
    """A Kafka segment of about ``size`` bytes in ``directory``, with the offset and time indexes Kafka would
    write for it (the copy checks them) and a snapshot of plausible size.

    ``batch(rng)`` builds one magic-2 batch of 64 records at base offset 0; each is written at the next
    offset (the base offset is outside the batch CRC). Returns (path, last offset, size in bytes).
    """
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    path = directory / "00000000000000000000.log"
    offset = written = 0
    with path.open("wb") as f:
        while written < size:
            b = bytearray(batch(rng))
            struct.pack_into(">q", b, 0, offset)
            f.write(b)
            written += len(b)
            offset += 64
    offset_index, time_index = build_indexes(path, 0)
    (directory / "00000000000000000000.index").write_bytes(offset_index)
    (directory / "00000000000000000000.timeindex").write_bytes(time_index)
    (directory / "00000000000000000000.snapshot").write_bytes(os.urandom(10))
    return path, offset - 1, written


def metadata_for(path: Path, last: int, size: int) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
    """Fresh metadata (new topic and segment ids) and segment data for a segment made by make_segment."""
    tip = TopicIdPartition(uuid.uuid4(), "bench", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, uuid.uuid4()), 0, last, 0, 0, 0, size, {0: 0})
    d = path.parent
    data = LogSegmentData(
        path,
        d / f"{path.stem}.index",
        d / f"{path.stem}.timeindex",
        None,
        d / f"{path.stem}.snapshot",
        b"0\n1\n0 0\n",
    )
    return md, data
