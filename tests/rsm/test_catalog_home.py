"""Moving the default bucket never downgrades a topic and never hides its history.

An operator moves `bucket` from A to B. The store's documents (the topic's overlay: encryption on, its own key
k2) stay at the catalog home. Three ways it can go, on the file store, moto S3 and Azurite:
- README's procedure (`catalog.bucket` keeps naming A): the next copies still follow the overlay (encrypted
  under k2, no plaintext in any stored object), and readers given the new configuration (the catalog the
  Spark reader plans from, `rsm migrate verify`) see every segment, old and new, with no broker fetch;
- only `bucket` changed: the copy is refused with one line naming the procedure, nothing written anywhere;
- the home moved with `rsm migrate catalog`: the same as the procedure, and a configuration still naming
  the old home is refused, naming the setting.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.waiting import wait_until
from kafka_segments import Segment, make_segment, read_all, write_keyring
from test_rsm_topics import Store, _assert_no_plaintext

from rsm import LogConfig, RemoteStorageManager, TopicIdPartition
from rsm.api.errors import ConfigException
from rsm.catalog import TopicCatalog
from rsm.cli.main import main
from rsm.config.settings import RsmConfig
from rsm.store.home import CatalogMoved
from rsm.store.overlays import TopicOverlayStore
from rsm.stored.home import MOVED_POINTER, MOVING_POINTER
from rsm.stored.manifest import Manifest

LC = LogConfig({"retention.ms": "-1", "remote.storage.enable": "true"})
OVERLAY = {"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k2"}


@pytest.fixture(params=["file", "s3", "azure"])
def home_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    fixtures = {"s3": "s3_server", "azure": "azurite_server"}
    s3 = request.getfixturevalue(fixtures[request.param]) if request.param in fixtures else None
    yield Store(request.param, tmp_path, s3)


def with_past(seg: Segment, log_start: int) -> Segment:
    """The segment as Kafka hands it over when the log starts at `log_start`, before the segment: the
    leader-epoch checkpoint then begins there (earlier offsets were tiered already)."""
    data = dataclasses.replace(seg.data, leader_epoch_index=f"0\n1\n0 {log_start}\n".encode())
    return Segment(seg.metadata, data, seg.dir)


def base_configs(store: Store, tmp_path: Path) -> dict[str, str]:
    keyring = write_keyring(tmp_path / "keyring.json")
    keyring.chmod(0o600)
    return {
        **store.configs,
        "encryption.keyring.path": str(keyring),
        "encryption.key.id": "k1",
        "topic.overlay.cache.ms": "0",
    }


def copy(configs: dict[str, str], seg: Segment) -> Segment:
    """Tier the segment through an RSM so configured; returns it with the custom metadata Kafka would keep."""
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data, LC)
    finally:
        rsm.close()
    return Segment(dataclasses.replace(seg.metadata, custom_metadata=custom), seg.data, seg.dir)


def everything(store: Store) -> dict[str, bytes]:
    return {f"{b}/{k}": v for b in store.buckets.values() for k, v in store.keys(b, records=True).items()}


def properties(path: Path, configs: dict[str, str]) -> Path:
    path.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in configs.items()))
    return path


def verify(props: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    rc = main(["migrate", "--config", str(props), "verify", "--topic", "orders", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def tiered_topic(store: Store, tmp_path: Path) -> tuple[dict[str, str], TopicIdPartition, Segment, Segment]:
    """A topic whose overlay (at home A) encrypts it under k2, one segment tiered into A, the next one ready."""
    configs = {**base_configs(store, tmp_path), "bucket": store.buckets["a"]}
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    TopicOverlayStore(rsm.store, store.buckets["a"], "").write(tip.topic, tip.topic_id, OVERLAY)
    rsm.close()
    first = copy(configs, make_segment(tmp_path / "s1", tip, base_offset=0, batches=20, value_size=300))
    end = first.metadata.end_offset
    second = with_past(make_segment(tmp_path / "s2", tip, base_offset=end + 1, batches=20, value_size=300), 0)
    return configs, tip, first, second


def test_moving_only_the_bucket_refuses_the_copy_and_writes_nothing(
    home_store: Store, tmp_path: Path
) -> None:
    configs, _, _, second = tiered_topic(home_store, tmp_path)
    before = everything(home_store)
    moved = {**configs, "bucket": home_store.buckets["b"]}  # nothing else changed: the home moved with it
    with pytest.raises(ConfigException) as refused:
        copy(moved, second)
    line = str(refused.value)
    assert "\n" not in line and "orders" in line and "catalog.bucket" in line
    assert "Moving the default bucket" in line
    assert everything(home_store) == before  # no plaintext, no record, nothing


def test_readme_procedure_keeps_the_overlay_and_every_segment_readable(
    home_store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs, tip, first, second = tiered_topic(home_store, tmp_path)
    a, b = home_store.buckets["a"], home_store.buckets["b"]
    moved = {**configs, "bucket": b, "catalog.bucket": a}  # README: the catalog stays where it was
    second = copy(moved, second)
    objects_b = home_store.keys(b)
    assert len(objects_b) == 3  # the new segment, in the new default bucket
    manifest = Manifest.from_bytes(next(v for k, v in objects_b.items() if k.endswith(".manifest")))
    assert manifest.encryption is not None and manifest.encryption.key_id == "k2"  # the overlay still applies
    stored = everything(home_store)
    _assert_no_plaintext(first, stored)
    _assert_no_plaintext(second, stored)

    # readers given the new configuration, no broker: every segment, old (in A) and new (in B)
    catalog = TopicCatalog(RsmConfig(moved))
    (history,) = catalog.histories(tip.topic, tip.topic_id).values()
    assert [s.first_offset for s in history.slices] == [0, second.metadata.start_offset]
    assert history.next_offset == second.metadata.end_offset + 1 and not history.gaps
    report = verify(properties(tmp_path / "new.properties", moved), capsys)
    assert report["ok"] is True and report["segments"] == 2
    # and a broker fetches both through its custom metadata as before
    rsm = RemoteStorageManager()
    rsm.configure(moved)
    try:
        for seg in (first, second):
            fetched = read_all(rsm.fetch_log_segment(seg.metadata, 0, None, LC))
            assert fetched == seg.data.log_segment.read_bytes()
    finally:
        rsm.close()


def test_migrate_catalog_moves_the_home_and_the_old_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store("file", tmp_path, None)
    configs, tip, first, second = tiered_topic(store, tmp_path)
    a, b = store.buckets["a"], store.buckets["b"]
    (store.root / b).mkdir(parents=True, exist_ok=True)
    old = properties(tmp_path / "old.properties", configs)
    capsys.readouterr()
    assert main(["migrate", "--config", str(old), "catalog", "--to-bucket", b, "--dry-run"]) == 0
    assert "would move" in capsys.readouterr().out and store.keys(b, records=True) == {}
    assert main(["migrate", "--config", str(old), "catalog", "--to-bucket", b]) == 0
    out = capsys.readouterr().out
    assert "catalog.bucket=" + b in out
    docs_a = {k: v for k, v in store.keys(a, records=True).items() if k.startswith("_rsm/")}
    docs_b = store.keys(b, records=True)
    assert MOVED_POINTER in docs_a and MOVING_POINTER not in docs_b
    assert {k: v for k, v in docs_a.items() if k != MOVED_POINTER} == docs_b  # every document, byte for byte

    # a configuration that still names the old home: refused, naming the setting, nothing written
    before = everything(store)
    with pytest.raises(CatalogMoved, match=f"catalog.bucket={b}"):
        copy(configs, second)
    with pytest.raises(CatalogMoved, match=f"catalog.bucket={b}"):
        TopicCatalog(RsmConfig(configs))
    assert everything(store) == before
    # the new default, home and data in B: the overlay is found there, the topic's past is known
    moved = {**configs, "bucket": b}
    copy(moved, second)
    manifest = next(Manifest.from_bytes(v) for k, v in store.keys(b).items() if k.endswith(".manifest"))
    assert manifest.encryption is not None and manifest.encryption.key_id == "k2"
    report = verify(properties(tmp_path / "new.properties", moved), capsys)
    assert report["ok"] is True and report["segments"] == 2
    # a second run has nothing to do
    assert main(["migrate", "--config", str(old), "catalog", "--to-bucket", b]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_a_catalog_move_killed_midway_is_refused_by_both_sides_and_resumes(tmp_path: Path) -> None:
    store = Store("file", tmp_path, None)
    configs, tip, _, second = tiered_topic(store, tmp_path)
    a, b = store.buckets["a"], store.buckets["b"]
    (store.root / b).mkdir(parents=True, exist_ok=True)
    slow = {**configs, "topic.overlay.cache.ms": "30000"}  # the move waits 31 s for RSMs to notice it
    old = properties(tmp_path / "old.properties", slow)
    command = [
        sys.executable,
        "-m",
        "rsm.cli.main",
        "migrate",
        "--config",
        str(old),
        "catalog",
        "--to-bucket",
        b,
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until("the moved pointer", lambda: (store.root / a / MOVED_POINTER).exists(), 60, 0.05)
        os.kill(child.pid, signal.SIGKILL)  # between the pointer and the end of the move
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert (store.root / b / MOVING_POINTER).exists()
    with pytest.raises(CatalogMoved, match="has not finished"):
        copy({**configs, "bucket": b}, second)
    with pytest.raises(CatalogMoved, match=f"catalog.bucket={b}"):
        copy(configs, second)
    # the same command again (quicker now) finishes it
    fast = properties(tmp_path / "fast.properties", configs)
    started = time.monotonic()
    done = subprocess.run(
        [*command[:5], str(fast), *command[6:]], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    assert not (store.root / b / MOVING_POINTER).exists()
    copy({**configs, "bucket": b}, second)


@pytest.mark.spark
def test_spark_reads_every_segment_with_the_new_configuration(tiered_spark, tmp_path: Path) -> None:  # noqa: ANN001
    store = Store("file", tmp_path, None)
    configs, _, _, second = tiered_topic(store, tmp_path)
    moved = {**configs, "bucket": store.buckets["b"], "catalog.bucket": store.buckets["a"]}
    copy(moved, second)
    props = properties(tmp_path / "new.properties", moved)
    df = (
        tiered_spark.read.format("kafka-tiered")
        .option("rsm.properties", str(props))
        .option("subscribe", "orders")
    )
    offsets = sorted(r.offset for r in df.load().select("offset").collect())
    assert offsets == list(range(second.metadata.end_offset + 1))  # both segments, old (A) and new (B)
