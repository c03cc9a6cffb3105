"""Failure behaviour: interrupted copies leave no manifest, corrupt segments upload nothing, missing things
raise RemoteResourceNotFoundException, retries and deletes are idempotent, secrets never leak."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_segments import make_segment, read_all, write_keyring

from rsm import (
    IndexType,
    LogConfig,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.errors import RecordValidationError, SegmentIntegrityError
from rsm.config.settings import Backend, RsmConfig
from rsm.store.locations import LocationRegistry
from rsm.store.objects import ObjectStore
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.manifest import Manifest


class Injected(OSError):
    pass


class FailingFS:
    """Wraps a real fsspec filesystem; the `fail_at`-th write-side operation raises.

    Write-side operations: opening a file for writing, each write to it, closing it and renaming (the
    file store's commit); S3 requests that create or complete objects and parts. Counting them all lets a
    test interrupt a copy at every step.
    """

    def __init__(self, fs: Any, fail_at: int | None) -> None:
        self._fs = fs
        self.fail_at = fail_at
        self.ops = 0
        self._lock = threading.Lock()

    def tick(self, what: str) -> None:
        with self._lock:
            self.ops += 1
            if self.fail_at is not None and self.ops == self.fail_at:
                raise Injected(f"injected failure at operation {self.ops} ({what})")

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "w" in mode:
            self.tick(f"open {path}")
            return _FailingFile(self, self._fs.open(path, mode, **kwargs))
        return self._fs.open(path, mode, **kwargs)

    def call_s3(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method in ("create_multipart_upload", "upload_part", "complete_multipart_upload", "put_object"):
            self.tick(f"{method} {kwargs.get('Key')}")
        return self._fs.call_s3(method, *args, **kwargs)

    def mv(self, src: str, dst: str, **kwargs: Any) -> Any:
        self.tick(f"mv {dst}")
        return self._fs.mv(src, dst, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


class _FailingFile:
    def __init__(self, owner: FailingFS, f: Any) -> None:
        self._owner = owner
        self._f = f

    def write(self, data: Any) -> int:
        self._owner.tick("write")
        return self._f.write(data)

    def close(self) -> None:
        self._owner.tick("close")
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_owner", "_f"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._f, name, value)


def _file_configs(root: Path, **extra: str) -> dict[str, str]:
    return {"storage.backend": "file", "storage.file.root": str(root), "chunk.size": "4096", **extra}


def _files(root: Path) -> list[str]:
    """Objects under a file store's root, less the topics' location records (rsm.store.locations)."""
    return (
        sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and REGISTRY_DIR not in p.as_posix()
        )
        if root.exists()
        else []
    )


def _not_fresh(configs: dict[str, str]) -> None:
    """Give the store a location record first, so that a copy's store operations are the copy's own: in a
    fresh store the first copy also marks the record (`mark_scanned_if_fresh`, never failing the copy)."""
    config = RsmConfig(configs)
    registry = LocationRegistry(ObjectStore.from_config(config), str(config.get("bucket")), "")
    registry.mark_scanned(0, [], "test")


def test_copy_interrupted_at_every_step_leaves_no_manifest_and_a_retry_succeeds(tmp_path: Path) -> None:
    root = tmp_path / "store"
    configs = _file_configs(root, **{"encryption.keyring.path": str(write_keyring(tmp_path / "k.json"))})
    lc = LogConfig({"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k1"})
    tip = TopicIdPartition(uuid.uuid4(), "flaky", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=40, value_size=300)
    original = seg.data.log_segment.read_bytes()
    _not_fresh(configs)
    real = ObjectStore.from_config(RsmConfig(configs)).fs
    fail_at, interrupted = 1, 0
    while True:
        failing = FailingFS(real, fail_at)
        store = ObjectStore(failing, Backend.FILE, root)
        rsm = RemoteStorageManager(store=store)
        rsm.configure(configs)
        try:
            rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        except RemoteStorageException as exc:
            interrupted += 1
            assert "flaky-0" in str(exc) and seg.metadata.remote_log_segment_id.id_base64 in str(exc)
            assert not [f for f in _files(root) if f.endswith(".manifest")], (
                f"manifest left after failure {fail_at}"
            )
            assert not [f for f in _files(root) if ".tmp-" in f], "temporary files left behind"
            fail_at += 1
            continue
        finally:
            rsm.close()
        break
    assert interrupted >= 6  # .log open/writes/close/rename, .indexes ..., manifest ...
    # a healthy retry over whatever the failures left behind succeeds
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        )
        assert read_all(rsm.fetch_log_segment(md, 0)) == original
        assert len([f for f in _files(root) if f.endswith(".manifest")]) == 1
    finally:
        rsm.close()


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, 5, 6])
def test_interrupted_copy_on_s3_leaves_no_manifest(tmp_path: Path, s3_server: Any, fail_at: int) -> None:
    bucket = s3_server.make_bucket()
    configs = {
        **s3_server.rsm_configs(),
        "storage.s3.multipart.part.size": str(5 << 20),
        "bucket": bucket,
        "chunk.size": str(1 << 20),
        "compression.enabled": "false",
    }
    tip = TopicIdPartition(uuid.uuid4(), "flaky-s3", 1)
    seg = make_segment(
        tmp_path / "seg", tip, batches=600, records_per_batch=20, value_size=1000, compressible=False
    )
    _not_fresh(configs)
    real = s3_server.s3fs()
    failing = FailingFS(real, fail_at)
    rsm = RemoteStorageManager(store=ObjectStore(failing, Backend.S3, None, part_size=5 << 20))
    rsm.configure(configs)
    with pytest.raises(RemoteStorageException, match="flaky-s3-1"):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.close()
    assert failing.ops == fail_at  # the failure happened where it was injected, and the copy stopped there
    real.invalidate_cache()
    assert not [p for p in real.find(bucket) if p.endswith(".manifest")]
    assert not real.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads"), (
        "multipart upload not aborted"
    )
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.data.log_segment.read_bytes()
    finally:
        rsm.close()


def _corrupt(path: Path, position: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0x40
    path.write_bytes(bytes(raw))


def test_corrupt_segment_is_refused_and_nothing_is_uploaded(tmp_path: Path) -> None:
    root = tmp_path / "store"
    tip = TopicIdPartition(uuid.uuid4(), "bad", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=10)
    raw = seg.data.log_segment.read_bytes()
    second = 12 + int.from_bytes(raw[8:12], "big")  # position of the second batch
    rsm = RemoteStorageManager()
    rsm.configure(_file_configs(root))
    try:
        _corrupt(seg.data.log_segment, second + 70)  # inside the second batch's records
        with pytest.raises(SegmentIntegrityError) as info:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert info.value.position == second and str(seg.data.log_segment) in str(info.value)
        assert "CRC-32C mismatch" in str(info.value)
        assert _files(root) == []
        # offsets outside the metadata's range
        good = make_segment(tmp_path / "good", tip, batches=10)
        narrow = dataclasses.replace(good.metadata, end_offset=good.metadata.end_offset - 1)
        with pytest.raises(SegmentIntegrityError, match="outside the segment's range"):
            rsm.copy_log_segment_data(narrow, good.data)
        # a size that disagrees with the metadata
        wrong = dataclasses.replace(
            good.metadata, segment_size_in_bytes=good.metadata.segment_size_in_bytes + 1
        )
        with pytest.raises(SegmentIntegrityError, match="metadata states"):
            rsm.copy_log_segment_data(wrong, good.data)
        # a truncated last batch
        truncated = good.data.log_segment.read_bytes()[:-5]
        good.data.log_segment.write_bytes(truncated)
        short = dataclasses.replace(good.metadata, segment_size_in_bytes=len(truncated))
        with pytest.raises(SegmentIntegrityError, match="past the end"):
            rsm.copy_log_segment_data(short, good.data)
        assert _files(root) == []
    finally:
        rsm.close()


def test_missing_segment_and_missing_optional_index_are_not_found(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    rsm.configure(_file_configs(tmp_path / "store"))
    tip = TopicIdPartition(uuid.uuid4(), "nf", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=3, with_txn=False)
    try:
        with pytest.raises(RemoteResourceNotFoundException, match="nf-0"):
            rsm.fetch_log_segment(seg.metadata, 0)
        with pytest.raises(RemoteResourceNotFoundException):
            rsm.fetch_index(seg.metadata, IndexType.OFFSET)
        rsm.delete_log_segment_data(seg.metadata)  # never copied: fine
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        with pytest.raises(RemoteResourceNotFoundException, match="TRANSACTION"):
            rsm.fetch_index(md, IndexType.TRANSACTION)
        assert read_all(rsm.fetch_index(md, IndexType.LEADER_EPOCH)) == seg.data.leader_epoch_index
        manifest = Manifest.from_bytes(next((tmp_path / "store").rglob("*.manifest")).read_bytes())
        assert manifest.segment.txn_idx_empty is True
    finally:
        rsm.close()


def test_copy_retry_overwrites_and_delete_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rsm = RemoteStorageManager()
    rsm.configure(_file_configs(root))
    tip = TopicIdPartition(uuid.uuid4(), "again", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=8)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data)
        )
        assert read_all(rsm.fetch_log_segment(md, 0)) == seg.data.log_segment.read_bytes()
        first = Manifest.from_bytes(next(root.rglob("*.manifest")).read_bytes()).copy_id
        # the same segment id copied again (Kafka retries after a failure): overwritten, readable
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert Manifest.from_bytes(next(root.rglob("*.manifest")).read_bytes()).copy_id != first
        assert len(_files(root)) == 3
        assert read_all(rsm.fetch_log_segment(md, 17, 300)) == seg.data.log_segment.read_bytes()[17:301]
        rsm.delete_log_segment_data(md)
        rsm.delete_log_segment_data(md)
        assert _files(root) == []
    finally:
        rsm.close()


def test_secrets_never_in_exceptions_logs_manifests_or_describe(
    tmp_path: Path, s3_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "SUPERSECRETaccess/keyVALUE1234567890"
    keyring = write_keyring(tmp_path / "keyring.json")
    key_material = list(json.loads(keyring.read_text()).values())
    configs = {
        **s3_server.rsm_configs(),
        "storage.s3.secret.access.key": secret,  # wrong: moto rejects nothing, so also test a missing bucket
        "bucket": "no-such-bucket-" + uuid.uuid4().hex[:8],
        "encryption.keyring.path": str(keyring),
        "encryption.enabled": "true",
        "encryption.key.id": "k1",
    }
    caplog.set_level(logging.DEBUG, logger="rsm")
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    tip = TopicIdPartition(uuid.uuid4(), "sec", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=3)
    messages: list[str] = []
    try:
        with pytest.raises(RemoteStorageException) as info:
            rsm.copy_log_segment_data(seg.metadata, seg.data)
        messages.append(str(info.value))
        assert "sec-0" in str(info.value) and "no-such-bucket" in str(info.value)
        entries = rsm.config.describe(LogConfig({}))
        secret_entry = next(e for e in entries if e.name == "storage.s3.secret.access.key")
        assert secret_entry.value == "[hidden]" and secret_entry.sensitive
        messages += [repr(e) for e in entries] + [repr(rsm.config)]
        # a working copy: the manifest holds only the wrapped data key
        bucket = s3_server.make_bucket()
        lc = LogConfig({"unchecked.rsm.bucket": bucket})
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        )
        fs = s3_server.s3fs()
        manifest_bytes = fs.cat_file(next(p for p in fs.find(bucket) if p.endswith(".manifest")))
        messages.append(manifest_bytes.decode())
        assert read_all(rsm.fetch_log_segment(md, 0, None, lc)) == seg.data.log_segment.read_bytes()
    finally:
        rsm.close()
    messages += [r.getMessage() for r in caplog.records]
    blob = "\n".join(messages)
    assert secret not in blob
    for key in key_material:
        assert key not in blob
        assert base64.b64decode(key).hex() not in blob


def test_record_validation_policy_fails_or_tiers_per_topic(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rsm = RemoteStorageManager()
    rsm.configure(
        _file_configs(
            root, **{"record.validation.policy.class.name": "rsm.validation:RequireHeaderValidationPolicy"}
        )
    )
    tip = TopicIdPartition(uuid.uuid4(), "validated", 0)
    # the helper's records carry header "h" on even record indexes only
    seg = make_segment(tmp_path / "seg", tip, batches=6, records_per_batch=4)
    try:
        with pytest.raises(RecordValidationError, match="requires records to contain a header with key: h"):
            rsm.copy_log_segment_data(seg.metadata, seg.data, LogConfig({"record.validation.policy": "h"}))
        assert _files(root) == []
        lc = LogConfig(
            {
                "unchecked.record.validation.policy": "h",
                "unchecked.rsm.record.validation.on.violation": "tier",
            }
        )
        rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        report = Manifest.from_bytes(next(root.rglob("*.manifest")).read_bytes()).validation
        assert report is not None and report["policy"] == "h" and report["violation_count"] > 0
        assert all(v["offset"] % 1 == 0 and "header with key: h" in v["reason"] for v in report["violations"])
        # a topic without the policy config is not validated
        other = make_segment(tmp_path / "other", TopicIdPartition(uuid.uuid4(), "free", 0), batches=3)
        rsm.copy_log_segment_data(other.metadata, other.data, LogConfig({}))
    finally:
        rsm.close()


def test_concurrent_fetches_from_many_threads(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    rsm.configure(_file_configs(tmp_path / "store", **{"cache.chunk.bytes": str(64 << 10)}))
    tip = TopicIdPartition(uuid.uuid4(), "busy", 0)
    segs = [
        make_segment(tmp_path / f"s{i}", tip, base_offset=i * 10_000, batches=30, seed=i) for i in range(4)
    ]
    mds = [
        dataclasses.replace(s.metadata, custom_metadata=rsm.copy_log_segment_data(s.metadata, s.data))
        for s in segs
    ]
    originals = [s.data.log_segment.read_bytes() for s in segs]
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        import random

        rng = random.Random(n)
        try:
            for _ in range(30):
                i = rng.randrange(len(segs))
                start = rng.randrange(len(originals[i]))
                end = rng.randrange(start, len(originals[i]))
                assert read_all(rsm.fetch_log_segment(mds[i], start, end)) == originals[i][start : end + 1]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rsm.close()
    assert not errors, errors[0]


def test_tampered_chunk_and_missing_key_fail_clearly(tmp_path: Path) -> None:
    root = tmp_path / "store"
    keyring = write_keyring(tmp_path / "k.json", ("k1", "k2"))
    configs = _file_configs(root, **{"encryption.keyring.path": str(keyring)})
    lc = LogConfig({"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k2"})
    tip = TopicIdPartition(uuid.uuid4(), "tamper", 0)
    seg = make_segment(tmp_path / "seg", tip, batches=30)
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        )
        log_object = next(root.rglob("*.log"))
        stored = bytearray(log_object.read_bytes())
        stored[len(stored) // 2] ^= 0x01  # inside some chunk's ciphertext
        log_object.write_bytes(bytes(stored))
        stream = rsm.fetch_log_segment(md, 0)
        with pytest.raises(RemoteStorageException, match=r"does not authenticate") as info:
            stream.read()
        stream.close()
        assert "tamper-0" in str(info.value) and log_object.name in str(info.value)
    finally:
        rsm.close()
    # the key the segment was wrapped with disappears from the keyring
    keyring.write_text(json.dumps({"k1": json.loads(keyring.read_text())["k1"]}))
    rsm = RemoteStorageManager()
    rsm.configure(configs)
    try:
        with pytest.raises(RemoteStorageException, match="key id 'k2' is not in the keyring"):
            rsm.fetch_log_segment(md, 0)
    finally:
        rsm.close()


def test_a_copy_replaced_by_another_process_is_reread_not_served_stale(tmp_path: Path) -> None:
    root = tmp_path / "store"
    configs = _file_configs(root, **{"encryption.keyring.path": str(write_keyring(tmp_path / "k.json"))})
    lc = LogConfig({"unchecked.rsm.encryption.enabled": "true", "unchecked.rsm.encryption.key.id": "k1"})
    seg = make_segment(tmp_path / "seg", TopicIdPartition(uuid.uuid4(), "twice", 0), batches=20)
    raw = seg.data.log_segment.read_bytes()
    reader, writer = RemoteStorageManager(), RemoteStorageManager()
    reader.configure(configs)
    writer.configure(configs)
    try:
        md = dataclasses.replace(
            seg.metadata, custom_metadata=writer.copy_log_segment_data(seg.metadata, seg.data, lc)
        )
        assert read_all(reader.fetch_log_segment(md, 0, None, lc)) == raw  # manifest now cached by the reader
        writer.copy_log_segment_data(seg.metadata, seg.data, lc)  # a retry elsewhere: new data key
        reader._state.chunks.clear()
        try:
            got = read_all(reader.fetch_log_segment(md, 0, None, lc))
        except RemoteStorageException:
            got = read_all(
                reader.fetch_log_segment(md, 0, None, lc)
            )  # Kafka retries; the stale manifest is gone
        assert got == raw
    finally:
        reader.close()
        writer.close()
