"""Per-topic configuration: objects land where each topic's `unchecked.rsm.*` keys say, encrypted
topics store no plaintext, and segments stay reachable after a topic's bucket or prefix changes."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_segments import Segment, make_segment, read_all, write_keyring

from rsm import (
    IndexType,
    LogConfig,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    TopicIdPartition,
)
from rsm.api.metadata import uuid_to_base64
from rsm.store.layout import Location, SegmentKeys
from rsm.stored.location_record import REGISTRY_DIR
from rsm.stored.manifest import Manifest
from rsm.stored.topic_encryption import MEMORY_DIR


class Store:
    """The store kinds (a directory, or a cloud's emulator) behind one small listing API for assertions."""

    def __init__(self, kind: str, tmp: Path, s3: object | None) -> None:
        self.kind = kind
        self.tmp = tmp
        self.s3 = s3
        self.configs = {"encryption.keyring.path": str(write_keyring(tmp / "keyring.json"))}
        if kind == "file":
            self.root = tmp / "store"
            self.configs.update({"storage.backend": "file", "storage.file.root": str(self.root)})
            self.buckets = {"a": "a", "a2": "a2", "b": "b"}
        else:
            self.buckets = {name: s3.make_bucket() for name in ("a", "a2", "b")}  # type: ignore[union-attr]
            self.fs = s3.s3fs() if kind == "s3" else s3.filesystem()  # type: ignore[union-attr]
            self.configs.update(s3.rsm_configs())  # type: ignore[union-attr]

    def keys(self, bucket: str, *, records: bool = False) -> dict[str, bytes]:
        """Every object of a bucket: key -> content (the topics' location records and encryption memory only if
        `records`)."""
        out: dict[str, bytes] = {}
        if self.kind == "file":
            root = self.root / bucket
            if root.exists():
                for p in root.rglob("*"):
                    if p.is_file():
                        out[p.relative_to(root).as_posix()] = p.read_bytes()
        else:
            self.fs.invalidate_cache()
            for path in self.fs.find(bucket):
                out[path[len(bucket) + 1 :]] = self.fs.cat_file(path)
        return {k: v for k, v in out.items() if records or (REGISTRY_DIR not in k and MEMORY_DIR not in k)}


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    fixtures = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite_server"}
    s3 = request.getfixturevalue(fixtures[request.param]) if request.param in fixtures else None
    yield Store(request.param, tmp_path, s3)


def test_objects_land_where_topic_configs_say_and_survive_a_bucket_change(
    store: Store, tmp_path: Path
) -> None:
    rsm = RemoteStorageManager()
    rsm.configure({**store.configs, "bucket": store.buckets["b"]})  # broker default bucket: b
    a = TopicIdPartition(uuid.uuid4(), "topic-a", 0)
    b = TopicIdPartition(uuid.uuid4(), "topic-b", 2)
    lc_a = LogConfig({"unchecked.rsm.bucket": store.buckets["a"], "retention.ms": "1000"})
    lc_b = LogConfig(
        {
            "unchecked.rsm.bucket": store.buckets["b"],
            "unchecked.rsm.prefix": "tenant-b/",
            "unchecked.rsm.encryption.enabled": "true",
            "unchecked.rsm.encryption.key.id": "k2",
        }
    )
    seg_a = make_segment(tmp_path / "a", a, base_offset=100, batches=25, value_size=200)
    seg_b = make_segment(tmp_path / "b", b, base_offset=7, batches=25, value_size=200)
    try:
        md_a = dataclasses.replace(
            seg_a.metadata, custom_metadata=rsm.copy_log_segment_data(seg_a.metadata, seg_a.data, lc_a)
        )
        md_b = dataclasses.replace(
            seg_b.metadata, custom_metadata=rsm.copy_log_segment_data(seg_b.metadata, seg_b.data, lc_b)
        )
        stem_a = f"topic-a-{uuid_to_base64(a.topic_id)}/0/"
        objects_a = store.keys(store.buckets["a"])
        seg_id_a = md_a.remote_log_segment_id.id_base64
        assert sorted(objects_a) == [
            f"{stem_a}00000000000000000100-{seg_id_a}{suffix}" for suffix in (".indexes", ".log", ".manifest")
        ]
        objects_b = store.keys(store.buckets["b"])
        assert len(objects_b) == 3 and all(
            k.startswith("tenant-b/topic-b-") and "/2/0000000000000000000" in k for k in objects_b
        )
        _assert_no_plaintext(seg_b, objects_b)
        manifest_b = Manifest.from_bytes(next(v for k, v in objects_b.items() if k.endswith(".manifest")))
        assert manifest_b.encryption is not None and manifest_b.encryption.key_id == "k2"
        assert (
            manifest_b.segment.start_offset == 7
            and manifest_b.segment.end_offset == seg_b.metadata.end_offset
        )
        # topic A moves to another bucket: new segments go there, old ones still fetch and delete
        lc_a2 = LogConfig({"unchecked.rsm.bucket": store.buckets["a2"]})
        assert read_all(rsm.fetch_log_segment(md_a, 0, None, lc_a2)) == seg_a.data.log_segment.read_bytes()
        assert read_all(rsm.fetch_index(md_a, IndexType.OFFSET, lc_a2)) == seg_a.files()["OFFSET"]
        seg_a2 = make_segment(tmp_path / "a2", a, base_offset=10_000, batches=3)
        rsm.copy_log_segment_data(seg_a2.metadata, seg_a2.data, lc_a2)
        assert len(store.keys(store.buckets["a2"])) == 3
        rsm.delete_log_segment_data(md_a, lc_a2)
        rsm.delete_log_segment_data(md_a, lc_a2)  # again: idempotent
        assert store.keys(store.buckets["a"]) == {}
        assert len(store.keys(store.buckets["a2"])) == 3
        with pytest.raises(RemoteResourceNotFoundException):
            rsm.fetch_log_segment(md_a, 0, None, lc_a2)
        # without custom metadata, a segment is looked up where today's config points
        plain_b = dataclasses.replace(md_b, custom_metadata=None)
        assert (
            read_all(rsm.fetch_log_segment(plain_b, 5, 50, lc_b)) == seg_b.data.log_segment.read_bytes()[5:51]
        )
    finally:
        rsm.close()


def _assert_no_plaintext(seg: Segment, objects: dict[str, bytes]) -> None:
    """No record value, key, batch body or index content of the segment appears in any stored object."""
    raw = seg.data.log_segment.read_bytes()
    needles = [raw[i : i + 24] for i in range(61, len(raw) - 24, 97)]
    needles += [f"value-{o}-".encode() for o in range(seg.metadata.start_offset, seg.metadata.end_offset + 1)]
    needles += [f"key-{o}".encode() for o in range(seg.metadata.start_offset, seg.metadata.end_offset + 1)]
    for name, content in seg.files().items():
        if len(content) >= 16:
            needles.append(content[:16])
        assert name
    for key, blob in objects.items():
        for needle in needles:
            assert needle not in blob, (key, needle)


def test_custom_metadata_fits_128_bytes_at_the_longest_bucket_and_prefix(tmp_path: Path) -> None:
    rsm = RemoteStorageManager()
    rsm.configure({"storage.backend": "file", "storage.file.root": str(tmp_path / "store")})
    tip = TopicIdPartition(uuid.uuid4(), "t" * 200, 0)  # 249 + 23 overflows a file name (255)
    seg = make_segment(tmp_path / "seg", tip, batches=2)
    lc = LogConfig({"unchecked.rsm.bucket": "b" * 63, "unchecked.rsm.prefix": "p" * 59 + "/"})
    try:
        custom = rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        assert custom is not None and len(custom.value) <= 128
        md = dataclasses.replace(seg.metadata, custom_metadata=custom)
        assert read_all(rsm.fetch_log_segment(md, 0, None, LogConfig())) == seg.data.log_segment.read_bytes()
        keys = SegmentKeys.of(Location("b" * 63, "p" * 59 + "/"), md)
        assert (tmp_path / "store" / keys.bucket / keys.manifest).exists()
    finally:
        rsm.close()


def test_key_rotation_keeps_old_segments_readable(tmp_path: Path) -> None:
    keyring = write_keyring(tmp_path / "keyring.json", ("k1",))
    rsm = RemoteStorageManager()
    rsm.configure(
        {
            "storage.backend": "file",
            "storage.file.root": str(tmp_path / "store"),
            "encryption.keyring.path": str(keyring),
            "encryption.enabled": "true",
            "encryption.key.id": "k1",
        }
    )
    tip = TopicIdPartition(uuid.uuid4(), "rot", 0)
    old = make_segment(tmp_path / "old", tip, base_offset=0, batches=5)
    try:
        md_old = dataclasses.replace(
            old.metadata, custom_metadata=rsm.copy_log_segment_data(old.metadata, old.data)
        )
        # rotate: add k2 to the file (picked up without restart) and point the topic at it
        import json

        from rsm.config.keyring import generate_key

        doc = json.loads(keyring.read_text())
        doc["k2"] = generate_key()
        keyring.write_text(json.dumps(doc))
        import os

        os.utime(keyring, (1, 1))  # make the mtime change observable even within one clock tick
        lc = LogConfig({"unchecked.rsm.encryption.key.id": "k2"})
        new = make_segment(tmp_path / "new", tip, base_offset=1000, batches=5)
        md_new = dataclasses.replace(
            new.metadata, custom_metadata=rsm.copy_log_segment_data(new.metadata, new.data, lc)
        )
        assert read_all(rsm.fetch_log_segment(md_old, 0, None, lc)) == old.data.log_segment.read_bytes()
        assert read_all(rsm.fetch_log_segment(md_new, 0, None, lc)) == new.data.log_segment.read_bytes()
        manifests = sorted((tmp_path / "store").rglob("*.manifest"))
        assert sorted(Manifest.from_bytes(p.read_bytes()).encryption.key_id for p in manifests) == [
            "k1",
            "k2",
        ]  # type: ignore[union-attr]
    finally:
        rsm.close()


def test_segments_read_back_from_manifests_alone(store: Store, tmp_path: Path) -> None:
    """What the Spark reader and the migration tool do: list manifests, open readers, no broker metadata."""
    from rsm.config.keyring import Keyring
    from rsm.fetch.reader import SegmentReader, list_manifests

    rsm = RemoteStorageManager()
    rsm.configure({**store.configs, "bucket": store.buckets["b"], "chunk.size": "4096"})
    tip = TopicIdPartition(uuid.uuid4(), "scan", 3)
    lc = LogConfig({"unchecked.rsm.prefix": "data/", "unchecked.rsm.encryption.enabled": "true",
                    "unchecked.rsm.encryption.key.id": "k1"})  # fmt: skip
    segs = [make_segment(tmp_path / f"s{i}", tip, base_offset=i * 1000, batches=12, seed=i) for i in range(3)]
    try:
        for seg in segs:
            rsm.copy_log_segment_data(seg.metadata, seg.data, lc)
        keys = list_manifests(rsm.store, store.buckets["b"], f"data/scan-{uuid_to_base64(tip.topic_id)}/3/")
        assert len(keys) == 3 and list_manifests(rsm.store, store.buckets["b"], "nothing-here/") == []
        assert list_manifests(rsm.store, store.buckets["b"], "data/sc") == keys
        keyring = Keyring(store.configs["encryption.keyring.path"])
        for key, seg in zip(keys, segs, strict=True):  # keys sort by base offset
            reader = SegmentReader.open(rsm.store, store.buckets["b"], key, keyring)
            raw = seg.data.log_segment.read_bytes()
            assert reader.manifest.segment.start_offset == seg.metadata.start_offset
            assert reader.read_range(0, len(raw)) == raw
            assert reader.read_range(4000, 9000) == raw[4000:9000]
            assert reader.index(IndexType.TIMESTAMP) == seg.files()["TIMESTAMP"]
    finally:
        rsm.close()
