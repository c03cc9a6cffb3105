"""Debris of interrupted copies: what `kill -9` or a lost answer leaves is removed.

A copy killed mid-way runs no cleanup: on the file store its temporary files (`.<stem>.log.tmp-<hex>`) stay,
on S3 its multipart upload stays incomplete. Kafka later deletes the segment id whose copy never finished,
so `delete_log_segment_data` must remove them; a retried copy of the same id removes an earlier attempt's;
a copy that fails removes every object it may have written, even one whose PUT "failed" after S3 took it;
and an upload botocore started twice (a retried CreateMultipartUpload) is aborted when the copy ends.

The kills are real: a child process (tests/debris_child.py) copies a 12 MB segment into a real store (a
directory, or moto S3 over HTTP), stops right after a chosen store operation, and is killed with SIGKILL.
The lost answers are fault injection, not mocks: a wrapper around the real filesystem lets the real call
run to completion against the real store, then raises as a dropped connection would.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import Segment, make_segment, read_all

from rsm import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from rsm.api.metadata import uuid_to_base64
from rsm.config.settings import Backend, RsmConfig
from rsm.store.debris import segment_leftovers
from rsm.store.layout import Location, SegmentKeys
from rsm.store.objects import ObjectStore, temp_name

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent
CHILD = TESTS_DIR / "debris_child.py"
PART = 5 << 20
BUCKET = "tiers"  # the file store's bucket (a directory under the root)


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> Segment:
    """A 12 MB incompressible segment: 12 chunks of 1 MiB, three 5 MiB parts on S3."""
    tip = TopicIdPartition(uuid.uuid4(), "debris", 2)
    return make_segment(
        tmp_path_factory.mktemp("seg"),
        tip,
        batches=600,
        records_per_batch=20,
        value_size=1000,
        compressible=False,
    )


def _file_configs(root: Path) -> dict[str, str]:
    return {
        "storage.backend": "file",
        "storage.file.root": str(root),
        "bucket": BUCKET,
        "chunk.size": str(1 << 20),
        "compression.enabled": "false",
    }


def _s3_configs(s3_server: Any, bucket: str) -> dict[str, str]:
    return s3_server.rsm_configs(
        **{
            "bucket": bucket,
            "storage.s3.multipart.part.size": str(PART),
            "chunk.size": str(1 << 20),
            "compression.enabled": "false",
        }
    )


class Store:
    """Everything one test's store holds, seen from outside the RSM (rglob with hidden files, boto3)."""

    def __init__(self, root: Path | None = None, s3_server: Any = None, bucket: str = BUCKET) -> None:
        self.root, self.bucket = root, bucket
        self.client = s3_server.boto3_client() if s3_server is not None else None

    def files(self) -> list[str]:
        """Every object key, temporary files included."""
        if self.client is None:
            assert self.root is not None
            base = self.root / self.bucket
            return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def uploads(self) -> list[str]:
        """Keys of incomplete multipart uploads (none on the file store)."""
        if self.client is None:
            return []
        return sorted(
            u["Key"] for u in self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        )

    def traces(self, seg: Segment) -> list[str]:
        """Whatever of this segment is in the store: objects, temporary files, incomplete uploads."""
        sid = uuid_to_base64(seg.metadata.remote_log_segment_id.id)
        return [f for f in self.files() if sid in f] + [f"upload {u}" for u in self.uploads() if sid in u]


def _kill_mid_copy(tmp_path: Path, configs: dict[str, str], seg: Segment, op: str, n: int) -> None:
    """Copy `seg` in a child process, SIGKILL it right after its `n`-th `op` store operation."""
    job = tmp_path / f"job-{op}-{n}.pickle"
    job.write_bytes(pickle.dumps((configs, seg.metadata, seg.data, (op, n))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS_DIR)]))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], 120)
        line = child.stdout.readline() if ready else ""  # type: ignore[union-attr]
        assert line.startswith(f"paused {op} {n}"), f"child did not pause: {line!r} {child.poll()}"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err[-2000:]


def _delete_never_finished(configs: dict[str, str], seg: Segment) -> None:
    """What Kafka does with a segment whose copy never finished: delete it (no custom metadata yet)."""
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        rsm.delete_log_segment_data(seg.metadata)
    finally:
        rsm.close()


def _neighbour(store: ObjectStore, configs: dict[str, str], seg: Segment) -> SegmentKeys:
    """Another segment's stem in the same partition, with an unfinished write of its own."""
    other = dataclasses.replace(
        seg.metadata,
        remote_log_segment_id=dataclasses.replace(seg.metadata.remote_log_segment_id, id=uuid.uuid4()),
    )
    keys = SegmentKeys.of(Location(configs["bucket"], ""), other)
    if store.backend is Backend.FILE:
        path = Path(store.path(keys.bucket, keys.log))
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / temp_name(path.name)).write_bytes(b"someone else's")
        # a look-alike that is no temporary file of ours: never touched either
        (path.parent / f".{path.name}.tmp-notours").write_bytes(b"not ours")
    else:
        store.fs.call_s3("create_multipart_upload", Bucket=keys.bucket, Key=keys.log)
    return keys


# after the n-th operation of its kind (in a fresh store the first open, write, close and mv mark the
# record kept from the first segment, the second record the topic's location, rsm.store.locations): the
# .log's temporary file half written, written but not renamed, the .log done and the .indexes' temporary
# file just opened, the manifest's temporary file just opened
FILE_KILLS = [("write", 5), ("close", 3), ("open", 4), ("open", 5)]
# an upload with no part yet, with one part, with two (the third would go up at commit)
S3_KILLS = [("create_multipart_upload", 1), ("upload_part", 1), ("upload_part", 2)]


@pytest.mark.parametrize(("op", "n"), FILE_KILLS)
def test_kill_9_mid_copy_then_delete_leaves_nothing_file(
    tmp_path: Path, segment: Segment, op: str, n: int
) -> None:
    root = tmp_path / "store"
    configs = _file_configs(root)
    store = Store(root)
    _kill_mid_copy(tmp_path, configs, segment, op, n)
    assert [f for f in store.traces(segment) if ".tmp-" in f], (
        f"the kill left no temporary file: {store.files()}"
    )
    neighbour = _neighbour(ObjectStore.from_config(RsmConfig(configs)), configs, segment)
    before = [f for f in store.files() if neighbour.stem.rsplit("/", 1)[1] in f]
    _delete_never_finished(configs, segment)
    assert store.traces(segment) == []
    assert [f for f in store.files() if neighbour.stem.rsplit("/", 1)[1] in f] == before, (
        "a neighbour was touched"
    )
    _delete_never_finished(configs, segment)  # idempotent


@pytest.mark.parametrize(("op", "n"), S3_KILLS)
def test_kill_9_mid_copy_then_delete_leaves_nothing_s3(
    tmp_path: Path, segment: Segment, s3_server: Any, op: str, n: int
) -> None:
    bucket = s3_server.make_bucket()
    configs = _s3_configs(s3_server, bucket)
    store = Store(None, s3_server, bucket)
    _kill_mid_copy(tmp_path, configs, segment, op, n)
    assert [t for t in store.traces(segment) if t.startswith("upload ")], "the kill left no multipart upload"
    neighbour = _neighbour(ObjectStore.from_config(RsmConfig(configs)), configs, segment)
    _delete_never_finished(configs, segment)
    assert store.traces(segment) == []
    assert store.uploads() == [neighbour.log], "a neighbour's upload was touched"


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_kill_9_then_a_retried_copy_removes_the_earlier_attempts_leftovers(
    tmp_path: Path, segment: Segment, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "file":
        root = tmp_path / "store"
        configs, store = _file_configs(root), Store(root)
        op, n = "write", 7  # the .log's temporary file half written (see FILE_KILLS)
    else:
        s3_server = request.getfixturevalue("s3_server")
        bucket = s3_server.make_bucket()
        configs, store = _s3_configs(s3_server, bucket), Store(None, s3_server, bucket)
        op, n = "upload_part", 1
    _kill_mid_copy(tmp_path, configs, segment, op, n)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(segment.metadata, segment.data)  # the same segment id again
        keys = SegmentKeys.of(Location(configs["bucket"], ""), segment.metadata)
        assert store.traces(segment) == sorted(keys.all())
        md = dataclasses.replace(segment.metadata, custom_metadata=custom)
        assert read_all(rsm.fetch_log_segment(md, 0)) == segment.data.log_segment.read_bytes()
        rsm.delete_log_segment_data(md)
        assert store.traces(segment) == []
    finally:
        rsm.close()


class LostAnswerFS:
    """Fault injection around a real filesystem: the `n`-th `op` runs to completion against the real store
    (the object lands), then raises as if the connection dropped before the answer arrived."""

    def __init__(self, fs: Any, op: str, n: int) -> None:
        self._fs, self._op, self._n = fs, op, n
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _after(self, op: str) -> None:
        with self._lock:
            self._counts[op] = count = self._counts.get(op, 0) + 1
        if op == self._op and count == self._n:
            raise ConnectionResetError(f"injected: the answer to {op} #{count} was lost")

    def call_s3(self, method: str, *args: Any, **kwargs: Any) -> Any:
        out = self._fs.call_s3(method, *args, **kwargs)
        self._after(method)
        return out

    def mv(self, src: str, dst: str, **kwargs: Any) -> Any:
        out = self._fs.mv(src, dst, **kwargs)
        self._after("mv")
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


@pytest.mark.parametrize(
    ("op", "n"),
    # the first PUT records the topic's location (rsm.store.locations)
    [("complete_multipart_upload", 1), ("put_object", 2), ("put_object", 3)],
    ids=["log-complete", "indexes-put", "manifest-put"],
)
def test_a_write_whose_answer_was_lost_is_removed_when_the_copy_fails_s3(
    segment: Segment, s3_server: Any, op: str, n: int
) -> None:
    bucket = s3_server.make_bucket()
    configs = _s3_configs(s3_server, bucket)
    lossy = LostAnswerFS(s3_server.s3fs(), op, n)
    rsm = RemoteStorageManager(store=ObjectStore(lossy, Backend.S3, None, part_size=PART))
    rsm.configure(configs)
    try:
        with pytest.raises(RemoteStorageException, match="debris-2") as info:
            rsm.copy_log_segment_data(segment.metadata, segment.data)
        assert "was lost" in str(info.value)
    finally:
        rsm.close()
    assert Store(None, s3_server, bucket).traces(segment) == []


@pytest.mark.parametrize("n", [2, 3, 4], ids=["log", "indexes", "manifest"])  # mv 1: the location record
def test_a_write_whose_answer_was_lost_is_removed_when_the_copy_fails_file(
    tmp_path: Path, segment: Segment, n: int
) -> None:
    root = tmp_path / "store"
    configs = _file_configs(root)
    real = ObjectStore.from_config(RsmConfig(configs))
    rsm = RemoteStorageManager(store=ObjectStore(LostAnswerFS(real.fs, "mv", n), Backend.FILE, root))
    rsm.configure(configs)
    try:
        with pytest.raises(RemoteStorageException, match="was lost"):
            rsm.copy_log_segment_data(segment.metadata, segment.data)
    finally:
        rsm.close()
    assert Store(root).traces(segment) == []


class RetriedCreateFS:
    """Fault injection: CreateMultipartUpload reaches S3 twice, as when botocore retries a request whose
    first answer was lost; the first upload exists in the store and its id never reached the writer."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs
        self.creates = 0

    def call_s3(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "create_multipart_upload":
            self.creates += 1
            self._fs.call_s3(method, *args, **kwargs)  # its answer "lost"
        return self._fs.call_s3(method, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def test_an_upload_a_retried_create_started_is_aborted_when_the_copy_ends(
    segment: Segment, s3_server: Any
) -> None:
    bucket = s3_server.make_bucket()
    configs = _s3_configs(s3_server, bucket)
    retried = RetriedCreateFS(s3_server.s3fs())
    rsm = RemoteStorageManager(store=ObjectStore(retried, Backend.S3, None, part_size=PART))
    rsm.configure(configs)
    try:
        custom = rsm.copy_log_segment_data(segment.metadata, segment.data)
        md = dataclasses.replace(segment.metadata, custom_metadata=custom)
        assert read_all(rsm.fetch_log_segment(md, 0)) == segment.data.log_segment.read_bytes()
    finally:
        rsm.close()
    assert retried.creates == 1
    assert Store(None, s3_server, bucket).uploads() == []


def test_segment_leftovers_answers_only_the_segments_own(tmp_path: Path, segment: Segment) -> None:
    """The function `rsm migrate gc` will call: exactly the stem's temporary files, nothing that merely
    looks like one, nothing of another segment, not the objects themselves."""
    root = tmp_path / "store"
    configs = _file_configs(root)
    store = ObjectStore.from_config(RsmConfig(configs))
    keys = SegmentKeys.of(Location(BUCKET, ""), segment.metadata)
    directory = Path(store.path(BUCKET, keys.log)).parent
    directory.mkdir(parents=True)
    name = keys.log.rsplit("/", 1)[1]
    mine = [directory / temp_name(name), directory / temp_name(keys.indexes.rsplit("/", 1)[1])]
    others = [
        directory / f".{name}.tmp-0123456789",  # too short a suffix
        directory / f".{name}.tmp-0123456789AB",  # not lowercase hex
        directory / f".{name}.bak",
        directory / f"{name}.tmp-0123456789ab",  # not hidden
        directory / temp_name(name.replace(".log", ".data")),  # not one of the segment's keys
        directory / name,  # the object itself
    ]
    for p in mine + others:
        p.write_bytes(b"x")
    _neighbour(store, configs, segment)
    found = segment_leftovers(store, BUCKET, keys.stem)
    assert sorted(w.temp_path for w in found) == sorted(str(p) for p in mine)
    assert {w.key for w in found} == {keys.log, keys.indexes}
    assert all(w.started is not None for w in found)
    for w in found:
        assert store.discard(w)
        assert not store.discard(w)  # gone already
    assert all(p.exists() for p in others)
