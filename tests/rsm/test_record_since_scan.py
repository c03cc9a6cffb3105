"""The record's store-wide marker (`_scanned.json`, `rsm.store.locations`): who writes it, and the scans
it spares readers.

Without it, a reader lists the configured and overlay buckets whole to find segments an older release
wrote without recording their location, on every plan of a topic id not marked complete. Older stores
are simulated as the store tests do: the record's directory removed after the copies.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiering import PartitionLog

from rsm import RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.catalog import TopicCatalog
from rsm.cli.main import main
from rsm.config.settings import Backend, RsmConfig
from rsm.store import locations
from rsm.store.locations import bucket_holds_segment
from rsm.store.objects import ObjectStore
from rsm.stored.location_record import COMPLETE_MARKER, REGISTRY_DIR, SCANNED_MARKER


def _configs(tmp_path: Path) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(tmp_path / "store"), "bucket": "main"}


def _registry(tmp_path: Path) -> Path:
    return tmp_path / "store" / "main" / REGISTRY_DIR.rstrip("/")


def _tier(tmp_path: Path, topic: str, n: int, **log_config: str) -> TopicIdPartition:
    """A topic with one segment of `n` records, copied by a broker's RSM (a process of its own)."""
    rsm = RemoteStorageManager()
    rsm.configure(_configs(tmp_path))
    try:
        tip = TopicIdPartition(uuid.uuid4(), topic, 0)
        log = PartitionLog(rsm, tip, tmp_path / "w" / topic)
        log.log_config = log_config or None
        log.append(n)
        log.roll()
        return tip
    finally:
        rsm.close()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The buckets readers list whole (the real scan, observed)."""
    seen: list[str] = []
    real: Callable[..., Any] = locations.scan_bucket

    def observed(store: ObjectStore, bucket: str) -> Any:
        seen.append(bucket)
        return real(store, bucket)

    monkeypatch.setattr("rsm.catalog.catalog.scan_bucket", observed)
    return seen


def _next_offset(tmp_path: Path, topic: str) -> int:
    catalog = TopicCatalog(RsmConfig(_configs(tmp_path)))
    tid = catalog.live_topic_id(topic)
    return catalog.histories(topic, tid)[0].next_offset


def test_a_store_recorded_from_its_first_segment_is_never_scanned(tmp_path: Path, scans: list[str]) -> None:
    before = int(time.time() * 1000)
    _tier(tmp_path, "orders", 7)
    marker = json.loads((_registry(tmp_path) / SCANNED_MARKER).read_bytes())
    assert marker["by"] == "copy" and marker["buckets"] == ["main"] and marker["scanned_ms"] >= before
    _tier(tmp_path, "payments", 3, **{"unchecked.rsm.prefix": "p/"})
    assert _next_offset(tmp_path, "orders") == 7 and _next_offset(tmp_path, "payments") == 3
    assert scans == []
    # the marker is what spares them: without it, the same plans list the bucket
    (_registry(tmp_path) / SCANNED_MARKER).unlink()
    assert _next_offset(tmp_path, "payments") == 3
    assert scans == ["main"]


def test_a_copy_does_not_mark_a_store_that_holds_older_segments(tmp_path: Path, scans: list[str]) -> None:
    _tier(tmp_path, "old", 5, **{"unchecked.rsm.prefix": "x/"})
    shutil.rmtree(_registry(tmp_path))  # as tiered by a release before the record
    _tier(tmp_path, "new", 4)
    assert not (_registry(tmp_path) / SCANNED_MARKER).exists()
    # so readers still find what the record lacks
    assert TopicCatalog(RsmConfig(_configs(tmp_path))).topic_names() == ["new", "old"]
    assert _next_offset(tmp_path, "old") == 5
    assert "main" in scans


def test_a_store_wide_locate_vouches_for_topic_ids_first_written_after_it(
    tmp_path: Path, scans: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _tier(tmp_path, "old", 5, **{"unchecked.rsm.prefix": "x/"})
    shutil.rmtree(_registry(tmp_path))
    new = _tier(tmp_path, "new", 4)
    props = tmp_path / "server.properties"
    props.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in _configs(tmp_path).items()))
    # one topic's locate marks that topic only
    assert main(["store", "--config", str(props), "locate", "--topic", "old", "--record"]) == 0
    assert not (_registry(tmp_path) / SCANNED_MARKER).exists()
    began = int(time.time() * 1000)
    assert main(["store", "--config", str(props), "locate", "--record"]) == 0
    assert "nor for topics first tiered from now on" in capsys.readouterr().out
    marker = json.loads((_registry(tmp_path) / SCANNED_MARKER).read_bytes())
    assert marker["by"] == "locate" and marker["scanned_ms"] >= began
    scans.clear()
    _tier(tmp_path, "later", 6, **{"unchecked.rsm.prefix": "y/"})  # a topic id born after the scan
    assert _next_offset(tmp_path, "later") == 6 and _next_offset(tmp_path, "old") == 5
    assert scans == []
    # the names a pattern matches are still scanned for: a name the record lacks has no id to vouch for
    assert TopicCatalog(RsmConfig(_configs(tmp_path))).topic_names() == ["later", "new", "old"]
    assert scans == ["main"]
    scans.clear()
    # an id first written before the scan is trusted only through its own marker
    (_registry(tmp_path) / f"new-{uuid_to_base64(new.topic_id)}" / COMPLETE_MARKER).unlink()
    assert _next_offset(tmp_path, "new") == 4
    assert scans == ["main"]


def test_a_bucket_is_listed_only_until_its_first_segment(s3_server: Any) -> None:
    bucket = s3_server.make_bucket()
    store = ObjectStore(s3_server.s3fs(), Backend.S3, None)
    client = s3_server.s3fs()
    assert not bucket_holds_segment(store, bucket)
    for i in range(1001):  # a page and one key of other objects, sorted before the segment
        client.call_s3("put_object", Bucket=bucket, Key=f"a/{i:05d}", Body=b"")
    assert not bucket_holds_segment(store, bucket)
    tid, sid = "A" * 22, "B" * 22
    client.call_s3("put_object", Bucket=bucket, Key=f"t-{tid}/0/{0:020d}-{sid}.manifest", Body=b"{}")
    lists = store.stats.lists
    assert bucket_holds_segment(store, bucket)
    assert store.stats.lists - lists == 2  # two pages, then it stopped
    assert not bucket_holds_segment(store, "no-such-bucket")


def test_a_store_wide_locate_that_could_not_tell_a_directory_vouches_for_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topic directory whose manifest cannot be read (retention deleting it during the scan, a damaged
    object) names no topic, so it is not recorded: the marker would then hide it from later plans."""
    _tier(tmp_path, "old", 5)
    shutil.rmtree(_registry(tmp_path))
    tid, sid = "A" * 22, "B" * 22
    odd = tmp_path / "store" / "main" / f"odd-{tid}" / "0" / f"{0:020d}-{sid}.manifest"
    odd.parent.mkdir(parents=True)
    odd.write_bytes(b"not a manifest")
    props = tmp_path / "server.properties"
    props.write_text("".join(f"rsm.config.{k}={v}\n" for k, v in _configs(tmp_path).items()))
    assert main(["store", "--config", str(props), "locate", "--record"]) == 0
    captured = capsys.readouterr()
    assert "1 topic directory (first: file:main/odd-AAAAAAAAAAAAAAAAAAAAAA/)" in captured.err, captured.err
    assert "not vouched for" in captured.err and "nor for topics first tiered" not in captured.out
    assert not (_registry(tmp_path) / SCANNED_MARKER).exists()
    assert _next_offset(tmp_path, "old") == 5  # what it could tell is recorded
