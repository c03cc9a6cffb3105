"""`rsm migrate` killed with SIGKILL at random points of its work, then run again: nothing lost or left over.

The CLI runs in a subprocess with `RSM_MIGRATE_KILL_AT=N`: it sends itself SIGKILL at its N-th crash point
(`rsm.migrate.journal.crash_point`, between every two store writes of every step: copies, forwards,
manifests, deletes, journal records). A traced run counts the points; then, for a random sample of them
(at least 10, seeded: the seed is printed), a fresh copy of the store is migrated and killed there. While
killed, every segment must still be fetched through the metadata Kafka holds and the catalog must read every
offset once; after running the same command again, the migration must be complete, with each segment
committed exactly once at its destination, forwards only where Kafka's metadata points, no orphan, no
staging copy, and a third run must find nothing to do.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from migrate_helpers import Tiered, run_cli, tier_topic, topic_keys, write_properties

from rsm.migrate import gc as gc_
from rsm.store.objects import ObjectStore

SAMPLE = 12
SEED = int(os.environ.get("RSM_TEST_SEED", random.randrange(1 << 30)))


def _clone(tiered: Tiered, root: Path) -> Tiered:
    shutil.copytree(tiered.configs["storage.file.root"], root)
    configs = {**tiered.configs, "storage.file.root": str(root)}
    props = write_properties(root.parent / f"{root.name}.properties", configs)
    return replace(tiered, configs=configs, props=props)


def _points(tiered: Tiered, tmp_path: Path, command: list[str]) -> list[int]:
    run = _clone(tiered, tmp_path / "traced")
    trace = tmp_path / "trace.txt"
    r = run_cli(["migrate", "--config", str(run.props), *command],
                env={"RSM_MIGRATE_KILL_AT": "1000000000", "RSM_MIGRATE_KILL_TRACE": str(trace)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    labels = trace.read_text().splitlines()
    rng = random.Random(SEED)
    points = sorted(rng.sample(range(1, len(labels) + 1), min(SAMPLE, len(labels))))
    print(f"seed {SEED}: {len(labels)} crash points, killing at {points}: "
          + "; ".join(labels[p - 1] for p in points))  # fmt: skip
    return points


def _files(tiered: Tiered) -> list[str]:
    store = ObjectStore.from_config(tiered.catalog().config)
    return topic_keys(store.list("main", include_temporary=True), tiered.topic)


def _killed_then_resumed(tiered: Tiered, tmp_path: Path, command: list[str], n: int) -> Tiered:
    run = _clone(tiered, tmp_path / f"kill-{n}")
    r = run_cli(["migrate", "--config", str(run.props), *command], env={"RSM_MIGRATE_KILL_AT": str(n)})
    assert r.returncode == -signal.SIGKILL, (n, r.returncode, r.stderr[-2000:])
    # killed: readable through Kafka's metadata, every offset once
    run.check_fetch()
    assert run.history_offsets() == run.expected_offsets(), n
    # resumed
    r = run_cli(["migrate", "--config", str(run.props), *command, "--json"])
    assert r.returncode == 0, (n, r.stderr[-2000:])
    doc = json.loads(r.stdout)
    assert doc["resumed"] and not [x for x in doc["results"] if x["status"] == "failed"], doc
    run.check_fetch()
    assert run.history_offsets() == run.expected_offsets(), n
    store = ObjectStore.from_config(run.catalog().config)
    assert gc_.scan(store, [("main", "")]) == [], n
    again = json.loads(run_cli(["migrate", "--config", str(run.props), *command, "--json"]).stdout)
    assert again["summary"]["items"] == 0, (n, again)
    return run


def test_move_killed_at_random_points_resumes(tmp_path: Path) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=3, segments=2)
    command = ["move", "--topic", "orders", "--to-prefix", "moved/", "--parallel", "1"]
    for n in _points(tiered, tmp_path, command):
        run = _killed_then_resumed(tiered, tmp_path, command, n)
        files = _files(run)
        manifests = [k for k in files if k.endswith(".manifest")]
        assert len(manifests) == 6 and all(k.startswith("moved/") for k in manifests), (n, files)
        forwards = [k for k in files if k.endswith(".forward")]
        assert len(forwards) == 6 and not [k for k in forwards if k.startswith("moved/")], (n, files)
        assert len(files) == 6 * 3 + 6, (n, files)


def test_reencryption_killed_at_random_points_resumes(tmp_path: Path) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=1)
    command = ["rekey", "--topic", "orders", "--reencrypt", "--key-id", "k2", "--parallel", "1"]
    for n in _points(tiered, tmp_path, command):
        run = _killed_then_resumed(tiered, tmp_path, command, n)
        files = _files(run)
        assert len(files) == 2 * 3 and not [
            k for k in files if "_rsm-staging/" in k or k.endswith(".forward")
        ], files
        for seg in run.catalog().segments(run.topic, run.topic_id):
            assert seg.manifest.encryption.key_id == "k2" and seg.location.prefix == ""


@pytest.mark.parametrize(
    "command", [["verify", "--topic", "orders", "--deep"], ["rekey", "--topic", "orders", "--key-id", "k2"]]
)
def test_manifest_only_jobs_killed_resume(tmp_path: Path, command: list[str]) -> None:
    configs = {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}
    tiered = tier_topic(tmp_path / "t", configs, partitions=2, segments=2)
    run = _clone(tiered, tmp_path / "kill")
    r = run_cli(
        ["migrate", "--config", str(run.props), *command, "--parallel", "1"], env={"RSM_MIGRATE_KILL_AT": "3"}
    )
    assert r.returncode == -signal.SIGKILL
    r = run_cli(["migrate", "--config", str(run.props), *command, "--json"])
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc.get("ok", True), doc
    run.check_fetch()
