"""Debris of copies killed with `kill -9` on GCS (fake-gcs-server) and Azure Blob (Azurite), as
tests/store/test_debris.py has it on the file store and S3: the same child process, killed with SIGKILL right
after a chosen store request, then Kafka's delete of the segment id whose copy never finished.

- Azure: a copy killed after staging blocks leaves an uncommitted blob; the delete discards it, and a
  neighbour's staged blocks are left alone. A retried copy of the same id discards the earlier attempt's.
- GCS: a copy killed mid resumable upload leaves no object at all (GCS shows nothing before the last chunk
  and cannot list the abandoned session, which it expires itself); the delete finds nothing to remove and
  leaves nothing.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import Segment, read_all
from test_debris import _delete_never_finished, _kill_mid_copy
from test_debris import segment as segment  # the module's segment fixture

from rsm import RemoteStorageManager
from rsm.api.metadata import uuid_to_base64
from rsm.config.settings import RsmConfig
from rsm.store import azure
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore

PART = str(2 << 20)  # the segment is ~6.5 MB: three parts, the last at commit
FIXTURES = {"gcs": "gcs_server", "azure": "azurite_server"}
# after the first part of the .log went up, after the second (the third goes up at commit)
KILLS = {"gcs": [("_put_chunk", 1), ("_put_chunk", 2)], "azure": [("stage_block", 1), ("stage_block", 2)]}


def _configs(cloud: Any, bucket: str) -> dict[str, str]:
    return cloud.rsm_configs(
        **{
            "bucket": bucket,
            "storage.gcs.upload.chunk.size": PART,
            "storage.azure.block.size": PART,
            "chunk.size": str(1 << 20),
            "compression.enabled": "false",
        }
    )


def _traces(store: ObjectStore, bucket: str, seg: Segment) -> list[str]:
    """Whatever of this segment the store shows: objects, and unfinished writes it can list."""
    sid = uuid_to_base64(seg.metadata.remote_log_segment_id.id)
    objects = [k for k in store.list(bucket, "", include_temporary=True) if sid in k]
    return objects + [f"upload {w.key}" for w in store.uploads_under(bucket, "") if sid in w.key]


@pytest.mark.parametrize(("name", "op", "n"), [(c, op, n) for c, kills in KILLS.items() for op, n in kills])
def test_kill_9_mid_copy_then_delete_leaves_nothing(
    tmp_path: Path,
    segment: Segment,
    request: pytest.FixtureRequest,
    name: str,
    op: str,
    n: int,
) -> None:
    cloud = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    configs = _configs(cloud, bucket)
    store = ObjectStore.from_config(RsmConfig(configs))
    _kill_mid_copy(tmp_path, configs, segment, op, n)
    left = _traces(store, bucket, segment)
    keys = SegmentKeys.of(Location(bucket, ""), segment.metadata)
    assert keys.log not in left, "a partial object is visible"
    if name == "azure":
        assert left == [f"upload {keys.log}"], left
        # a neighbour's staged blocks: another segment id of the same partition
        other = dataclasses.replace(
            segment.metadata,
            remote_log_segment_id=dataclasses.replace(
                segment.metadata.remote_log_segment_id, id=uuid.uuid4()
            ),
        )
        neighbour = SegmentKeys.of(Location(bucket, ""), other).log
        writer = store.open_writer(bucket, neighbour)
        writer.write(b"x" * (3 << 20))  # one block staged, never committed
    else:
        assert left == [], left  # nothing shows of an unfinished resumable upload
    _delete_never_finished(configs, segment)
    assert _traces(store, bucket, segment) == []
    if name == "azure":
        assert [w.key for w in store.uploads_under(bucket, "")] == [neighbour], "a neighbour was touched"
        assert [str(w) for w in store.uploads_under(bucket, "")] == [
            f"uncommitted blocks of az://{bucket}/{neighbour}"
        ]
    _delete_never_finished(configs, segment)  # idempotent


@pytest.mark.parametrize("name", ["gcs", "azure"])
def test_kill_9_then_a_retried_copy_leaves_only_the_segment(
    tmp_path: Path,
    segment: Segment,
    request: pytest.FixtureRequest,
    name: str,
) -> None:
    cloud = request.getfixturevalue(FIXTURES[name])
    bucket = cloud.make_bucket()
    configs = _configs(cloud, bucket)
    store = ObjectStore.from_config(RsmConfig(configs))
    op, n = KILLS[name][0]
    _kill_mid_copy(tmp_path, configs, segment, op, n)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(segment.metadata, segment.data)  # the same segment id again
        keys = SegmentKeys.of(Location(bucket, ""), segment.metadata)
        assert _traces(store, bucket, segment) == sorted(keys.all())
        md = dataclasses.replace(segment.metadata, custom_metadata=custom)
        assert read_all(rsm.fetch_log_segment(md, 0)) == segment.data.log_segment.read_bytes()
        rsm.delete_log_segment_data(md)
        assert _traces(store, bucket, segment) == []
    finally:
        rsm.close()


def test_an_aborted_azure_write_discards_its_blocks(azurite_server: Any) -> None:
    bucket = azurite_server.make_bucket()
    store = ObjectStore.from_config(RsmConfig(_configs(azurite_server, bucket)))
    writer = store.open_writer(bucket, "t/0/a.log")
    writer.write(b"y" * (11 << 20))
    assert [w.upload_id for w in store.uploads_under(bucket, "t/")] == [azure.UNCOMMITTED]
    writer.abort()
    assert store.uploads_under(bucket, "t/") == [] and store.list(bucket, "t/") == []


def test_rsm_migrate_gc_finds_and_discards_a_killed_copys_blocks(
    tmp_path: Path, segment: Segment, azurite_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """What Kafka never deletes (a segment id it forgot): `rsm migrate gc` finds the staged blocks by their
    key's shape and, with --apply, discards them."""
    import json

    from migrate_helpers import write_properties

    from rsm.cli.main import main

    bucket = azurite_server.make_bucket()
    configs = _configs(azurite_server, bucket)
    _kill_mid_copy(tmp_path, configs, segment, "stage_block", 1)
    store = ObjectStore.from_config(RsmConfig(configs))
    keys = SegmentKeys.of(Location(bucket, ""), segment.metadata)
    assert _traces(store, bucket, segment) == [f"upload {keys.log}"]
    props = write_properties(tmp_path / "server.properties", configs)
    assert main(["migrate", "--config", str(props), "gc", "--grace", "0", "--json"]) == 3  # orphans found
    found = json.loads(capsys.readouterr().out)
    assert keys.log in json.dumps(found) and "multipart upload" in json.dumps(found), found
    assert _traces(store, bucket, segment) == [f"upload {keys.log}"]  # a dry run
    assert main(["migrate", "--config", str(props), "gc", "--grace", "0", "--apply", "--json"]) == 0
    capsys.readouterr()
    assert _traces(store, bucket, segment) == []
