"""Shared by the `rsm migrate` tests: an encrypted topic tiered through the real RSM, and what to check.

`tier_topic` plays brokers tiering a topic (several partitions, segments of several codecs) through
`RemoteStorageManager.copy_log_segment_data`; it keeps each segment's metadata as Kafka would (with the
custom metadata the copy returned, naming the location at the time) and the original `.log` bytes, so a
test can fetch through old metadata after a migration and compare with what the broker had.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_segments import write_keyring
from tiering import PartitionLog

from rsm import RemoteLogSegmentMetadata, RemoteStorageManager, TopicIdPartition
from rsm.catalog import TopicCatalog
from rsm.config.settings import RsmConfig

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Tiered:
    configs: dict[str, str]
    props: Path
    topic: str
    topic_id: uuid.UUID
    logs: list[PartitionLog]
    originals: list[tuple[RemoteLogSegmentMetadata, bytes]] = field(default_factory=list)

    def rsm(self, **extra: str) -> RemoteStorageManager:
        rsm = RemoteStorageManager()
        rsm.configure({**self.configs, **extra})
        return rsm

    def catalog(self) -> TopicCatalog:
        return TopicCatalog(RsmConfig(self.configs))

    def check_fetch(self, rsm: RemoteStorageManager | None = None) -> None:
        """Every segment, fetched through the metadata Kafka holds, gives the bytes the broker had."""
        own = rsm is None
        rsm = rsm or self.rsm()
        try:
            for md, original in self.originals:
                with rsm.fetch_log_segment(md, 0) as stream:
                    got = stream.read()
                assert got == original, (
                    f"{md.remote_log_segment_id}: {len(got)} bytes, expected {len(original)}"
                )
        finally:
            if own:
                rsm.close()

    def history_offsets(self) -> dict[int, list[tuple[int, int]]]:
        """Per partition, the offset ranges the catalog's history reads (each offset once)."""
        catalog = self.catalog()
        out = {}
        for p, h in catalog.histories(self.topic, self.topic_id).items():
            out[p] = [(s.first_offset, s.last_offset) for s in h.slices]
            assert not h.gaps, (p, h.gaps)
        return out

    def expected_offsets(self) -> dict[int, list[tuple[int, int]]]:
        out: dict[int, list[tuple[int, int]]] = {}
        for md, _ in self.originals:
            out.setdefault(md.remote_log_segment_id.topic_id_partition.partition, []).append(
                (md.start_offset, md.end_offset)
            )
        return {p: sorted(v) for p, v in sorted(out.items())}


def write_properties(path: Path, configs: dict[str, str]) -> Path:
    lines = ["broker.id=1"] + [f"rsm.config.{k}={v}" for k, v in configs.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def tier_topic(
    base: Path,
    configs: dict[str, str],
    *,
    topic: str = "orders",
    partitions: int = 3,
    segments: int = 3,
    records: int = 300,
    encrypted: bool = True,
    keyring: Path | None = None,
) -> Tiered:
    base.mkdir(parents=True, exist_ok=True)
    configs = dict(configs)
    if encrypted or keyring is not None:
        keyring = keyring or write_keyring(base / "keyring.json", ("k1", "k2", "k3"))
        configs["encryption.keyring.path"] = str(keyring)
    if encrypted:
        configs.update({"encryption.enabled": "true", "encryption.key.id": "k1"})
    configs.setdefault("chunk.size", "8192")
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    tid = uuid.uuid4()
    tiered = Tiered(configs, write_properties(base / "server.properties", configs), topic, tid, [])
    codecs = [0, 1, 2, 3, 4]
    for p in range(partitions):
        log = PartitionLog(rsm, TopicIdPartition(tid, topic, p), base / f"w{p}")
        for s in range(segments):
            if s == segments - 1 and p == 0:
                log.new_epoch(1)
            log.append(records, codec=codecs[(p + s) % len(codecs)], incompressible=s % 2 == 1)
            md, data = log.roll()
            tiered.originals.append((log.copied[-1], Path(data.log_segment).read_bytes()))
            assert md.start_offset == log.copied[-1].start_offset
        tiered.logs.append(log)
    rsm.close()
    return tiered


def run_cli(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`rsm` in a subprocess of this interpreter, with this checkout's packages first."""
    full = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "rsm.cli.main", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
    )


def objects(configs: dict[str, str], bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object under a prefix (temporary files too), with its bytes."""
    from rsm.store.objects import ObjectStore

    store = ObjectStore.from_config(RsmConfig(configs))
    return {k: store.get(bucket, k) for k in store.list(bucket, prefix, include_temporary=True)}


def topic_keys(keys: Any, topic: str) -> list[str]:
    return sorted(k for k in keys if f"/{topic}-" in f"/{k}" and "_rsm/" not in k)
