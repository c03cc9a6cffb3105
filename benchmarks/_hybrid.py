"""The hybrid row of benchmarks/spark_read.py: the whole topic, 90% tiered and 10% on the broker.

After the tiered-only rounds, the topic gets ``records / 9`` more records that stay on the broker's disk
(segment.bytes and segment.ms are raised first, so they sit in the active segment, which Kafka never
tiers): 90% of the topic is in the store only, 10% on the broker only. Then the same full read, earliest
to latest, ``sum(crc32(value))``:

* ``kafka-tiered`` with ``kafka.bootstrap.servers``: the history from the store, the tail from the broker
  through the brokers' fetch layer in the task (raw batches, the store's columnar decoder);
* ``kafka``: Spark's own Kafka source, all of it through the broker (the history from its remote tier).

Besides the time, the broker's CPU seconds during each read: utime + stime from /proc of the broker's JVM
and of its bridge process (the JVM's descendants: the plugin starts the bridge), whose remote reads are
what Spark's Kafka source costs the broker. Targets: >= 1.8x Spark's Kafka source, and the broker's CPU
during our read at most a fifth of its CPU during Spark's Kafka source's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import Target, console

CLK_TCK = os.sysconf("SC_CLK_TCK")
BIG_SEGMENT = str(1 << 30)
WEEK_MS = str(7 * 24 * 3600 * 1000)


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, CPU seconds: utime + stime) of a process, from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_tree(root: int) -> list[int]:
    """`root` and every live descendant (the broker's JVM and the bridge it started)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = _stat(int(entry))[0]
            except (OSError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sorted(tree)


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += _stat(pid)[1]
        except (OSError, ValueError):
            continue
    return total


def add_local_tail(
    broker: Any,  # noqa: ANN401
    topic: str,
    topic_configs: dict[str, str],
    produce: Callable[[int], str],
    records: int,
) -> None:
    """`records` more records that stay on the broker's disk: the active segment no longer rolls."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = broker.admin_client()
    keep = {
        **topic_configs,
        "segment.bytes": BIG_SEGMENT,
        "segment.ms": WEEK_MS,
        "local.retention.ms": "1000",
    }
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=keep)])
    admin.close()
    time.sleep(2)
    console.print(f"  the local tail: {produce(records)}", highlight=False)


def run_hybrid_row(
    spark: Any,  # noqa: ANN401
    broker: Any,  # noqa: ANN401
    topic: str,
    store_opts: dict[str, str],
    rounds: int,
    timed: Callable[[Callable[[], Any]], tuple[float, Any]],
    columnar_conf: str | None = None,
) -> tuple[dict[str, Any], list[Target]]:
    """Interleaved rounds (one warm-up) of the readers over the whole topic; figures and targets.

    With the columnar scan's jar in the session (`columnar_conf`), `kafka-tiered + bootstrap` is read on
    both Spark paths; the targets are the columnar one's (what `format("kafka-tiered")` is with the jar),
    the Python path's figures stay in the table."""
    query = "sum(crc32(value))"

    def hybrid(columnar: bool) -> Any:  # noqa: ANN401 - a DataFrame
        if columnar_conf is not None:
            spark.conf.set(columnar_conf, str(columnar).lower())  # read when the DataFrame is loaded
        return (
            spark.read.format("kafka-tiered")
            .options(**store_opts, subscribe=topic, startingOffsets="earliest")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .load()
        )

    readers = {"kafka-tiered + bootstrap": hybrid(columnar_conf is not None)}
    if columnar_conf is not None:
        readers["kafka-tiered (Python) + bootstrap"] = hybrid(False)
    readers |= {
        "kafka (Spark 4.2.0)": spark.read.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .options(subscribe=topic, startingOffsets="earliest")
        .load(),
    }
    pids = process_tree(broker.pid)
    times: dict[str, list[float]] = {r: [] for r in readers}
    cpu: dict[str, list[float]] = {r: [] for r in readers}
    answers: dict[str, Any] = {}
    for round_ in range(rounds + 1):
        for name, df in readers.items():
            before = cpu_seconds(pids)
            elapsed, answer = timed(
                lambda df=df: tuple(df.selectExpr("count(*)", f"{query} AS s").collect()[0])
            )
            used = cpu_seconds(pids) - before
            answers[name] = answer
            if round_:
                times[name].append(elapsed)
                cpu[name].append(used)
        console.print(
            f"  hybrid round {round_ or 'warm-up'}: "
            + ", ".join(f"{r} {v[-1]:.2f} s (broker CPU {cpu[r][-1]:.2f} s)" for r, v in times.items() if v),
            highlight=False,
        )
    theirs = answers["kafka (Spark 4.2.0)"]
    for name, mine in answers.items():
        if mine != theirs:
            raise RuntimeError(f"hybrid: {name} gave {mine}, Spark's Kafka source {theirs}")
    mine = answers["kafka-tiered + bootstrap"]
    rows = int(mine[0])
    best = {r: min(v) for r, v in times.items()}
    mean_cpu = {r: sum(v) / len(v) for r, v in cpu.items()}
    speedup = best["kafka (Spark 4.2.0)"] / best["kafka-tiered + bootstrap"]
    cpu_ratio = mean_cpu["kafka-tiered + bootstrap"] / max(mean_cpu["kafka (Spark 4.2.0)"], 1e-9)
    figures = {
        "rows": rows,
        "seconds_best": best,
        "rows_per_s": {r: rows / t for r, t in best.items()},
        "broker_cpu_s_per_read": mean_cpu,
        "speedup_vs_kafka": speedup,
        "broker_cpu_ratio": cpu_ratio,
        "broker_pids": pids,
    }
    targets = [
        Target(f"hybrid: kafka-tiered + bootstrap / Spark's Kafka source, {query}", speedup, 1.8, unit="x"),
        Target(
            "hybrid: broker CPU during kafka-tiered + bootstrap / during Spark's Kafka source",
            cpu_ratio,
            0.2,
            unit="x",
            at_least=False,
        ),
    ]
    return figures, targets
